// BucketReducer: the rank-order sum is the same bits whatever the arrival
// order, whenever folds run (at once, late, never, on other threads), in
// fp32 and half, with borrowed and copied pushes; receive buffers come from
// a pool and go back once summed; borrowed pushes are released by their
// sum (or the reducer's end); top-k pairs are checked when they land; a
// large half bucket's chunks summed over an UpdatePool are the same bits.
#include "server/bucket_reducer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "core/precision.h"
#include "core/reduce.h"
#include "core/topk.h"
#include "gtest/gtest.h"
#include "server/update_pool.h"

namespace tessel {
namespace {

float Value(int rank, int64_t i, int salt) {
  return static_cast<float>((i * 7919 + rank * 104729 + salt * 31) % 2001 - 1000) / 997.f;
}

// Buckets of `bucket` elements (the last shorter) over `n` elements.
std::vector<Range> Buckets(int64_t n, int64_t bucket) {
  std::vector<Range> out;
  for (int64_t b = 0; b < n; b += bucket) out.push_back({b, std::min(n, b + bucket)});
  return out;
}

BucketReducer::Options Opts(int world, std::vector<Range> buckets,
                            std::optional<HalfType> half = std::nullopt, double topk_ratio = 0) {
  BucketReducer::Options o;
  o.world = world;
  o.buckets = std::move(buckets);
  o.half = half;
  o.topk_ratio = topk_ratio;
  return o;
}

// Rank r's gradient of the shard as it goes on the wire (fp32 or half).
std::vector<uint8_t> Wire(int rank, int64_t n, int salt, std::optional<HalfType> half) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[i] = Value(rank, i, salt);
  std::vector<uint8_t> out(static_cast<size_t>(n) * (half ? 2 : 4));
  if (half) {
    FloatToHalf(*half, g.data(), reinterpret_cast<uint16_t*>(out.data()), g.size());
  } else {
    std::memcpy(out.data(), g.data(), out.size());
  }
  return out;
}

// The reference: one ReduceMean of every rank's (widened) gradient, in rank
// order, over the whole shard.
std::vector<float> Reference(const std::vector<std::vector<uint8_t>>& wire, int64_t n,
                             std::optional<HalfType> half) {
  std::vector<std::vector<float>> widened(wire.size(), std::vector<float>(static_cast<size_t>(n)));
  std::vector<const float*> srcs;
  for (size_t r = 0; r < wire.size(); ++r) {
    if (half) {
      HalfToFloat(*half, reinterpret_cast<const uint16_t*>(wire[r].data()), widened[r].data(),
                  static_cast<size_t>(n));
    } else {
      std::memcpy(widened[r].data(), wire[r].data(), static_cast<size_t>(n) * 4);
    }
    srcs.push_back(widened[r].data());
  }
  std::vector<float> out(static_cast<size_t>(n));
  const int w = static_cast<int>(wire.size());
  ReduceMean(srcs.data(), w, out.data(), static_cast<size_t>(n), w);
  return out;
}

int64_t Differing(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  int64_t differ = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) ++differ;
  }
  return differ;
}

// Drives one reducer through steps: lands every rank's push of every bucket
// in a given order (borrowed or copied), folds as told, sums complete
// buckets with ReduceMean into `out`.
class Driver {
 public:
  Driver(int world, int64_t n, int64_t bucket, std::optional<HalfType> half,
         std::vector<int> borrowed = {})
      : world_(world),
        n_(n),
        bucket_(bucket),
        half_(half),
        borrowed_(std::move(borrowed)),
        reducer_(Opts(world, Buckets(n, bucket), half)) {}

  BucketReducer& reducer() { return reducer_; }
  int released() const { return released_->load(); }

  void SetStep(int salt) {
    wire_.clear();
    for (int r = 0; r < world_; ++r) wire_.push_back(Wire(r, n_, salt, half_));
  }
  const std::vector<std::vector<uint8_t>>& wire() const { return wire_; }

  // Lands rank's push of bucket; returns the landing.
  BucketReducer::Landing Land(int rank, int bucket) {
    const Range br = Buckets(n_, bucket_)[bucket];
    const size_t bytes = static_cast<size_t>(br.size()) * (half_ ? 2 : 4);
    const uint8_t* src = wire_[rank].data() + static_cast<size_t>(br.begin) * (half_ ? 2 : 4);
    const bool borrow = std::find(borrowed_.begin(), borrowed_.end(), rank) != borrowed_.end();
    void* to = reducer_.Accept(bucket, rank, borrow);
    if (borrow) {
      EXPECT_EQ(to, nullptr);
      auto lease = std::shared_ptr<void>(nullptr, [r = released_](void*) { ++*r; });
      return reducer_.LandBorrowed(bucket, rank, src, std::move(lease));
    }
    std::memcpy(to, src, bytes);
    auto l = reducer_.Land(bucket, rank);
    EXPECT_TRUE(l.ok()) << l.status();
    return *l;
  }

  // Sums a complete bucket into out (ReduceMean, divisor W); returns the
  // leases released.
  size_t Sum(int bucket, std::vector<float>* out) {
    reducer_.BeginSum(bucket);
    reducer_.SumChunks(bucket, [&](Range part, const float* const* srcs, int count) {
      ReduceMean(srcs, count, out->data() + part.begin, static_cast<size_t>(part.size()), world_);
    });
    return reducer_.EndSum(bucket).size();
  }

 private:
  const int world_;
  const int64_t n_;
  const int64_t bucket_;
  const std::optional<HalfType> half_;
  const std::vector<int> borrowed_;
  BucketReducer reducer_;
  std::vector<std::vector<uint8_t>> wire_;
  std::shared_ptr<std::atomic<int>> released_ = std::make_shared<std::atomic<int>>(0);
};

TEST(BucketReducerTest, TheSumIsBitwiseOneReductionWhateverTheArrivalOrder) {
  for (int world : {2, 3, 4}) {
    std::vector<int> order(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) order[r] = r;
    std::vector<std::vector<int>> perms;
    do {
      perms.push_back(order);
    } while (std::next_permutation(order.begin(), order.end()));
    for (std::optional<HalfType> half : {std::optional<HalfType>(), std::optional(HalfType::kBF16),
                                         std::optional(HalfType::kF16)}) {
      for (int when : {0, 1, 2}) {  // fold at once, one push late, never
        SCOPED_TRACE(testing::Message()
                     << "world " << world << " half " << half.has_value() << " fold " << when);
        // 8 buckets of 40000 (half widens in several chunks; the last one
        // shorter) x 3 steps: every arrival order of 4 ranks once.
        constexpr int64_t kBucket = 40000;
        const int64_t n = 8 * kBucket - 7;
        Driver d(world, n, kBucket, half, world >= 3 ? std::vector<int>{1} : std::vector<int>{});
        int perm = 0;
        int folds = 0;
        for (int step = 1; step <= 3; ++step) {
          d.SetStep(step);
          std::vector<float> out(static_cast<size_t>(n), -1.f);
          std::vector<int> late;
          for (int b = 0; b < 8; ++b) {
            for (int r : perms[perm++ % perms.size()]) {
              for (int f : late) d.reducer().Fold(f);
              late.clear();
              BucketReducer::Landing l = d.Land(r, b);
              EXPECT_FALSE(l.complete && l.fold);
              if (l.fold) {
                ++folds;
                if (when == 0) d.reducer().Fold(b);
                if (when == 1) late.push_back(b);
              }
              if (l.complete) d.Sum(b, &out);
            }
          }
          EXPECT_EQ(Differing(out, Reference(d.wire(), n, half)), 0)
              << "elements differing from one reduction in rank order";
        }
        if (world >= 3) {
          EXPECT_GT(folds, 0) << "arrivals in rank order ask for folds";
        } else {
          EXPECT_EQ(folds, 0) << "two ranks have nothing to fold early";
        }
      }
    }
  }
}

// Every arrival order of four ranks, one at a time, each folded at once.
TEST(BucketReducerTest, EveryArrivalOrderOfFourRanksSumsToTheSameBits) {
  constexpr int kWorld = 4;
  constexpr int64_t kN = 5000;
  std::vector<int> order = {0, 1, 2, 3};
  std::vector<float> first;
  do {
    Driver d(kWorld, kN, kN, std::nullopt);
    d.SetStep(1);
    std::vector<float> out(kN);
    for (int r : order) {
      BucketReducer::Landing l = d.Land(r, 0);
      if (l.fold) d.reducer().Fold(0);
      if (l.complete) d.Sum(0, &out);
    }
    if (first.empty()) {
      first = out;
      EXPECT_EQ(Differing(out, Reference(d.wire(), kN, std::nullopt)), 0);
    }
    EXPECT_EQ(Differing(out, first), 0) << "order " << order[0] << order[1] << order[2] << order[3];
  } while (std::next_permutation(order.begin(), order.end()));
}

// Copied pushes land in pooled buffers that go back to the pool once
// summed: W = 8 arriving in rank order and folded at once hold two buffers
// per bucket (and the accumulator); in reverse order nothing is summed early
// and every rank holds one.
TEST(BucketReducerTest, BuffersComeFromAPoolAndGoBackOnceSummed) {
  constexpr int kWorld = 8;
  constexpr int64_t kN = 4000, kBucket = 1000;
  Driver d(kWorld, kN, kBucket, std::nullopt);
  std::vector<float> out(kN);
  d.SetStep(1);
  for (int b = 0; b < 4; ++b) {
    for (int r = 0; r < kWorld; ++r) {
      BucketReducer::Landing l = d.Land(r, b);
      if (l.fold) d.reducer().Fold(b);
      if (l.complete) d.Sum(b, &out);
    }
  }
  EXPECT_EQ(d.reducer().buffer_bytes(), (2 + 1) * kN * 4)
      << "two buffers per bucket, and the accumulator";
  d.SetStep(2);
  for (int b = 0; b < 4; ++b) {
    for (int r = kWorld - 1; r >= 0; --r) {
      BucketReducer::Landing l = d.Land(r, b);
      EXPECT_FALSE(l.fold) << "rank 0 comes last: nothing to fold";
      if (l.complete) d.Sum(b, &out);
    }
  }
  EXPECT_EQ(d.reducer().buffer_bytes(), (kWorld + 1) * kN * 4) << "every rank waited for rank 0";
  EXPECT_EQ(Differing(out, Reference(d.wire(), kN, std::nullopt)), 0);
  // Another step in reverse order takes every buffer from the pool.
  d.SetStep(3);
  for (int b = 0; b < 4; ++b) {
    for (int r = kWorld - 1; r >= 0; --r) {
      if (d.Land(r, b).complete) d.Sum(b, &out);
    }
  }
  EXPECT_EQ(d.reducer().buffer_bytes(), (kWorld + 1) * kN * 4) << "nothing new allocated";
}

TEST(BucketReducerTest, AFailedReceiveKeepsItsBufferForTheRetry) {
  BucketReducer reducer(Opts(2, {{0, 100}}));
  void* first = reducer.Accept(0, 1, false);
  const int64_t bytes = reducer.buffer_bytes();
  EXPECT_EQ(bytes, 400);
  void* again = reducer.Accept(0, 1, false);  // the receive failed; the rank pushes again
  EXPECT_EQ(again, first);
  EXPECT_EQ(reducer.buffer_bytes(), bytes);
}

// Issue 44: an abandoned receive's buffer (the transport may still write
// into it, whenever) is retired: never handed out or read again; the rank's
// next push lands in another buffer and sums to the same bits.
TEST(BucketReducerTest, AnAbandonedReceiveRetiresItsBufferAndTheNextPushGetsAnother) {
  constexpr int64_t kN = 100;
  BucketReducer reducer(Opts(2, {{0, kN}}));
  std::vector<float> g0(kN), g1(kN);
  for (int64_t i = 0; i < kN; ++i) g0[i] = Value(0, i, 1), g1[i] = Value(1, i, 1);
  std::memcpy(reducer.Accept(0, 0, false), g0.data(), kN * 4);
  ASSERT_TRUE(reducer.Land(0, 0).ok());
  float* dying = static_cast<float*>(reducer.Accept(0, 1, false));
  EXPECT_EQ(reducer.Abandon(1, {0}), kN * 4);
  EXPECT_EQ(reducer.retired_bytes(), kN * 4);
  EXPECT_EQ(reducer.buffer_bytes(), 2 * kN * 4) << "retired bytes still count as allocated";
  EXPECT_EQ(reducer.Abandon(1, {}), 0);
  float* replacement = static_cast<float*>(reducer.Accept(0, 1, false));
  EXPECT_NE(replacement, dying);
  std::memcpy(replacement, g1.data(), kN * 4);
  BucketReducer::Landing l = *reducer.Land(0, 1);
  ASSERT_TRUE(l.complete);
  // The late transfer writes into the retired buffer: the sum never sees it.
  for (int64_t i = 0; i < kN; ++i) dying[i] = 1000.f;
  std::vector<float> out(kN), want(kN);
  reducer.BeginSum(0);
  reducer.SumChunks(0, [&](Range part, const float* const* srcs, int count) {
    ReduceMean(srcs, count, out.data() + part.begin, part.size(), 2);
  });
  reducer.EndSum(0);
  const float* ref[] = {g0.data(), g1.data()};
  ReduceMean(ref, 2, want.data(), kN, 2);
  EXPECT_EQ(std::memcmp(out.data(), want.data(), kN * 4), 0);
  // The next step's buffers come from the pool, never the retired one.
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(reducer.Accept(0, r, false), dying);
  }
  EXPECT_EQ(reducer.buffer_bytes(), 3 * kN * 4);
  EXPECT_EQ(reducer.retired_bytes(), kN * 4);
  // A borrowed push has no buffer to retire.
  BucketReducer borrowing(Opts(2, {{0, kN}}));
  EXPECT_EQ(borrowing.Accept(0, 1, true), nullptr);
  EXPECT_EQ(borrowing.Abandon(1, {0}), 0);
}

TEST(BucketReducerTest, AnAbandonedTopkReceiveKeepsTheRanksLandedPairsInANewBuffer) {
  BucketReducer reducer(Opts(2, {{0, 100}, {100, 200}}, std::nullopt, /*topk_ratio=*/0.1));
  // Rank 1's pairs of bucket 0 landed; its push of bucket 1 is abandoned.
  std::vector<uint8_t> pairs0(reducer.push_bytes(0)), pairs1(reducer.push_bytes(1));
  const int64_t k = TopkCount(0.1, 100);
  std::vector<float> dense(100);
  for (int i = 0; i < 100; ++i) dense[i] = Value(1, i, 2);
  std::vector<float> residual(100, 0.f);
  TopkCompress(dense.data(), residual.data(), 100, k, pairs0.data());
  std::fill(residual.begin(), residual.end(), 0.f);
  TopkCompress(dense.data(), residual.data(), 100, k, pairs1.data());
  std::memcpy(reducer.Accept(0, 1, false), pairs0.data(), pairs0.size());
  ASSERT_TRUE(reducer.Land(0, 1).ok());
  uint8_t* dying = static_cast<uint8_t*>(reducer.Accept(1, 1, false));
  const int64_t before = reducer.buffer_bytes();
  EXPECT_GT(reducer.Abandon(1, {1}), 0);
  EXPECT_GT(reducer.buffer_bytes(), before);
  uint8_t* again = static_cast<uint8_t*>(reducer.Accept(1, 1, false));
  EXPECT_NE(again, dying);
  std::memset(dying, 0xFF, pairs1.size());  // the late transfer: garbage, never checked or read
  std::memcpy(again, pairs1.data(), pairs1.size());
  ASSERT_TRUE(reducer.Land(1, 1).ok());
  // Bucket 0's pairs of rank 1 were kept: with rank 0's, it sums as before.
  std::memcpy(reducer.Accept(0, 0, false), pairs0.data(), pairs0.size());
  BucketReducer::Landing l = *reducer.Land(0, 0);
  ASSERT_TRUE(l.complete);
  std::vector<float> out(100), want(100);
  reducer.BeginSum(0);
  reducer.SumChunks(0, [&](Range part, const float* const* srcs, int count) {
    ReduceMean(srcs, count, out.data() + part.begin, part.size(), 2);
  });
  reducer.EndSum(0);
  std::vector<float> d(100);
  Densify(pairs0.data(), k, d.data(), 100);
  const float* ref[] = {d.data(), d.data()};
  ReduceMean(ref, 2, want.data(), 100, 2);
  EXPECT_EQ(std::memcmp(out.data(), want.data(), 400), 0);
}

TEST(BucketReducerTest, BorrowedPushesAreReleasedByTheirSumOrTheReducersEnd) {
  Driver d(2, 2000, 1000, std::nullopt, {0, 1});
  d.SetStep(1);
  std::vector<float> out(2000);
  EXPECT_FALSE(d.Land(0, 0).complete);
  EXPECT_FALSE(d.Land(0, 1).complete);
  EXPECT_TRUE(d.Land(1, 0).complete);
  EXPECT_EQ(d.released(), 0) << "released before the sum read them";
  EXPECT_EQ(d.Sum(0, &out), 2u) << "bucket 0's two pushes";
  EXPECT_EQ(d.released(), 2);
  EXPECT_EQ(d.reducer().buffer_bytes(), 0) << "borrowed pushes need no buffers";
  {
    auto r = std::make_unique<BucketReducer>(Opts(2, {{0, 10}}));
    auto released = std::make_shared<int>(0);
    float data[10] = {};
    r->Accept(0, 0, true);
    r->LandBorrowed(0, 0, data, std::shared_ptr<void>(nullptr, [released](void*) { ++*released; }));
    r.reset();
    EXPECT_EQ(*released, 1) << "a reducer that ends releases the pushes it holds";
  }
}

TEST(BucketReducerTest, TopkPairsAreCheckedWhenTheyLandAndSumLikeTheirDenseForm) {
  constexpr int64_t kN = 1024;
  const int64_t k = TopkCount(0.25, kN);
  BucketReducer reducer(Opts(3, {{0, kN}}, std::nullopt, 0.25));
  EXPECT_EQ(reducer.push_bytes(0), SparseBytes(k));
  std::vector<std::vector<float>> dense(3, std::vector<float>(kN));
  for (int r = 0; r < 3; ++r) {
    std::vector<float> g(kN), residual(kN, 0.f);
    for (int64_t i = 0; i < kN; ++i) g[i] = Value(r, i, 1);
    std::vector<uint8_t> wire(SparseBytes(k));
    TopkCompress(g.data(), residual.data(), kN, k, wire.data());
    Densify(wire.data(), k, dense[r].data(), kN);
    if (r == 0) {  // a malformed push first: indices reversed
      std::vector<uint8_t> bad = wire;
      std::reverse(reinterpret_cast<uint32_t*>(bad.data()),
                   reinterpret_cast<uint32_t*>(bad.data()) + k);
      std::memcpy(reducer.Accept(0, r, false), bad.data(), bad.size());
      EXPECT_EQ(reducer.Land(0, r).status().code(), absl::StatusCode::kInvalidArgument);
    }
    std::memcpy(reducer.Accept(0, r, false), wire.data(), wire.size());
    auto l = reducer.Land(0, r);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_FALSE(l->fold) << "top-k pushes are never folded";
    EXPECT_EQ(l->complete, r == 2) << "the refused push did not count";
  }
  std::vector<float> got(kN), want(kN);
  reducer.BeginSum(0);
  reducer.SumChunks(0, [&](Range part, const float* const* srcs, int count) {
    EXPECT_EQ(count, 3);
    ReduceMean(srcs, count, got.data() + part.begin, static_cast<size_t>(part.size()), 3);
  });
  EXPECT_TRUE(reducer.EndSum(0).empty());
  const float* srcs[3] = {dense[0].data(), dense[1].data(), dense[2].data()};
  ReduceMean(srcs, 3, want.data(), kN, 3);
  EXPECT_EQ(Differing(got, want), 0);
}

// Folds on other threads while pushes land and buckets are summed on
// others, as the data plane's compute threads run them: still bitwise.
TEST(BucketReducerTest, FoldsOnOtherThreadsBesideLandingsAndSumsAreBitwise) {
  constexpr int kWorld = 5;
  constexpr int64_t kBucket = 20000, kN = 6 * kBucket;
  Driver d(kWorld, kN, kBucket, HalfType::kBF16, {2});
  for (int step = 1; step <= 3; ++step) {
    d.SetStep(step);
    std::vector<float> out(kN);
    std::deque<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      for (int b = 0; b < 6; ++b) {
        BucketReducer::Landing l = d.Land(r, b);
        if (l.fold) threads.emplace_back([&d, b] { d.reducer().Fold(b); });
        if (l.complete) threads.emplace_back([&d, &out, b] { d.Sum(b, &out); });
      }
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(Differing(out, Reference(d.wire(), kN, HalfType::kBF16)), 0) << "step " << step;
  }
}

// Micro-batch parts (fp32, bf16, fp16): each rank's parts and push are added
// in the order they came (micro-batch order; in half, each add rounded to
// half, as torch's in-place add into a half .grad), then the ranks are summed in rank order:
// bitwise what each rank summing its micro-batches itself and pushing once gives, whatever order
// the ranks' frames interleave in, with folds (W = 3), a borrowed rank, and the push after parts
// copied; parts complete nothing.
TEST(BucketReducerTest, PartsAreSummedPerRankInOrderThenAcrossRanks) {
  const int64_t n = 1000, bucket = 300;
  const int micro = 3;
  for (std::optional<HalfType> half :
       {std::optional<HalfType>(), std::optional<HalfType>(HalfType::kBF16),
        std::optional<HalfType>(HalfType::kF16)}) {
    const size_t esize = half ? 2 : 4;
    for (int world : {2, 3}) {
      for (bool interleave : {false, true}) {
        SCOPED_TRACE(testing::Message() << "world " << world << " interleave " << interleave
                                        << " half " << (half ? static_cast<int>(*half) : -1));
        BucketReducer reducer(Opts(world, Buckets(n, bucket), half));
        // wire[r][m]: rank r's micro-batch m (in the job's precision).
        std::vector<std::vector<std::vector<uint8_t>>> wire(world);
        std::vector<std::vector<uint8_t>> summed(world);
        std::vector<std::vector<uint8_t>> summed_wide(world);  // half added in fp32
        for (int r = 0; r < world; ++r) {
          std::vector<float> local(static_cast<size_t>(n), 0.f);
          std::vector<float> wide(static_cast<size_t>(n), 0.f);
          std::vector<uint16_t> local_half(static_cast<size_t>(n), 0);
          for (int m = 0; m < micro; ++m) {
            wire[r].push_back(Wire(r, n, 10 + m, half));
            if (!half) {
              const float* g = reinterpret_cast<const float*>(wire[r][m].data());
              for (int64_t i = 0; i < n; ++i) local[i] += g[i];  // what a worker accumulates
              continue;
            }
            // What torch's `grad += g` in half gives: each add rounded to half.
            const uint16_t* g = reinterpret_cast<const uint16_t*>(wire[r][m].data());
            for (int64_t i = 0; i < n; ++i) {
              const float a =
                  *half == HalfType::kF16 ? F16ToFloat(local_half[i]) : BF16ToFloat(local_half[i]);
              const float b = *half == HalfType::kF16 ? F16ToFloat(g[i]) : BF16ToFloat(g[i]);
              local_half[i] = m == 0                    ? g[i]
                              : *half == HalfType::kF16 ? FloatToF16(a + b)
                                                        : FloatToBF16(a + b);
              wide[i] += b;
            }
          }
          const uint8_t* bytes = half ? reinterpret_cast<const uint8_t*>(local_half.data())
                                      : reinterpret_cast<const uint8_t*>(local.data());
          summed[r].assign(bytes, bytes + static_cast<size_t>(n) * esize);
          if (half) {
            std::vector<uint16_t> w16(static_cast<size_t>(n));
            FloatToHalf(*half, wide.data(), w16.data(), w16.size());
            const uint8_t* wb = reinterpret_cast<const uint8_t*>(w16.data());
            summed_wide[r].assign(wb, wb + w16.size() * 2);
          }
        }
        const std::vector<float> want = Reference(summed, n, half);
        if (half) {  // the test tells the half sum from one kept in fp32
          EXPECT_GT(Differing(Reference(summed_wide, n, half), want), 0);
        }
        std::vector<float> got(static_cast<size_t>(n));
        const std::vector<Range> buckets = Buckets(n, bucket);
        // Frames in order: for each micro-batch, ranks high to low (interleaved),
        // or each rank's micro-batches back to back.
        std::vector<std::pair<int, int>> order;  // (rank, micro-batch)
        if (interleave) {
          for (int m = 0; m < micro; ++m)
            for (int r = world - 1; r >= 0; --r) order.push_back({r, m});
        } else {
          for (int r = world - 1; r >= 0; --r)
            for (int m = 0; m < micro; ++m) order.push_back({r, m});
        }
        for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
          const Range br = buckets[b];
          int completed = 0;
          for (auto [r, m] : order) {
            const uint8_t* src = wire[r][m].data() + static_cast<size_t>(br.begin) * esize;
            const size_t bytes = static_cast<size_t>(br.size()) * esize;
            if (m + 1 < micro) {
              std::memcpy(reducer.AcceptPart(b, r), src, bytes);
              reducer.LandPart(b, r);
              EXPECT_TRUE(reducer.HasParts(b, r));
              continue;
            }
            void* to = reducer.Accept(b, r, /*borrow=*/false);
            ASSERT_NE(to, nullptr);
            std::memcpy(to, src, bytes);
            auto l = reducer.Land(b, r);
            ASSERT_TRUE(l.ok());
            EXPECT_FALSE(reducer.HasParts(b, r));
            completed += l->complete;
            if (l->fold) reducer.Fold(b);
          }
          ASSERT_EQ(completed, 1);
          reducer.BeginSum(b);
          reducer.SumChunks(b, [&](Range part, const float* const* srcs, int count) {
            ReduceMean(srcs, count, got.data() + part.begin, static_cast<size_t>(part.size()),
                       world);
          });
          reducer.EndSum(b);
        }
        EXPECT_EQ(Differing(got, want), 0);
        // Two buffers per rank and bucket at most (the sum and the incoming part).
        EXPECT_LE(reducer.buffer_bytes(),
                  static_cast<int64_t>(2 * world) * n * 4 + static_cast<int64_t>(n) * 4);
      }
    }
  }
}

// Half pushes of a large bucket, summed on a thread with an UpdatePool: the
// widened chunks go over its 4 threads at once, with a fold and a borrowed
// push, and the sum is the bits of one reduction.
TEST(BucketReducerTest, HalfChunksSummedOverAPoolAreBitwiseOneReduction) {
  const int64_t n = 2 * static_cast<int64_t>(UpdatePool::kMinChunk) + 12345;
  UpdatePool pool(4);
  for (HalfType half : {HalfType::kBF16, HalfType::kF16}) {
    Driver d(3, n, n, half, /*borrowed=*/{1});
    d.SetStep(5);
    d.Land(0, 0);
    if (d.Land(1, 0).fold) d.reducer().Fold(0);
    ASSERT_TRUE(d.Land(2, 0).complete);
    std::vector<float> out(static_cast<size_t>(n), -1.f);
    {
      UpdatePool::Scope scope(&pool);
      EXPECT_EQ(d.Sum(0, &out), 1u) << "the borrowed push's lease";
    }
    EXPECT_EQ(Differing(out, Reference(d.wire(), n, half)), 0);
  }
  EXPECT_EQ(pool.split_calls(), 2u) << "each bucket's chunks went over the pool";
}

}  // namespace
}  // namespace tessel
