#include "worker/hybrid_layout.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"

namespace tessel {
namespace {

// The tag's index field (layer, stage boundary or partition) has 12 bits.
constexpr int kMaxTagIndex = 4095;

[[noreturn]] void Fatal(const std::string& message) {
  TESSEL_LOG(ERROR) << message;
  std::abort();
}

}  // namespace

absl::Status ValidateHybridConfig(const HybridConfig& c, int world_size) {
  if (c.dp < 1 || c.tp < 1 || c.pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dp, tp and pp must each be >= 1, got dp=", c.dp, " tp=", c.tp, " pp=", c.pp));
  }
  if (static_cast<int64_t>(c.dp) * c.tp * c.pp != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dp=", c.dp, " x tp=", c.tp, " x pp=", c.pp, " = ",
        static_cast<int64_t>(c.dp) * c.tp * c.pp, " processes, but the world size is ", world_size,
        ": start dp*tp*pp processes (world size ", static_cast<int64_t>(c.dp) * c.tp * c.pp,
        ") or change dp, tp or pp so that dp*tp*pp = ", world_size));
  }
  if (c.tp * c.pp > kMaxTagIndex + 1) {
    return absl::InvalidArgumentError(absl::StrCat("tp*pp = ", c.tp * c.pp, " partitions; at most ",
                                                   kMaxTagIndex + 1, " are supported"));
  }
  if (c.micro_batches < 1 || c.micro_batches > kMaxMicroBatches) {
    return absl::InvalidArgumentError(absl::StrCat("micro_batches must be in [1, ",
                                                   kMaxMicroBatches, "], got ", c.micro_batches));
  }
  return absl::OkStatus();
}

RankCoords CoordsOf(const HybridConfig& c, int rank) {
  RankCoords out;
  out.t = rank % c.tp;
  out.p = (rank / c.tp) % c.pp;
  out.d = rank / (c.tp * c.pp);
  return out;
}

int RankOf(const HybridConfig& c, const RankCoords& x) {
  return x.d * (c.pp * c.tp) + x.p * c.tp + x.t;
}

std::string DescribeRank(const HybridConfig& c, int rank) {
  const RankCoords x = CoordsOf(c, rank);
  return absl::StrCat("rank ", rank, " (d", x.d, " p", x.p, " t", x.t, ")");
}

std::vector<int> TensorGroup(const HybridConfig& c, int rank) {
  RankCoords x = CoordsOf(c, rank);
  std::vector<int> out;
  for (x.t = 0; x.t < c.tp; ++x.t) out.push_back(RankOf(c, x));
  return out;
}

std::vector<int> DataGroup(const HybridConfig& c, int rank) {
  RankCoords x = CoordsOf(c, rank);
  std::vector<int> out;
  for (x.d = 0; x.d < c.dp; ++x.d) out.push_back(RankOf(c, x));
  return out;
}

int NextStageRank(const HybridConfig& c, int rank) {
  RankCoords x = CoordsOf(c, rank);
  if (x.p + 1 >= c.pp) return -1;
  ++x.p;
  return RankOf(c, x);
}

int PrevStageRank(const HybridConfig& c, int rank) {
  RankCoords x = CoordsOf(c, rank);
  if (x.p == 0) return -1;
  --x.p;
  return RankOf(c, x);
}

uint64_t HybridTag(HybridMessage kind, int64_t step, int micro_batch, int index) {
  if (step < 0 || step >= kMaxHybridSteps || micro_batch < 0 || micro_batch > kMaxMicroBatches ||
      index < 0 || index > kMaxTagIndex) {
    Fatal(absl::StrCat("HybridTag out of range: step ", step, ", micro-batch ", micro_batch,
                       ", index ", index));
  }
  return (static_cast<uint64_t>(kind) << 56) | (static_cast<uint64_t>(step) << 24) |
         (static_cast<uint64_t>(micro_batch) << 12) | static_cast<uint64_t>(index);
}

std::vector<PipelineOp> OneFOneBSchedule(int stage, int stages, int micro_batches) {
  const int warmup = std::min(stages - 1 - stage, micro_batches);
  std::vector<PipelineOp> ops;
  ops.reserve(2 * static_cast<size_t>(micro_batches));
  int next_forward = 0;
  int next_backward = 0;
  for (; next_forward < warmup; ++next_forward) ops.push_back({true, next_forward});
  while (next_forward < micro_batches) {
    ops.push_back({true, next_forward++});
    ops.push_back({false, next_backward++});
  }
  while (next_backward < micro_batches) ops.push_back({false, next_backward++});
  return ops;
}

}  // namespace tessel
