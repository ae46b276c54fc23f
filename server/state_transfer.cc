#include "server/state_transfer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor_steps.h"
#include "rpc/limits.h"

namespace tessel {

StateTransfer::StateTransfer(std::string where, int64_t elements, int slots, int num_tensors,
                             bool holds_params)
    : where_(std::move(where)),
      elements_(elements),
      slots_(slots),
      num_tensors_(num_tensors),
      holds_params_(holds_params),
      staging_(elements, slots) {}

absl::Status StateTransfer::CheckRange(int64_t offset, int64_t count) const {
  if (!holds_params_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "DDP keeps parameters and optimizer state on the workers"));
  }
  const int64_t n = elements_;
  if (offset < 0 || count < 0 || count > kMaxStateElementsPerCall || offset > n ||
      count > n - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, "ReadState [", offset, ", +", count, ") is outside the range of ", n,
                     " elements (at most ", kMaxStateElementsPerCall, " per call)"));
  }
  return absl::OkStatus();
}

absl::Status StateTransfer::CheckRead(const Shard& shard, int64_t step, int64_t epoch) const {
  if (epoch != 0 && epoch != shard.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(where_, "ReadState from epoch ", epoch,
                                                      " but the job is at epoch ", shard.epoch));
  }
  if (!shard.initialized) {
    return absl::FailedPreconditionError(absl::StrCat(where_, "not initialized yet"));
  }
  if (step != shard.version || shard.step_in_progress) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "ReadState for step ", step, " but the shard is at step ",
                     shard.version, shard.step_in_progress ? " with the next step in progress" : "",
                     "; read between steps, when every worker has finished the step"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> StateTransfer::Write(const Shard& shard, const StateWrite& req) {
  if (req.step < 0) return absl::InvalidArgumentError(absl::StrCat(where_, "negative step"));
  if (req.epoch != 0 && req.epoch != shard.epoch) {
    // A writer from before a recovery (a zombie): nothing of it is kept.
    staging_.Drop();
    return absl::FailedPreconditionError(absl::StrCat(where_, "WriteState from epoch ", req.epoch,
                                                      " but the job is at epoch ", shard.epoch));
  }
  if (!req.params.empty() || !req.state.empty()) {
    if (!holds_params_) {
      return absl::InvalidArgumentError(
          absl::StrCat(where_, "DDP shards hold no parameters; send only the commit"));
    }
    if (!staging_.Stage(req.step, req.offset, req.params, req.state)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where_, "WriteState chunk at offset ", req.offset, " with ", req.params.size(),
          " param bytes and ", req.state.size(), " state bytes does not fit a range of ", elements_,
          " elements with ", slots_, " state slots; staging dropped"));
    }
  }
  if (!req.commit) return false;
  absl::Status skips = ValidateSkips(req.tensor_skips, num_tensors_, req.step);
  if (!skips.ok()) {
    staging_.Drop();
    return absl::InvalidArgumentError(absl::StrCat(where_, "commit of step ", req.step, ": ",
                                                   skips.message(), "; nothing changed"));
  }
  if (holds_params_ && !staging_.Complete(req.step)) {
    const int64_t got = staging_.step() == req.step ? staging_.staged() : 0;
    staging_.Drop();
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "commit of step ", req.step, " with ", got, " of ", elements_,
                     " elements staged; send every chunk of the range first; nothing changed"));
  }
  if (shard.step_in_progress || shard.pulls_waiting) {
    staging_.Drop();
    return absl::FailedPreconditionError(
        absl::StrCat(where_,
                     "a step is in progress (buckets pushed or pulls waiting); write the state "
                     "between steps, when every worker is idle; nothing changed"));
  }
  return true;
}

}  // namespace tessel
