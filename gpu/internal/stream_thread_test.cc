#include "gpu/internal/stream_thread.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessel::gpu::internal {
namespace {

TEST(StreamThreadTest, RunsInEnqueueOrderOnOneThread) {
  std::vector<int> order;  // touched by the stream's thread only, until it is gone
  std::thread::id runner;
  std::atomic<bool> other_thread{true};
  {
    StreamThread s;
    for (int i = 0; i < 1000; ++i) {
      s.Enqueue([&, i] {
        if (i == 0) runner = std::this_thread::get_id();
        other_thread = other_thread && std::this_thread::get_id() == runner;
        order.push_back(i);
      });
    }
  }  // drains, then joins
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
  EXPECT_NE(runner, std::this_thread::get_id());
  EXPECT_TRUE(other_thread);
}

TEST(StreamThreadTest, EnqueueFromSeveralThreadsRunsEverything) {
  std::atomic<int> ran{0};
  {
    StreamThread s;
    std::vector<std::thread> feeders;
    for (int t = 0; t < 4; ++t) {
      feeders.emplace_back([&] {
        for (int i = 0; i < 250; ++i) s.Enqueue([&] { ran.fetch_add(1); });
      });
    }
    for (auto& f : feeders) f.join();
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(StreamThreadTest, AnIdleQueueStopsAtOnce) {
  StreamThread s;  // destroyed with nothing enqueued
}

}  // namespace
}  // namespace tessel::gpu::internal
