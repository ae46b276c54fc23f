// UpdatePool: ParallelFor covers a range exactly once in aligned chunks of at
// least the minimum, on the caller and helpers, for concurrent callers too;
// and an UpdateRule on a thread with a pool (a large part
// split over 4 threads) gives the bits of the same updates on one thread.
#include "server/update_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "core/layout.h"
#include "core/optimizer.h"
#include "gtest/gtest.h"
#include "server/update_rule.h"

namespace tessel {
namespace {

TEST(UpdatePoolTest, CoversTheRangeOnceInAlignedChunksOnHelpersToo) {
  UpdatePool pool(4);
  const size_t n = 1000003;
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> calls{0};
  pool.ParallelFor(n, 1000, [&](size_t b, size_t e) {
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    EXPECT_EQ(b % 16, 0u) << "chunks start on a 64-byte line";
    if (e != n) {
      EXPECT_GE(e - b, 1000u);
    }
    for (size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // helpers get to join
  });
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  EXPECT_EQ(calls.load(), 16) << "4 threads x 4 chunks each";
  EXPECT_GT(pool.helped_chunks(), 0u) << "helpers ran some of the 16 chunks of 2 ms";
}

TEST(UpdatePoolTest, SmallRangesAndOneThreadRunInlineOnTheCaller) {
  UpdatePool one(1);
  UpdatePool four(4);
  const std::thread::id me = std::this_thread::get_id();
  for (UpdatePool* pool : {&one, &four}) {
    int calls = 0;
    const size_t n = pool == &one ? 10000000 : 1999;  // under 2 x 1000 elements
    pool->ParallelFor(n, 1000, [&](size_t b, size_t e) {
      EXPECT_EQ(b, 0u);
      EXPECT_EQ(e, n);
      EXPECT_EQ(std::this_thread::get_id(), me);
      ++calls;
    });
    EXPECT_EQ(calls, 1);
    pool->ParallelFor(0, 1000, [&](size_t, size_t) { ++calls; });
    EXPECT_EQ(calls, 1) << "an empty range calls nothing";
  }
}

TEST(UpdatePoolTest, ConcurrentCallersEachGetTheirWholeRange) {
  UpdatePool pool(3);
  std::atomic<size_t> covered{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<uint8_t> mine(64000, 0);
        pool.ParallelFor(mine.size(), 1000, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) ++mine[i];
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          covered += e - b;
        });
        ASSERT_EQ(std::count(mine.begin(), mine.end(), 1), 64000);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(covered.load(), size_t{3} * 20 * 64000);
}

TEST(UpdatePoolTest, ScopeSetsTheThreadsPool) {
  EXPECT_EQ(UpdatePool::Current(), nullptr);
  UpdatePool pool(2);
  {
    UpdatePool::Scope scope(&pool);
    EXPECT_EQ(UpdatePool::Current(), &pool);
    std::thread other([] { EXPECT_EQ(UpdatePool::Current(), nullptr) << "per thread"; });
    other.join();
  }
  EXPECT_EQ(UpdatePool::Current(), nullptr);
}

// Tensors cut so that chunk boundaries fall inside tensors; one shard.
Layout BigLayout() {
  const int64_t k = static_cast<int64_t>(UpdatePool::kMinChunk);
  auto layout = Layout::Create(
      {{"a", {k + 1001}}, {"b", {k / 2 + 3}}, {"c", {2 * k + 77}}, {"d", {999}}}, 1, 1, 64);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

float Value(int rank, int64_t i, int64_t step) {
  return static_cast<float>((i * 7919 + rank * 104729 + step * 31) % 2001 - 1000) / 997.f;
}

struct Case {
  const char* name;
  OptimizerParams optimizer;
  int world;
  bool ddp;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  OptimizerParams adam;
  adam.kind = OptimizerParams::Kind::kAdam;
  adam.lr = 1e-2f;
  adam.weight_decay = 0.01f;
  OptimizerParams adamw = adam;
  adamw.kind = OptimizerParams::Kind::kAdamW;
  OptimizerParams momentum;
  momentum.kind = OptimizerParams::Kind::kSgd;
  momentum.lr = 0.1f;
  momentum.momentum = 0.9f;
  cases.push_back({"adam w=2", adam, 2, false});
  cases.push_back({"adamw w=4", adamw, 4, false});
  cases.push_back({"sgd momentum w=4", momentum, 4, false});
  cases.push_back({"ddp mean w=3", adam, 3, true});
  return cases;
}

// Three steps of `rule` over the whole shard, on this thread (pool null) or
// split over `pool`; step 2 skips tensor b, so step 3 updates it at its
// own step 2. `two_versions`: out of place between two buffers, as a
// shard's served versions (server/served_versions.h). Returns the values
// followed by the state.
std::vector<float> RunSteps(const Layout& layout, const Case& c, UpdatePool* pool,
                            bool two_versions = false) {
  UpdatePool::Scope scope(pool);
  const Range range = layout.shard_range(0);
  const int64_t n = range.size();
  std::unique_ptr<UpdateRule> rule = MakeUpdateRule(c.ddp, layout, range, c.world, c.optimizer);
  std::vector<float> values(static_cast<size_t>(n)), other(static_cast<size_t>(n), -5.f);
  for (int64_t i = 0; i < n; ++i) values[i] = Value(9, i, 0);
  std::vector<std::vector<float>> grads(c.world, std::vector<float>(static_cast<size_t>(n)));
  std::vector<const float*> srcs;
  for (const auto& g : grads) srcs.push_back(g.data());
  for (int64_t step = 1; step <= 3; ++step) {
    for (int r = 0; r < c.world; ++r) {
      for (int64_t i = 0; i < n; ++i) grads[r][i] = Value(r, i, step);
    }
    BucketStep s;
    s.step = step;
    s.optimizer = c.optimizer;
    if (step == 2) s.skip_now = {0, 1, 0, 0};  // no rank had b's gradient
    if (step == 3) s.skips = {0, 1, 0, 0};     // b is a step behind

    if (two_versions) {
      rule->Apply(s, {0, n}, srcs.data(), c.world, values.data(), other.data());
      std::swap(values, other);
    } else {
      rule->Apply(s, {0, n}, srcs.data(), c.world, values.data(), values.data());
    }
  }
  for (const auto& slot : rule->state()) values.insert(values.end(), slot.begin(), slot.end());
  return values;
}

TEST(UpdatePoolTest, UpdatesSplitOverFourThreadsAreBitwiseOneThreads) {
  const Layout layout = BigLayout();
  UpdatePool pool(4);
  for (const Case& c : Cases()) {
    const std::vector<float> alone = RunSteps(layout, c, nullptr);
    for (bool two_versions : {false, true}) {
      const std::vector<float> split = RunSteps(layout, c, &pool, two_versions);
      ASSERT_EQ(alone.size(), split.size()) << c.name;
      size_t differ = 0;
      for (size_t i = 0; i < alone.size(); ++i) {
        differ += std::memcmp(&alone[i], &split[i], sizeof(float)) != 0;
      }
      EXPECT_EQ(differ, 0u) << c.name << (two_versions ? " out of place" : "")
                            << ": elements whose bits differ";
    }
  }
  EXPECT_GT(pool.split_calls(), 0u) << "the parts were split, not run whole";
}

}  // namespace
}  // namespace tessel
