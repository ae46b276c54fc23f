// JobCollectives over an in-memory Reducer (memory_reducer.h): ranks are
// threads that meet at a barrier and average in rank order, as the shard
// servers do. Bytes must come back exactly whatever their values and
// length.
#include "worker/internal/job_collectives.h"

#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "worker/internal/memory_reducer.h"

namespace tessel::internal {
namespace {

constexpr int kWorld = 3;

void OnRanks(const std::function<void(JobCollectives&, int rank)>& body, int* deleted) {
  MemoryMean mean(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      WorkerOptions o;
      o.job = "j";
      o.rank = r;
      o.world_size = kWorld;
      JobContext ctx(o);
      JobCollectives c(&ctx, [&mean, r, deleted](size_t) {
        return absl::StatusOr<std::unique_ptr<Reducer>>(
            std::make_unique<MemoryReducer>(&mean, r, r == 0 ? deleted : nullptr));
      });
      body(c, r);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(JobCollectivesTest, AllGatherReturnsEveryRanksBytesExactly) {
  int deleted = 0;
  OnRanks(
      [](JobCollectives& c, int rank) {
        std::mt19937 rng(rank);
        for (size_t len : {1u, 2u, 7u, 300u}) {
          std::string mine(len, '\0');
          for (char& ch : mine) ch = static_cast<char>(rng());
          auto all = c.AllGather(mine);
          ASSERT_TRUE(all.ok()) << all.status();
          ASSERT_EQ(all->size(), static_cast<size_t>(kWorld));
          EXPECT_EQ((*all)[rank], mine);
          for (int r = 0; r < kWorld; ++r) EXPECT_EQ((*all)[r].size(), len);
        }
      },
      &deleted);
}

TEST(JobCollectivesTest, AllGatherWordsKeepsSixtyFourBitValues) {
  int deleted = 0;
  OnRanks(
      [](JobCollectives& c, int rank) {
        const uint64_t mine[2] = {~uint64_t{0} - static_cast<uint64_t>(rank),
                                  uint64_t{1} << (rank + 40)};
        auto all = c.AllGatherWords(mine);
        ASSERT_TRUE(all.ok()) << all.status();
        ASSERT_EQ(all->size(), 2u * kWorld);
        for (int r = 0; r < kWorld; ++r) {
          EXPECT_EQ((*all)[2 * r], ~uint64_t{0} - static_cast<uint64_t>(r));
          EXPECT_EQ((*all)[2 * r + 1], uint64_t{1} << (r + 40));
        }
      },
      &deleted);
}

TEST(JobCollectivesTest, BroadcastCopiesTheRootsBytesAndReleaseFreesTheReducer) {
  int deleted = 0;
  OnRanks(
      [](JobCollectives& c, int rank) {
        std::string bytes(33, '\0');
        if (rank == 1) {
          for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xF0 ^ i);
        }
        ASSERT_TRUE(c.Broadcast(1, &bytes).ok());
        for (size_t i = 0; i < bytes.size(); ++i) {
          ASSERT_EQ(static_cast<uint8_t>(bytes[i]), static_cast<uint8_t>(0xF0 ^ i));
        }
        ASSERT_TRUE(c.ReleaseBytes(bytes.size()).ok());
      },
      &deleted);
  EXPECT_EQ(deleted, 1);  // rank 0 deletes the reducer's job, once
}

TEST(JobCollectivesTest, AgreeOkFailsEveryRankWhenOneIsNotOk) {
  int deleted = 0;
  OnRanks(
      [](JobCollectives& c, int rank) {
        EXPECT_TRUE(c.AgreeOk(true, "all fine").ok());
        absl::Status s = c.AgreeOk(rank != 2, "writing");
        EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
        EXPECT_NE(s.message().find("writing failed on another rank"), std::string::npos);
      },
      &deleted);
}

TEST(JobCollectivesTest, EmptyVectorIsRefused) {
  WorkerOptions o;
  o.job = "j";
  o.world_size = 2;
  JobContext ctx(o);
  JobCollectives c(&ctx, [](size_t) -> absl::StatusOr<std::unique_ptr<Reducer>> {
    return absl::InternalError("never made");
  });
  EXPECT_EQ(c.AllReduceMean({}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> one = {1.f};
  EXPECT_EQ(c.AllReduceMean(absl::MakeSpan(one)).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace tessel::internal
