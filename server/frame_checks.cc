#include "server/frame_checks.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {

absl::Status FrameChecks::CheckAddress(const FrameHeader& h, const State& st,
                                       bool* stale_epoch) const {
  const std::string& where = s_.where;
  if (h.job_id != s_.job_id) {
    return absl::NotFoundError(absl::StrCat(where, "frame is for another job"));
  }
  if (h.epoch != st.epoch) {
    *stale_epoch = true;
    return absl::FailedPreconditionError(
        absl::StrCat(where, "frame from membership epoch ", h.epoch, " but the job is at epoch ",
                     st.epoch, "; the sender must re-read the membership view"));
  }
  if (h.shard != s_.shard) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "frame addressed to shard ", h.shard, " reached shard ", s_.shard));
  }
  if (h.rank < 0 || h.rank >= s_.world) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "rank ", h.rank, " is outside [0, ", s_.world, ")"));
  }
  return absl::OkStatus();
}

absl::Status FrameChecks::CheckHeld(const FrameHeader& h, const State& st,
                                    bool* stale_epoch) const {
  TESSEL_RETURN_IF_ERROR(CheckAddress(h, st, stale_epoch));
  const std::string& where = s_.where;
  if (h.payload_bytes != 0 || h.bucket != 0 ||
      (h.type == FrameType::kNormAsk && h.bucket_count != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, FrameTypeName(h.type), " carries no payload and names no bucket"));
  }
  if (!s_.holds_params) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        "DDP's workers apply the update and clip it themselves; held steps are for zero1, "
        "zero2 and fsdp"));
  }
  if (!st.initialized) {
    return absl::FailedPreconditionError(absl::StrCat(where, "not initialized yet"));
  }
  return absl::OkStatus();
}

absl::Status FrameChecks::CheckData(const FrameHeader& h, const State& st, bool init_seen,
                                    bool slot_empty, bool* stale_epoch) const {
  TESSEL_RETURN_IF_ERROR(CheckAddress(h, st, stale_epoch));
  const std::string& where = s_.where;
  if (h.bucket < 0 || h.bucket >= num_buckets()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "bucket ", h.bucket, " is outside [0, ", num_buckets(), ")"));
  }
  // INIT carries fp32 masters; PUSH carries gradients in the wire precision,
  // or top-k pairs (index, value).
  const int64_t n = s_.bucket_elements[h.bucket];
  const bool init = h.type == FrameType::kInit;
  const bool sparse = h.type == FrameType::kPush && s_.topk_ratio > 0;
  const uint64_t want =
      sparse ? s_.push_bytes[h.bucket] : static_cast<uint64_t>(n) * (init || !s_.half ? 4 : 2);
  if (h.payload_bytes != want && sparse) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "top-k bucket ", h.bucket, " carries ", h.payload_bytes, " bytes; expected ", want,
        " (", want / 8, " index/value pairs of ", n, " elements at ratio ", s_.topk_ratio, ")"));
  }
  if (h.payload_bytes != want && h.type == FrameType::kPush &&
      h.payload_bytes == static_cast<uint64_t>(n) * (s_.half ? 4 : 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, IsPushPart(h) ? "micro-batch part" : "push", " of bucket ", h.bucket,
                     " carries ", s_.half ? "float32" : "half floats", " (", h.payload_bytes,
                     " bytes) but this job pushes ", s_.half ? "half floats" : "float32", " (",
                     want, " bytes): the worker's precision ", "differs from the job's"));
  }
  if (h.payload_bytes != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "bucket ", h.bucket, " carries ", h.payload_bytes, " bytes; expected ",
                     want, " (", n, init || !s_.half ? " float32)" : " half floats)"));
  }
  if (init) {
    if (!s_.holds_params) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, "DDP keeps parameters on the workers; INIT is not accepted"));
    }
    if (h.rank != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(where, "only rank 0 initializes parameters; got INIT from rank ", h.rank));
    }
    if (st.initialized || h.step != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, "parameters are already initialized (step ", st.version, "); INIT refused"));
    }
    if (init_seen) {
      return absl::AlreadyExistsError(
          absl::StrCat(where, "INIT of bucket ", h.bucket, " repeated"));
    }
    return absl::OkStatus();
  }
  if (h.type != FrameType::kPush) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, FrameTypeName(h.type), " frames carry no gradient data"));
  }
  if (!st.initialized) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "parameters are not initialized yet; rank 0 must send INIT first"));
  }
  if (IsPushPart(h) && s_.topk_ratio > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(where,
                     "micro-batch parts are summed dense only; this job pushes top-k pairs "
                     "(accumulate on the worker)"));
  }
  if (h.step != st.version) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "push for step ", h.step, " but the shard is at step ", st.version));
  }
  if (!slot_empty) {
    return absl::AlreadyExistsError(absl::StrCat(where, "rank ", h.rank, " already pushed bucket ",
                                                 h.bucket, " of step ", h.step));
  }
  return absl::OkStatus();
}

absl::StatusOr<FrameChecks::PullAt> FrameChecks::CheckPull(const FrameHeader& h, const State& st,
                                                           bool* stale_epoch) const {
  TESSEL_RETURN_IF_ERROR(CheckAddress(h, st, stale_epoch));
  const std::string& where = s_.where;
  if (h.payload_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "PULL carries no payload"));
  }
  if (h.bucket < 0 || h.bucket > num_buckets() ||
      static_cast<int64_t>(h.bucket_count) > num_buckets() - h.bucket) {
    return absl::InvalidArgumentError(absl::StrCat(where, "PULL of buckets [", h.bucket, ", ",
                                                   int64_t{h.bucket} + h.bucket_count,
                                                   ") is outside [0, ", num_buckets(), ")"));
  }
  if (st.initialized && (h.step == st.version || h.step == st.previous_whole)) {
    return PullAt::kReady;
  }
  if (h.step == st.version + (st.initialized ? 1 : 0)) return PullAt::kInFlight;
  return absl::FailedPreconditionError(h.step < st.version
                                           ? absl::StrCat(where, "parameters of step ", h.step,
                                                          " were replaced by step ", st.version)
                                           : absl::StrCat(where, "pull for step ", h.step,
                                                          " but the shard is at step ", st.version,
                                                          "; push that step's gradients first"));
}

}  // namespace tessel
