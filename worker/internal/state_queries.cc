#include "worker/internal/state_queries.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "worker/internal/server_state.h"
#include "worker/train_state.h"

namespace tessel::internal {

StateQueries::StateQueries(const StateQueryParts& parts)
    : p_(parts), stopper_(parts.ctx->options.early_stopping) {}

absl::StatusOr<std::vector<ShardReport>> StateQueries::ServerStats() {
  TESSEL_ASSIGN_OR_RETURN(const std::vector<v1::ShardStats> stats, p_.control->Stats());
  std::vector<ShardReport> out;
  for (size_t shard = 0; shard < stats.size(); ++shard) {
    const v1::ShardStats& st = stats[shard];
    ShardReport rep;
    rep.shard = static_cast<int>(shard);
    rep.range = Range{st.range_begin(), st.range_end()};
    rep.epoch = st.epoch();
    rep.step = st.step();
    rep.initialized = st.initialized();
    rep.step_in_progress = st.step_in_progress();
    rep.state_digest = st.state_digest();
    rep.params_bytes = st.memory().params_bytes();
    rep.optimizer_bytes = st.memory().optimizer_bytes();
    rep.grad_buffer_bytes = st.memory().grad_buffer_bytes();
    rep.rejected_frames = st.rejected_frames();
    rep.stale_epoch_frames = st.stale_epoch_frames();
    rep.applied_steps = st.applied_steps();
    rep.recoveries = st.recoveries();
    rep.update_us = st.update_us();
    rep.pushed_bytes = st.pushed_bytes();
    rep.folded_pushes = st.folded_pushes();
    rep.process_cpu_us = st.process_cpu_us();
    out.push_back(std::move(rep));
  }
  return out;
}

absl::StatusOr<absl::Span<const float>> StateQueries::SynchronizeGradients() {
  const JobContext& ctx = *p_.ctx;
  if (ctx.layout == nullptr) {
    return absl::FailedPreconditionError("SynchronizeGradients before RegisterLayout");
  }
  if (ctx.unit_grads()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.Where(), ": SynchronizeGradients needs a full gradient buffer; with ",
        ctx.fsdp() ? "fsdp" : "per-unit zero2",
        " each unit's gradients are pushed and freed as backward goes (the servers average them)"));
  }
  const ModelBuffers& b = p_.exchange->buffers();
  std::vector<float>& synced = synced_grads_;
  const size_t n = static_cast<size_t>(ctx.layout->num_params());
  synced.resize(n);
  if (ctx.half) {
    HalfToFloat(*ctx.half, b.grads_half.data(), synced.data(), n);
  } else {
    std::copy(b.grads.begin(), b.grads.end(), synced.begin());
    const int micro = p_.exchange->micro_batches();
    if (micro > 1) {  // as Step() will: the mean over micro-batches
      const float count = static_cast<float>(micro);
      for (float& g : synced) g /= count;
    }
  }
  TESSEL_RETURN_IF_ERROR(p_.collectives->AllReduceMean(absl::MakeSpan(synced)));
  return absl::MakeConstSpan(synced);
}

absl::StatusOr<OptimizerStateReport> StateQueries::SynchronizeOptimizerState() {
  JobContext& ctx = *p_.ctx;
  if (ctx.layout == nullptr) {
    return absl::FailedPreconditionError("SynchronizeOptimizerState before RegisterLayout");
  }
  OptimizerStateReport report;
  report.step = ctx.step;
  if (!ctx.ddp()) {
    // One copy, sharded: nothing to copy around; check the shards agree on the step.
    TESSEL_ASSIGN_OR_RETURN(const std::vector<ShardReport> stats, ServerStats());
    for (const ShardReport& st : stats) {
      report.digests.push_back(st.state_digest);
      // A shard without elements has no step (core/layout.h).
      if (ctx.layout->shard_empty(st.shard)) continue;
      if (st.step != ctx.step || st.step_in_progress || !st.initialized) report.consistent = false;
    }
    return report;
  }
  TESSEL_RETURN_IF_ERROR(p_.ddp->SyncToHost(ctx.half, &p_.exchange->buffers()));
  const uint64_t mine[2] = {static_cast<uint64_t>(ctx.step),
                            p_.ddp->Digest(ctx.step, p_.exchange->buffers().params)};
  TESSEL_ASSIGN_OR_RETURN(const std::vector<uint64_t> all, p_.collectives->AllGatherWords(mine));
  const int world = ctx.world_size;
  for (int r = 0; r < world; ++r) {
    if (all[2 * r] != all[0]) {  // the same verdict on every rank, before anything changes
      return absl::FailedPreconditionError(
          absl::StrCat(ctx.Where(), ": rank 0 is at step ", all[0], " and rank ", r, " at ",
                       all[2 * r], "; ranks must call SynchronizeOptimizerState at the same step"));
    }
    report.digests.push_back(absl::StrFormat("%016x", all[2 * r + 1]));
    if (all[2 * r + 1] != all[1]) report.repaired_ranks.push_back(r);
  }
  report.consistent = report.repaired_ranks.empty();
  if (report.consistent) return report;
  TESSEL_LOG(WARNING) << ctx.Where() << ": optimizer state differs from rank 0's on rank(s) "
                      << absl::StrJoin(report.repaired_ranks, ", ") << "; copying rank 0's";
  TESSEL_RETURN_IF_ERROR(
      BroadcastDdpState(0, &ctx, &p_.exchange->buffers(), p_.ddp, p_.collectives));
  TESSEL_RETURN_IF_ERROR(p_.ddp->SyncFromHost(p_.exchange->buffers()));
  return report;
}

absl::StatusOr<std::string> StateQueries::Serialize() {
  const JobContext& ctx = *p_.ctx;
  if (ctx.layout == nullptr)
    return absl::FailedPreconditionError("Serialize before RegisterLayout");
  TrainState state;
  state.spec = *p_.spec;
  state.step = ctx.step;
  const size_t n = static_cast<size_t>(ctx.layout->num_params());
  if (ctx.ddp()) {
    ModelBuffers& b = p_.exchange->buffers();
    TESSEL_RETURN_IF_ERROR(p_.ddp->SyncToHost(ctx.half, &b));
    state.params.assign(b.params.begin(), b.params.end());
    state.state = p_.ddp->slots();
    state.tensor_skips = p_.ddp->skips();
    return EncodeTrainState(state);
  }
  // Every rank reads between two barriers: no shard can start the next step
  // while anyone reads.
  TESSEL_RETURN_IF_ERROR(p_.collectives->AgreeOk(true, "Serialize"));
  state.params.assign(n, 0.f);
  state.state.assign(static_cast<size_t>(StateSlots(ctx.options.optimizer)), std::vector<float>(n));
  absl::Status read = ReadServerState(ctx, *p_.fleet, &state);
  absl::Status agreed = p_.collectives->AgreeOk(read.ok(), "Serialize");
  TESSEL_RETURN_IF_ERROR(read);  // this rank's own failure first
  TESSEL_RETURN_IF_ERROR(agreed);
  return EncodeTrainState(state);
}

absl::Status StateQueries::Deserialize(absl::string_view blob) {
  JobContext& ctx = *p_.ctx;
  if (ctx.layout == nullptr) {
    return absl::FailedPreconditionError("Deserialize before RegisterLayout");
  }
  absl::StatusOr<TrainState> state = DecodeTrainState(blob);
  absl::Status fits = state.ok() ? CheckTrainStateFits(*state, *p_.spec) : state.status();
  if (!fits.ok()) {
    fits = absl::Status(fits.code(), absl::StrCat(ctx.Where(), ": Deserialize: ", fits.message()));
  }
  // Agree before touching anything: a rank with a bad blob stops everyone.
  absl::Status agreed = p_.collectives->AgreeOk(fits.ok(), "Deserialize (checking the blob)");
  TESSEL_RETURN_IF_ERROR(fits);  // this rank's own failure first
  TESSEL_RETURN_IF_ERROR(agreed);
  absl::Status wrote = absl::OkStatus();
  if (ctx.rank.load() == 0) wrote = WriteServerState(ctx, *p_.fleet, *state);
  agreed = p_.collectives->AgreeOk(wrote.ok(), "Deserialize (writing the shard servers)");
  TESSEL_RETURN_IF_ERROR(wrote);
  TESSEL_RETURN_IF_ERROR(agreed);
  ctx.step = state->step;
  p_.exchange->NextStep();
  if (ctx.ddp()) {
    ModelBuffers& b = p_.exchange->buffers();
    b.params.assign(state->params.begin(), state->params.end());
    p_.ddp->slots() = state->state;
    p_.ddp->set_skips(state->tensor_skips);
    if (ctx.half) FloatToHalf(*ctx.half, b.params.data(), b.params_half.data(), b.params.size());
    return p_.ddp->SyncFromHost(b);
  }
  if (ctx.fsdp()) return p_.units->Barrier(ctx.step);  // units are gathered per step
  return p_.exchange->Pull(ctx.step);
}

absl::Status StateQueries::LoadParameters(absl::Span<const float> params) {
  const JobContext& ctx = *p_.ctx;
  if (ctx.layout == nullptr) {
    return absl::FailedPreconditionError("LoadParameters before RegisterLayout");
  }
  const bool fits = static_cast<int64_t>(params.size()) == ctx.layout->num_params();
  // Agree before reading the servers: a rank with the wrong size stops everyone.
  absl::Status agreed = p_.collectives->AgreeOk(fits, "LoadParameters (checking the size)");
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(ctx.Where(), ": LoadParameters: ", params.size(),
                                                   " values for a job of ",
                                                   ctx.layout->num_params(), " parameters"));
  }
  TESSEL_RETURN_IF_ERROR(agreed);
  TESSEL_ASSIGN_OR_RETURN(std::string blob, Serialize());
  TESSEL_ASSIGN_OR_RETURN(TrainState state, DecodeTrainState(blob));
  state.params.assign(params.begin(), params.end());
  TESSEL_ASSIGN_OR_RETURN(blob, EncodeTrainState(state));
  return Deserialize(blob);
}

absl::StatusOr<bool> StateQueries::ReportMetric(float value) {
  std::vector<float> mean = {value};
  TESSEL_RETURN_IF_ERROR(p_.collectives->AllReduceMean(absl::MakeSpan(mean)));
  stopper_.Observe(mean[0]);
  const WorkerOptions& o = p_.ctx->options;
  const bool stop =
      o.early_stop_hook ? o.early_stop_hook(mean[0], stopper_) : stopper_.ShouldStop();
  early_stop_ = early_stop_ || stop;
  return early_stop_;
}

}  // namespace tessel::internal
