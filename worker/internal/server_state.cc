#include "worker/internal/server_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/tensor_steps.h"
#include "rpc/limits.h"

namespace tessel::internal {
namespace {
// Elements per ReadState/WriteState call: the protocol's limit.
constexpr int64_t kChunk = kMaxStateElementsPerCall;
}  // namespace

absl::Status ReadServerState(const JobContext& ctx, const ShardFleet& fleet, TrainState* out) {
  const size_t slots = out->state.size();
  // Each shard's per-tensor skips, merged after.
  std::vector<std::vector<int64_t>> skips(static_cast<size_t>(ctx.layout->num_shards()));
  absl::Status s = fleet.ForEach([&](int shard) -> absl::Status {
    // A shard without elements takes no part in the steps (core/layout.h).
    if (ctx.layout->shard_empty(shard)) return absl::OkStatus();
    const Range r = ctx.layout->shard_range(shard);
    for (int64_t off = 0; off < r.size(); off += kChunk) {
      v1::ReadStateRequest req;
      req.set_job(ctx.options.job);
      req.set_epoch(ctx.epoch.load());
      req.set_step(ctx.step);
      req.set_offset(off);
      req.set_count(std::min(kChunk, r.size() - off));
      v1::ShardState st;
      TESSEL_RETURN_IF_ERROR(fleet.Call(shard, &v1::ShardServer::Stub::ReadState, req, &st,
                                        absl::StrCat(ctx.Where(), ": ReadState"),
                                        absl::Minutes(1)));
      const size_t bytes = static_cast<size_t>(req.count()) * sizeof(float);
      if (st.params().size() != bytes || st.state().size() != bytes * slots ||
          st.range_begin() != r.begin || st.range_end() != r.end) {
        return absl::DataLossError(
            absl::StrCat(ctx.Where(), ": shard ", shard, " sent a state chunk of the wrong size"));
      }
      std::memcpy(out->params.data() + r.begin + off, st.params().data(), bytes);
      if (off == 0) skips[shard].assign(st.tensor_skips().begin(), st.tensor_skips().end());
      for (size_t k = 0; k < slots; ++k) {
        std::memcpy(out->state[k].data() + r.begin + off, st.state().data() + k * bytes, bytes);
      }
    }
    return absl::OkStatus();
  });
  TESSEL_RETURN_IF_ERROR(s);
  out->tensor_skips.clear();  // each shard's counts are right for its own tensors
  for (const auto& shard_skips : skips) MergeSkips(shard_skips, &out->tensor_skips);
  if (NoSkips(out->tensor_skips)) out->tensor_skips.clear();
  return absl::OkStatus();
}

absl::Status WriteServerState(const JobContext& ctx, const ShardFleet& fleet,
                              const TrainState& state) {
  const bool ddp = ctx.ddp();
  return fleet.ForEach([&](int shard) -> absl::Status {
    // A shard without elements takes no part in the steps (core/layout.h):
    // nothing to write, and no step to move.
    if (ctx.layout->shard_empty(shard)) return absl::OkStatus();
    const Range r = ctx.layout->shard_range(shard);
    int64_t off = 0;
    do {
      const int64_t count = ddp ? 0 : std::min(kChunk, r.size() - off);
      v1::WriteStateRequest req;
      req.set_job(ctx.options.job);
      req.set_epoch(ctx.epoch.load());
      req.set_step(state.step);
      req.set_offset(off);
      const size_t bytes = static_cast<size_t>(count) * sizeof(float);
      if (count > 0) {
        req.mutable_params()->assign(
            reinterpret_cast<const char*>(state.params.data() + r.begin + off), bytes);
        for (const auto& slot : state.state) {
          req.mutable_state()->append(reinterpret_cast<const char*>(slot.data() + r.begin + off),
                                      bytes);
        }
      }
      off += count;
      req.set_commit(off >= r.size() || ddp);
      if (req.commit()) {
        for (int64_t s : state.tensor_skips) req.add_tensor_skips(s);
      }
      v1::WriteStateResponse resp;
      TESSEL_RETURN_IF_ERROR(fleet.Call(shard, &v1::ShardServer::Stub::WriteState, req, &resp,
                                        absl::StrCat(ctx.Where(), ": WriteState"),
                                        absl::Minutes(1)));
    } while (off < r.size() && !ddp);
    return absl::OkStatus();
  });
}

}  // namespace tessel::internal
