// Checkpointer over the in-memory store: write, finalize, list, verify,
// re-slice onto another shard count, detect damage, prune.
#include "server/checkpointer.h"

#include <numeric>

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

TEST(CheckpointerDisabledTest, SaysHowToEnable) {
  Checkpointer ck(nullptr);
  absl::Status s = ck.Submit(ShardSnapshot{});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--checkpoint_dir"), std::string::npos);
}

}  // namespace
}  // namespace tessel
