// ShardJob's pipelined serving: while a step is in flight, each bucket's
// parameters are served as soon as its update ends (to the pulls already
// waiting, and at once to pulls that arrive after it), every bucket exactly
// once per pull; and updates of different buckets on several threads, and
// mixed precision widened a chunk at a time, give the very bits of one
// reduction in rank order.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/reduce.h"
#include "core/topk.h"
#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "server/shard_job.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 5;

// One shard, `elements` floats in buckets of `bucket_floats`.
v1::JobSpec Spec(v1::Strategy strategy, int world, int64_t elements, int64_t bucket_floats,
                 v1::DType dtype = v1::DTYPE_F32) {
  return OneTensorSpec("serve", strategy, world, elements, bucket_floats, dtype);
}

class Harness {
 public:
  explicit Harness(const v1::JobSpec& spec)
      : job_(InitializedJob(spec, kEpoch)), half_(JobHalfType(spec)) {}

  int buckets() const { return job_->layout().num_buckets(0); }
  void DropJob() { job_.reset(); }
  ShardJob& job() { return *job_; }

  FrameHeader Header(FrameType type, int rank, int bucket) {
    return JobFrame(*job_, kEpoch, type, rank, bucket);
  }

  // Ranks whose pushes the job borrows (reads where the "worker" keeps
  // them, as over UCX shared memory) instead of receiving a copy.
  void BorrowFrom(std::vector<int> ranks) { borrow_ranks_ = std::move(ranks); }
  int released() const { return released_->load(); }
  int borrowed() const { return borrowed_count_; }

  // Lands rank's gradient for `bucket` (values from TestValue(rank, i, salt));
  // returns the bucket to update if this completed it.
  std::optional<int> Push(int rank, int bucket, int salt) {
    FrameHeader h = Header(FrameType::kPush, rank, bucket);
    const Range br = job_->layout().bucket_range(0, bucket);
    h.payload_bytes = static_cast<uint64_t>(br.size()) * (half_ ? 2 : 4);
    const bool borrow =
        std::find(borrow_ranks_.begin(), borrow_ranks_.end(), rank) != borrow_ranks_.end();
    auto dst = job_->AcceptData(h, borrow);
    EXPECT_TRUE(dst.ok()) << dst.status();
    std::vector<float> g(static_cast<size_t>(br.size()));
    for (int64_t i = br.begin; i < br.end; ++i) g[i - br.begin] = TestValue(rank, i, salt);
    void* to = *dst;
    if (borrow) {
      EXPECT_EQ(to, nullptr) << "a borrowed push needs no receive buffer";
      worker_memory_.emplace_back(g.size() * (half_ ? 2 : 4));
      to = worker_memory_.back().data();
    }
    if (half_) {
      FloatToHalf(*half_, g.data(), static_cast<uint16_t*>(to), g.size());
    } else {
      std::memcpy(to, g.data(), g.size() * 4);
    }
    ShardJob::Completion c;
    if (!borrow) {
      c = job_->CompleteReceive(h, absl::OkStatus());
    } else {
      ++borrowed_count_;
      std::shared_ptr<void> lease(nullptr, [r = released_](void*) { ++*r; });
      c = job_->CompleteBorrowed(h, to, std::move(lease));
    }
    EXPECT_FALSE(c.update.has_value() && c.fold.has_value());
    if (c.fold.has_value()) folds_.push_back(*c.fold);
    return c.update;
  }

  // The folds pushes asked for since the last call (Completion::fold).
  std::vector<int> TakeFolds() { return std::exchange(folds_, {}); }

  absl::StatusOr<ShardJob::Serve> Pull(int rank, int first, int count) {
    FrameHeader h = Header(FrameType::kPull, rank, first);
    h.step = job_->version() + 1;
    h.payload_bytes = 0;
    h.bucket_count = static_cast<uint32_t>(count);
    return job_->AcceptPull(h, /*reply_to=*/100 + rank);
  }

 private:
  std::unique_ptr<ShardJob> job_;
  std::optional<HalfType> half_;
  std::vector<int> borrow_ranks_;
  std::vector<int> folds_;
  std::deque<std::vector<uint8_t>> worker_memory_;  // borrowed pushes live here
  int borrowed_count_ = 0;
  std::shared_ptr<std::atomic<int>> released_ = std::make_shared<std::atomic<int>>(0);
};

// Per rank (reply_to - 100), the buckets a serve sends, at which version.
std::map<int, std::vector<int>> Sent(const ShardJob::Serve& serve, int64_t version) {
  std::map<int, std::vector<int>> out;
  for (const ShardJob::Puller& p : serve.pullers) {
    EXPECT_EQ(p.version, version);
    for (int b : p.buckets) out[static_cast<int>(p.reply_to) - 100].push_back(b);
  }
  return out;
}

TEST(ShardJobServeTest, EachBucketIsServedAsSoonAsItIsUpdated) {
  Harness t(Spec(v1::STRATEGY_ZERO2, 2, 64, 16));
  ASSERT_EQ(t.buckets(), 4);
  for (int r = 0; r < 2; ++r) {
    auto s = t.Pull(r, 0, 4);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->pullers.empty()) << "nothing is updated yet";
  }
  std::map<int, std::vector<int>> got;
  for (int b : {2, 0, 3}) {
    ASSERT_FALSE(t.Push(0, b, 1).has_value());
    std::optional<int> complete = t.Push(1, b, 1);
    ASSERT_EQ(complete, b);
    ShardJob::Serve s = t.job().UpdateBucket(b);
    EXPECT_EQ(Sent(s, 1), (std::map<int, std::vector<int>>{{0, {b}}, {1, {b}}}))
        << "bucket " << b << " goes to both waiting pulls at once";
    EXPECT_EQ(t.job().version(), 0) << "the step is not over";
    EXPECT_FALSE(s.snapshot.has_value());
  }
  ASSERT_FALSE(t.Push(1, 1, 1).has_value());
  ASSERT_EQ(t.Push(0, 1, 1), 1);
  ShardJob::Serve last = t.job().UpdateBucket(1);
  EXPECT_EQ(t.job().version(), 1);
  EXPECT_EQ(Sent(last, 1), (std::map<int, std::vector<int>>{{0, {1}}, {1, {1}}}))
      << "the last update sends only what was still missing";
  EXPECT_TRUE(t.job().TakeWaitingPulls().empty()) << "every pull was answered";
}

TEST(ShardJobServeTest, APullArrivingMidStepGetsTheUpdatedBucketsAtOnce) {
  Harness t(Spec(v1::STRATEGY_ZERO2, 2, 64, 16));
  for (int b : {1, 3}) {
    t.Push(0, b, 1);
    ASSERT_EQ(t.Push(1, b, 1), b);
    EXPECT_TRUE(t.job().UpdateBucket(b).pullers.empty()) << "nobody pulled yet";
  }
  auto now = t.Pull(0, 0, 4);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(Sent(*now, 1), (std::map<int, std::vector<int>>{{0, {1, 3}}}));
  // A pull of part of the shard (FSDP pulls unit by unit) gets only its own.
  auto part = t.Pull(1, 2, 2);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(Sent(*part, 1), (std::map<int, std::vector<int>>{{1, {3}}}));
  t.Push(0, 0, 1);
  ASSERT_EQ(t.Push(1, 0, 1), 0);
  EXPECT_EQ(Sent(t.job().UpdateBucket(0), 1), (std::map<int, std::vector<int>>{{0, {0}}}));
  t.Push(0, 2, 1);
  ASSERT_EQ(t.Push(1, 2, 1), 2);
  EXPECT_EQ(Sent(t.job().UpdateBucket(2), 1),
            (std::map<int, std::vector<int>>{{0, {2}}, {1, {2}}}));
  EXPECT_EQ(t.job().version(), 1);
  // Step 2 starts with nothing updated: a pull for it waits again.
  auto next = t.Pull(0, 0, 4);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->pullers.empty());
  EXPECT_EQ(t.job().TakeWaitingPulls().size(), 1u);
}

TEST(ShardJobServeTest, NotifyPullsStillWaitForTheWholeStep) {
  Harness t(Spec(v1::STRATEGY_DDP, 2, 64, 16));
  auto notify = t.Pull(0, 0, 0);
  ASSERT_TRUE(notify.ok()) << notify.status();
  for (int b = 0; b < 3; ++b) {
    t.Push(0, b, 1);
    ASSERT_EQ(t.Push(1, b, 1), b);
    EXPECT_TRUE(t.job().UpdateBucket(b).pullers.empty());
  }
  t.Push(0, 3, 1);
  ASSERT_EQ(t.Push(1, 3, 1), 3);
  ShardJob::Serve done = t.job().UpdateBucket(3);
  ASSERT_EQ(done.pullers.size(), 1u);
  EXPECT_EQ(done.pullers[0].bucket_count, 0);
  EXPECT_TRUE(done.pullers[0].buckets.empty()) << "a notify carries no bucket";
  EXPECT_EQ(done.pullers[0].version, 1);
}

// Reference: one reduction in rank order of the (widened) gradients over the
// whole shard, then Adam, as the single-threaded fp32 path does.
std::vector<float> Reference(const v1::JobSpec& spec, int steps) {
  const int world = spec.world_size();
  const int64_t n = spec.tensors(0).shape(0);
  const std::optional<HalfType> half = JobHalfType(spec);
  auto optimizer = OptimizerFromProto(spec.optimizer());
  EXPECT_TRUE(optimizer.ok());
  std::vector<float> params(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) params[i] = TestValue(0, i, 99);
  std::vector<std::vector<float>> state(2, std::vector<float>(static_cast<size_t>(n), 0.f));
  for (int step = 1; step <= steps; ++step) {
    std::vector<std::vector<float>> grads(world, std::vector<float>(static_cast<size_t>(n)));
    std::vector<const float*> srcs;
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i) grads[r][i] = TestValue(r, i, step);
      if (half) {
        std::vector<uint16_t> h(static_cast<size_t>(n));
        FloatToHalf(*half, grads[r].data(), h.data(), h.size());
        HalfToFloat(*half, h.data(), grads[r].data(), h.size());
      }
      srcs.push_back(grads[r].data());
    }
    float* st[kMaxStateSlots] = {state[0].data(), state[1].data()};
    ReduceAndApply(*optimizer, step, params.data(), srcs.data(), world, st, static_cast<size_t>(n));
  }
  return params;
}

// Three steps; each step's complete buckets are updated on `threads` threads
// at once, in reverse order of completion, as several compute threads would.
std::vector<float> Train(Harness& t, int world, int steps, int threads) {
  for (int step = 1; step <= steps; ++step) {
    std::vector<int> complete;
    for (int b = 0; b < t.buckets(); ++b) {
      for (int r = world - 1; r >= 0; --r) {
        if (std::optional<int> c = t.Push(r, b, step)) complete.push_back(*c);
      }
    }
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        for (size_t i = k; i < complete.size(); i += threads) {
          t.job().UpdateBucket(complete[complete.size() - 1 - i]);
        }
      });
    }
    for (std::thread& th : pool) th.join();
    EXPECT_EQ(t.job().version(), step);
  }
  return t.job().ParamsSnapshot();
}

TEST(ShardJobServeTest, UpdatesOnSeveralThreadsAreBitwiseOneReduction) {
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 3, 50000, 4096);
  Harness t(spec);
  ExpectBitwise(Train(t, 3, 3, 4), Reference(spec, 3));
  EXPECT_GT(t.job().Stats(/*with_digest=*/false).counters.update_us, 0)
      << "the time spent reducing and updating is counted";
}

TEST(ShardJobServeTest, MixedPrecisionWidensInChunksBitwise) {
  // Buckets of 40000 elements: the widening runs in several chunks.
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 3, 100000, 40000, v1::DTYPE_BF16);
  Harness t(spec);
  ExpectBitwise(Train(t, 3, 3, 2), Reference(spec, 3));
}

// Prefix order: with W = 3 and 4, the ranks that landed in rank order are
// summed while the bucket waits for the rest (FoldPrefix, when a push asks
// for it, late, or not at all), over every arrival order of 4 ranks, copied
// and borrowed pushes, fp32 and bf16: the very bits of one reduction.
TEST(ShardJobServeTest, FoldingRanksInPrefixOrderIsBitwiseOneReduction) {
  std::vector<int> order = {0, 1, 2, 3};
  std::vector<std::vector<int>> perms;
  do {
    perms.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  for (int world : {3, 4}) {
    for (v1::DType dtype : {v1::DTYPE_F32, v1::DTYPE_BF16}) {
      for (int when : {0, 1, 2}) {  // fold at once, one push late, never
        SCOPED_TRACE(testing::Message() << "world " << world << " dtype " << dtype << " fold "
                                        << (when == 0   ? "at once"
                                            : when == 1 ? "late"
                                                        : "never"));
        // 9 buckets of 40000 (bf16 widens in chunks) x 3 steps: every
        // arrival order of 4 ranks at least once.
        const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, world, 9 * 40000 - 7, 40000, dtype);
        Harness t(spec);
        if (world == 4) t.BorrowFrom({1});
        int folds_run = 0;
        std::vector<int> late;
        int perm = 0;
        for (int step = 1; step <= 3; ++step) {
          std::vector<int> complete;
          for (int b = 0; b < t.buckets(); ++b) {
            const std::vector<int>& p = perms[perm++ % perms.size()];
            for (int r : p) {
              if (r >= world) continue;
              for (int f : late) {
                t.job().FoldPrefix(f);
                ++folds_run;
              }
              late.clear();
              if (std::optional<int> c = t.Push(r, b, step)) complete.push_back(*c);
              std::vector<int> asked = t.TakeFolds();
              if (when == 0) {
                for (int f : asked) {
                  t.job().FoldPrefix(f);
                  ++folds_run;
                }
              } else if (when == 1) {
                late = asked;
              }
            }
          }
          for (int b : complete) t.job().UpdateBucket(b);
          ASSERT_EQ(t.job().version(), step);
        }
        if (when == 0) {
          EXPECT_GT(folds_run, 0) << "arrivals in rank order ask for folds";
        }
        ExpectBitwise(t.job().ParamsSnapshot(), Reference(spec, 3));
        const int64_t acc_bytes = (when == 2 ? 0 : int64_t{9 * 40000 - 7} * 4);
        EXPECT_GE(t.job().Stats(false).grad_buffer_bytes, acc_bytes)
            << "the accumulator is counted with the receive buffers";
      }
    }
  }
}

// Copied pushes land in pooled bucket buffers that go back to the pool once
// summed: with W = 8 arriving in rank order and folded at once, a server
// holds two buffers per bucket (and the accumulator) instead of eight; in
// reverse order nothing can be summed early and it holds eight.
TEST(ShardJobServeTest, PushBuffersArePooledAndFreedOnceSummed) {
  constexpr int kWorld = 8;
  constexpr int64_t kN = 4 * 1000;
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, kWorld, kN, 1000);
  Harness t(spec);
  auto buffer_bytes = [&] { return t.job().Stats(false).grad_buffer_bytes; };
  for (int b = 0; b < t.buckets(); ++b) {
    for (int r = 0; r < kWorld; ++r) {
      if (std::optional<int> c = t.Push(r, b, 1)) t.job().UpdateBucket(*c);
      for (int f : t.TakeFolds()) t.job().FoldPrefix(f);
    }
  }
  ASSERT_EQ(t.job().version(), 1);
  EXPECT_EQ(buffer_bytes(), (2 + 1) * kN * 4) << "two buffers per bucket, and the accumulator";
  for (int b = 0; b < t.buckets(); ++b) {
    for (int r = kWorld - 1; r >= 0; --r) {
      if (std::optional<int> c = t.Push(r, b, 2)) t.job().UpdateBucket(*c);
      EXPECT_TRUE(t.TakeFolds().empty()) << "rank 0 comes last: nothing to fold";
    }
  }
  ASSERT_EQ(t.job().version(), 2);
  EXPECT_EQ(buffer_bytes(), (kWorld + 1) * kN * 4) << "every rank waited for rank 0";
  ExpectBitwise(t.job().ParamsSnapshot(), Reference(spec, 2));
}

// Issue 42: micro-batch parts carry their index in the step, and a part
// replayed within its step is refused (AlreadyExists) instead of being summed
// again: the step's parameters are those of the same parts without the
// replay, bit for bit. The next step numbers its parts from 0 again.
TEST(ShardJobServeTest, AReplayedMicroBatchPartIsRefusedNotSummedAgain) {
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 1, 64, 64);
  Harness replayed(spec), clean(spec);
  auto part = [](Harness& t, uint32_t index, int salt) -> absl::Status {
    FrameHeader h = t.Header(FrameType::kPush, 0, 0);
    h.bucket_count = PushPartCount(index);
    absl::StatusOr<void*> dst = t.job().AcceptData(h);
    if (!dst.ok()) return dst.status();
    std::vector<float> g(64);
    for (int i = 0; i < 64; ++i) g[i] = TestValue(0, i, salt);
    std::memcpy(*dst, g.data(), g.size() * 4);
    t.job().CompleteReceive(h, absl::OkStatus());
    return absl::OkStatus();
  };
  for (Harness* t : {&replayed, &clean}) {
    ASSERT_TRUE(part(*t, 0, 1).ok());
    ASSERT_TRUE(part(*t, 1, 2).ok());
  }
  const absl::Status again = part(replayed, 0, 1);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_NE(again.message().find("part 0"), std::string::npos) << again;
  for (Harness* t : {&replayed, &clean}) {
    if (std::optional<int> c = t->Push(0, 0, 3)) t->job().UpdateBucket(*c);
    ASSERT_EQ(t->job().version(), 1);
  }
  ExpectBitwise(replayed.job().ParamsSnapshot(), clean.job().ParamsSnapshot());
  EXPECT_TRUE(part(replayed, 0, 4).ok()) << "a new step";
}

// Folds on their own threads while pushes land and buckets update on
// others, as the data plane's compute threads run them: still bitwise.
TEST(ShardJobServeTest, FoldsBesidePushesAndUpdatesOnOtherThreadsAreBitwise) {
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 4, 6 * 20000, 20000);
  Harness t(spec);
  absl::Mutex mu;
  std::deque<std::pair<int, bool>> work;  // (bucket, fold)
  bool done = false;
  std::atomic<int> updated{0};
  using Queue = std::pair<std::deque<std::pair<int, bool>>*, bool*>;
  Queue queue{&work, &done};
  std::vector<std::thread> compute;
  for (int k = 0; k < 3; ++k) {
    compute.emplace_back([&] {
      for (;;) {
        std::pair<int, bool> w;
        {
          absl::MutexLock lock(&mu);
          mu.Await(absl::Condition(
              +[](Queue* q) { return !q->first->empty() || *q->second; }, &queue));
          if (work.empty()) return;
          w = work.front();
          work.pop_front();
        }
        if (w.second) {
          t.job().FoldPrefix(w.first);
        } else {
          t.job().UpdateBucket(w.first);
          ++updated;
        }
      }
    });
  }
  constexpr int kSteps = 4;
  for (int step = 1; step <= kSteps; ++step) {
    for (int r = 0; r < 4; ++r) {
      for (int b = 0; b < t.buckets(); ++b) {
        std::optional<int> c = t.Push(r, b, step);
        absl::MutexLock lock(&mu);
        for (int f : t.TakeFolds()) work.emplace_back(f, true);
        if (c.has_value()) work.emplace_back(*c, false);
      }
    }
    while (t.job().version() < step) std::this_thread::yield();
  }
  {
    absl::MutexLock lock(&mu);
    done = true;
  }
  for (std::thread& th : compute) th.join();
  EXPECT_EQ(updated.load(), kSteps * t.buckets());
  ExpectBitwise(t.job().ParamsSnapshot(), Reference(spec, kSteps));
}

// Zero-copy: pushes read where the workers keep them reduce to the same bits
// as copied ones (here rank 1 of 3 is borrowed, the others copied, over
// several update threads), and each bucket's update hands back exactly its
// borrowed pushes, once it has read them.
TEST(ShardJobServeTest, BorrowedPushesReduceBitwiseAndComeBackWithTheirUpdate) {
  for (v1::DType dtype : {v1::DTYPE_F32, v1::DTYPE_BF16}) {
    SCOPED_TRACE(dtype == v1::DTYPE_F32 ? "f32" : "bf16");
    const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 3, 100000, 40000, dtype);
    Harness t(spec);
    t.BorrowFrom({1});
    ExpectBitwise(Train(t, 3, 3, 2), Reference(spec, 3));
    EXPECT_EQ(t.borrowed(), 3 * t.buckets());
    EXPECT_EQ(t.released(), t.borrowed()) << "every borrowed push is released";
  }
  // All borrowed: none released before its bucket's update.
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 2, 10000, 4096);
  Harness t(spec);
  t.BorrowFrom({0, 1});
  t.Push(0, 0, 1);
  EXPECT_FALSE(t.Push(0, 1, 1).has_value());
  std::optional<int> complete = t.Push(1, 0, 1);
  ASSERT_EQ(complete, 0);
  EXPECT_EQ(t.released(), 0) << "released before the update read them";
  ShardJob::Serve serve = t.job().UpdateBucket(0);
  EXPECT_EQ(serve.released.size(), 2u) << "bucket 0's two pushes";
  serve.released.clear();
  EXPECT_EQ(t.released(), 2);
}

// Top-k pushes (JobSpec.compression): the pairs are checked when they land
// (a malformed push is refused, changes nothing, and may be sent again), and
// the reduction of the densified pairs is the dense reduction of the same
// gradients, bit for bit.
TEST(ShardJobServeTest, TopkPairsAreCheckedAndReduceLikeTheirDenseForm) {
  v1::JobSpec dense_spec = Spec(v1::STRATEGY_ZERO2, 2, 3000, 1024);
  v1::JobSpec topk_spec = dense_spec;
  topk_spec.mutable_compression()->set_topk_ratio(0.25);
  Harness dense(dense_spec), topk(topk_spec);
  ASSERT_TRUE(topk.job().compressed());
  const int buckets = dense.buckets();
  for (int b = 0; b < buckets; ++b) {
    const Range br = dense.job().layout().bucket_range(0, b);
    const int64_t n = br.size();
    const int64_t k = TopkCount(0.25, n);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> g(static_cast<size_t>(n)), residual(static_cast<size_t>(n), 0.f);
      for (int64_t i = 0; i < n; ++i) g[i] = TestValue(r, br.begin + i, 1);
      std::vector<uint8_t> wire(SparseBytes(k));
      TopkCompress(g.data(), residual.data(), n, k, wire.data());
      FrameHeader h = topk.Header(FrameType::kPush, r, b);
      h.payload_bytes = SparseBytes(k);
      if (b == 0 && r == 0) {  // first a malformed one: indices reversed
        FrameHeader wrong = h;
        wrong.payload_bytes = SparseBytes(k) + 8;
        EXPECT_EQ(topk.job().AcceptData(wrong).status().code(), absl::StatusCode::kInvalidArgument);
        auto dst = topk.job().AcceptData(h);
        ASSERT_TRUE(dst.ok()) << dst.status();
        std::vector<uint8_t> bad = wire;
        std::reverse(reinterpret_cast<uint32_t*>(bad.data()),
                     reinterpret_cast<uint32_t*>(bad.data()) + k);
        std::memcpy(*dst, bad.data(), bad.size());
        ShardJob::Completion c = topk.job().CompleteReceive(h, absl::OkStatus());
        EXPECT_EQ(c.error.code(), absl::StatusCode::kInvalidArgument) << c.error;
        EXPECT_FALSE(c.update.has_value());
      }
      auto dst = topk.job().AcceptData(h);  // (again, after a refusal)
      ASSERT_TRUE(dst.ok()) << dst.status();
      std::memcpy(*dst, wire.data(), wire.size());
      ShardJob::Completion c = topk.job().CompleteReceive(h, absl::OkStatus());
      EXPECT_TRUE(c.error.ok()) << c.error;
      if (c.update) topk.job().UpdateBucket(*c.update);
      // The dense job gets the densified gradient.
      FrameHeader hd = dense.Header(FrameType::kPush, r, b);
      hd.payload_bytes = static_cast<uint64_t>(n) * 4;
      auto ddst = dense.job().AcceptData(hd);
      ASSERT_TRUE(ddst.ok());
      Densify(wire.data(), k, static_cast<float*>(*ddst), n);
      ShardJob::Completion cd = dense.job().CompleteReceive(hd, absl::OkStatus());
      if (cd.update) dense.job().UpdateBucket(*cd.update);
    }
  }
  EXPECT_EQ(topk.job().version(), 1);
  ExpectBitwise(topk.job().ParamsSnapshot(), dense.job().ParamsSnapshot());
  EXPECT_EQ(topk.job().Stats(false).counters.rejected, 2) << "the wrong size and the bad pairs";
}

// A job that ends with borrowed pushes not yet reduced (replaced by a
// recovery, deleted) releases them: the workers' sends complete.
TEST(ShardJobServeTest, AJobThatEndsReleasesItsBorrowedPushes) {
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, 2, 10000, 4096);
  auto t = std::make_unique<Harness>(spec);
  t->BorrowFrom({0, 1});
  t->Push(0, 0, 1);
  t->Push(1, 1, 1);
  EXPECT_EQ(t->released(), 0);
  t->DropJob();  // the harness (the workers' memory) outlives the job
  EXPECT_EQ(t->released(), 2);
}

}  // namespace
}  // namespace tessel
