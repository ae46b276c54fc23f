// Checkpointer over the in-memory store: write, finalize, list, verify,
// re-slice onto another shard count, detect damage, prune.
#include "server/checkpointer.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

constexpr int64_t kParams = 1000;

ShardSnapshot Snap(int shard, int shards, int64_t step, const std::vector<float>& all) {
  std::vector<int64_t> b = SplitAligned(kParams, shards, 8);
  ShardSnapshot s;
  s.job = "j";
  s.shard = shard;
  s.num_shards = shards;
  s.num_params = kParams;
  s.step = step;
  s.epoch = 1;
  s.range = Range{b[shard], b[shard + 1]};
  s.spec_json = R"({"job":"j"})";
  s.keep_last = 2;
  s.values.assign(all.begin() + b[shard], all.begin() + b[shard + 1]);
  s.state.push_back(s.values);
  for (float& v : s.state[0]) v = -v;
  return s;
}

class CheckpointerTest : public ::testing::Test {
 protected:
  CheckpointerTest() {
    auto store = std::make_unique<MemoryStore>();
    store_ = store.get();
    ck_ = std::make_unique<Checkpointer>(std::move(store), absl::Seconds(5));
    all_.resize(kParams);
    std::iota(all_.begin(), all_.end(), 1.f);
  }
  void Write(int shards, int64_t step) {
    for (int s = 0; s < shards; ++s) ASSERT_TRUE(ck_->Submit(Snap(s, shards, step, all_)).ok());
    ck_->Drain();
  }
  MemoryStore* store_;
  std::unique_ptr<Checkpointer> ck_;
  std::vector<float> all_;
};

// Checkpoints are private: through the real store, every file written is
// 0600 and every folder created (the root too, when the store makes it)
// 0700, even under umask 0.
TEST(CheckpointerFilesTest, FilesAreOwnerOnly) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string parent = std::string(tmp ? tmp : "/tmp") + "/modes-XXXXXX";
  ASSERT_NE(mkdtemp(parent.data()), nullptr);
  const std::string root = parent + "/checkpoints";
  const mode_t old_umask = umask(0);
  {
    Checkpointer ck(std::make_unique<LocalFsStore>(root), absl::Seconds(5));
    std::vector<float> all(kParams);
    std::iota(all.begin(), all.end(), 1.f);
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(ck.Submit(Snap(s, 2, 10, all)).ok());
    ck.Drain();
    ASSERT_TRUE(ck.Read("j", -1).ok());
  }
  umask(old_umask);
  int files = 0, dirs = 0;
  std::vector<std::string> paths = {root};
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    paths.push_back(e.path().string());
  }
  for (const std::string& p : paths) {
    struct stat st;
    ASSERT_EQ(stat(p.c_str(), &st), 0) << p;
    if (S_ISDIR(st.st_mode)) {
      ++dirs;
      EXPECT_EQ(st.st_mode & 07777, 0700u) << p;
    } else {
      ++files;
      EXPECT_EQ(st.st_mode & 07777, 0600u) << p;
    }
  }
  EXPECT_GE(dirs, 3) << "root, job, step";
  EXPECT_GE(files, 3) << "two shards and a manifest";
}

TEST_F(CheckpointerTest, WritesFinalizesAndReslicesOntoAnotherShardCount) {
  Write(2, 10);
  auto m = ck_->Read("j", -1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step, 10);
  EXPECT_EQ(m->num_shards, 2);
  EXPECT_TRUE(ck_->Verify(*m)->empty());
  std::vector<int64_t> b = SplitAligned(kParams, 3, 8);
  for (int s = 0; s < 3; ++s) {
    const Range r{b[s], b[s + 1]};
    std::vector<float> values(r.size()), state(r.size());
    ASSERT_TRUE(ck_->Load(*m, r, values.data(), {state.data()}).ok());
    for (int64_t i = 0; i < r.size(); ++i) {
      ASSERT_EQ(values[i], all_[r.begin + i]);
      ASSERT_EQ(state[i], -all_[r.begin + i]);
    }
  }
  EXPECT_EQ(ck_->Progress("j").last_step, 10);
}

// Export's read: any range of the parameters alone, across shard files,
// without the optimizer state; nothing outside [0, num_params).
TEST_F(CheckpointerTest, ReadsAnyRangeOfTheParametersAlone) {
  Write(3, 10);
  auto m = ck_->Read("j", 10);
  ASSERT_TRUE(m.ok()) << m.status();
  for (Range r :
       {Range{0, kParams}, Range{0, 0}, Range{kParams, kParams}, Range{5, 997}, Range{300, 340}}) {
    std::vector<float> values(r.size(), -1.f);
    ASSERT_TRUE(ck_->ReadParams(*m, r, values.data()).ok());
    for (int64_t i = 0; i < r.size(); ++i) ASSERT_EQ(values[i], all_[r.begin + i]) << i;
  }
  std::vector<float> values(2);
  EXPECT_EQ(ck_->ReadParams(*m, Range{kParams - 1, kParams + 1}, values.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ck_->ReadParams(*m, Range{-1, 1}, values.data()).code(), absl::StatusCode::kOutOfRange);
}

// Each shard counts the skips of the tensors in its range; the manifest
// holds their element-wise maximum (and nothing when no tensor was skipped).
TEST_F(CheckpointerTest, TheManifestMergesTheShardsTensorSkips) {
  ShardSnapshot a = Snap(0, 2, 10, all_), b = Snap(1, 2, 10, all_);
  a.tensor_skips = {2, 0, 0};
  b.tensor_skips = {0, 1, 3};
  ASSERT_TRUE(ck_->Submit(a).ok());
  ASSERT_TRUE(ck_->Submit(b).ok());
  ck_->Drain();
  auto m = ck_->Read("j", 10);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tensor_skips, (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(m->shards[1].tensor_skips, (std::vector<int64_t>{0, 1, 3}));
  Write(2, 11);
  m = ck_->Read("j", 11);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->tensor_skips.empty());
}

TEST_F(CheckpointerTest, IncompleteCheckpointsDoNotExist) {
  ASSERT_TRUE(ck_->Submit(Snap(1, 2, 7, all_)).ok());  // shard 0 never writes
  Write(2, 4);
  auto list = ck_->List("j");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 4);
  EXPECT_EQ(ck_->Read("j", 7).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointerTest, DamageIsFoundAndNamed) {
  Write(2, 3);
  auto m = ck_->Read("j", 3);
  ASSERT_TRUE(m.ok());
  std::string* file = store_->Mutable("j/step-0000000003/shard-00001.bin");
  ASSERT_NE(file, nullptr);
  (*file)[17] ^= 0x40;
  auto problems = ck_->Verify(*m);
  ASSERT_EQ(problems->size(), 1u);
  EXPECT_NE((*problems)[0].find("shard-00001.bin"), std::string::npos) << (*problems)[0];
  std::vector<float> values(kParams), state(kParams);
  absl::Status s = ck_->Load(*m, Range{0, kParams}, values.data(), {state.data()});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("shard-00001.bin"), std::string::npos) << s;
  file->resize(file->size() - 4);
  EXPECT_NE((*ck_->Verify(*m))[0].find("bytes"), std::string::npos);
}

TEST_F(CheckpointerTest, KeepsTheLastKAndDeletes) {
  for (int64_t step : {1, 2, 3, 4}) Write(1, step);
  auto list = ck_->List("j");
  ASSERT_EQ(list->size(), 2u);  // keep_last = 2
  EXPECT_EQ((*list)[0].step, 3);
  ASSERT_TRUE(ck_->Delete("j", 3).ok());
  EXPECT_EQ(ck_->List("j")->size(), 1u);
  EXPECT_EQ(ck_->Delete("j", 3).code(), absl::StatusCode::kNotFound);
}

// A store whose Put blocks until the test opens the gate.
class GatedStore : public MemoryStore {
 public:
  absl::Status Put(const std::string& path, const std::vector<Chunk>& chunks) override {
    {
      absl::MutexLock lock(&mu_);
      ++puts_waiting_;
      mu_.Await(absl::Condition(&open_));
      --puts_waiting_;
    }
    return MemoryStore::Put(path, chunks);
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  bool WriterBlocked() {
    absl::MutexLock lock(&mu_);
    return puts_waiting_ > 0;
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int puts_waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(CheckpointerBackpressureTest, SubmitWaitsForRoomAndOnlyWhenAskedTo) {
  auto owned = std::make_unique<GatedStore>();
  GatedStore* store = owned.get();
  Checkpointer ck(std::move(owned), absl::Seconds(5), /*max_queued=*/1);
  std::vector<float> all(kParams, 1.f);
  ASSERT_TRUE(ck.Submit(Snap(0, 1, 1, all)).ok());  // taken by the writer, which blocks
  for (int i = 0; i < 200 && !store->WriterBlocked(); ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(store->WriterBlocked());
  ASSERT_TRUE(ck.Submit(Snap(0, 1, 2, all)).ok());  // queued: the queue is full now
  // Threads that must not block still queue at once.
  ASSERT_TRUE(ck.Submit(Snap(0, 1, 3, all), /*wait=*/false).ok());
  absl::Notification submitted;
  std::thread compute([&] {
    EXPECT_TRUE(ck.Submit(Snap(0, 1, 4, all)).ok());
    submitted.Notify();
  });
  EXPECT_FALSE(submitted.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  store->Open();  // the disk catches up
  EXPECT_TRUE(submitted.WaitForNotificationWithTimeout(absl::Seconds(10)));
  compute.join();
  ck.Drain();
  EXPECT_EQ(ck.backpressure_waits(), 1);
  EXPECT_GT(ck.backpressure_time(), absl::ZeroDuration());  // it blocked: see above
  auto list = ck.List("j");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);  // keep_last 2 of the 4, every one written
  EXPECT_EQ((*list)[1].step, 4);
}

TEST(CheckpointerBackpressureTest, ShutdownReleasesAWaitingSubmit) {
  auto owned = std::make_unique<GatedStore>();
  GatedStore* store = owned.get();
  auto ck = std::make_unique<Checkpointer>(std::move(owned), absl::Seconds(5), 1);
  std::vector<float> all(kParams, 1.f);
  ASSERT_TRUE(ck->Submit(Snap(0, 1, 1, all)).ok());
  for (int i = 0; i < 200 && !store->WriterBlocked(); ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(ck->Submit(Snap(0, 1, 2, all)).ok());
  absl::Notification done;
  absl::Status waited;
  Checkpointer* raw = ck.get();
  std::thread compute([&] {
    waited = raw->Submit(Snap(0, 1, 3, all));
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(100));
  // Shutting down releases the waiting Submit at once, while the writer is
  // still busy (the destructor then joins it: open the gate after that).
  std::thread stopper([&] { ck.reset(); });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  store->Open();
  stopper.join();
  compute.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
}

TEST(CheckpointerDisabledTest, SaysHowToEnable) {
  Checkpointer ck(nullptr);
  absl::Status s = ck.Submit(ShardSnapshot{});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--checkpoint_dir"), std::string::npos);
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

std::string CheckpointDirName(int64_t step) { return CheckpointDir("j", step).substr(2); }

// A small volume: Put fails (as ENOSPC would) for the shards in `full`.
class FullStore : public MemoryStore {
 public:
  absl::Status Put(const std::string& path, const std::vector<Chunk>& chunks) override {
    {
      absl::MutexLock lock(&mu_);
      for (int s : full_) {
        if (path.find("/" + ShardFileName(s)) != std::string::npos) {
          return absl::ResourceExhaustedError(
              absl::StrCat("writing ", path, ": No space left on device"));
        }
      }
    }
    return MemoryStore::Put(path, chunks);
  }
  void Fill(std::vector<int> shards) {
    absl::MutexLock lock(&mu_);
    full_ = std::move(shards);
  }

 private:
  absl::Mutex mu_;
  std::vector<int> full_ ABSL_GUARDED_BY(mu_);
};

// A full disk: every failed checkpoint goes whole (the shards that did
// write lose their files too), the complete one before it stays, and
// Progress says since which step checkpoints fail and why, until one
// succeeds again.
TEST(CheckpointerDiskFullTest, FailedCheckpointsLeaveNothingAndSayWhenTheyStarted) {
  auto owned = std::make_unique<FullStore>();
  FullStore* store = owned.get();
  Checkpointer ck(std::move(owned), absl::Seconds(5));
  std::vector<float> all(kParams);
  std::iota(all.begin(), all.end(), 1.f);
  auto write = [&](int64_t step) {
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(ck.Submit(Snap(s, 2, step, all)).ok());
    ck.Drain();
  };
  auto dirs = [&] { return *store->List("j"); };
  write(10);
  ASSERT_EQ(dirs(), std::vector<std::string>{CheckpointDirName(10)});
  EXPECT_EQ(ck.Progress("j").failing_since, -1);

  store->Fill({1});  // shard 1's volume is full: shard 0's file of step 20 was written
  write(20);
  EXPECT_EQ(dirs(), std::vector<std::string>{CheckpointDirName(10)}) << "a partial step 20 stays";
  CheckpointProgress p = ck.Progress("j");
  EXPECT_EQ(p.failing_since, 20);
  EXPECT_NE(p.error.find("step 20"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("No space left"), std::string::npos) << p.error;  // shard 1's, the first

  store->Fill({0});  // now shard 0's: shard 1 wrote its file, shard 0 gives the step up
  write(30);
  EXPECT_EQ(dirs(), std::vector<std::string>{CheckpointDirName(10)}) << "a partial step 30 stays";
  EXPECT_EQ(ck.Progress("j").failing_since, 20) << "still failing since the first failure";
  EXPECT_NE(ck.Progress("j").error.find("step 30"), std::string::npos);
  ASSERT_EQ(ck.List("j")->size(), 1u);
  EXPECT_EQ(ck.List("j")->back().step, 10) << "the last good checkpoint is kept to roll back to";

  store->Fill({});
  write(40);
  EXPECT_EQ(ck.Progress("j").failing_since, -1);
  EXPECT_EQ(ck.Progress("j").error, "");
  auto list = ck.List("j");
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ(list->back().step, 40);
}

}  // namespace
}  // namespace tessel
