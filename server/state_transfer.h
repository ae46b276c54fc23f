// StateTransfer: the rules of moving a shard's training state between steps
// (the ReadState/WriteState RPCs), apart from the state itself. ShardJob
// asks it, under the job's lock, whether a read may run and what a write
// does, and carries out the result on its masters, state and version.
//
// Contract:
//   CheckRange(offset, count)  a read asks for at most
//       kMaxStateElementsPerCall (rpc/limits.h) elements inside the range;
//       FailedPrecondition for DDP (no parameters here), InvalidArgument
//       otherwise.
//   CheckRead(shard, step, epoch)  the shard is initialized and idle at
//       `step` (no step in progress), and `epoch` (0: unchecked) is the
//       job's; FailedPrecondition otherwise.
//   Write(shard, req)  stages req's chunk of masters and state (DDP takes
//       only the commit) and, with req.commit, checks the commit: the
//       tensor skips are valid, every element was staged for req.step (DDP:
//       none is needed), and no step is in progress or waited for. true:
//       commit now (CopyTo the masters and state if the shard holds them,
//       move the version to req.step with req.tensor_skips, then Drop);
//       false: staged, no commit asked for. A writer from another epoch, a
//       chunk that does not fit and every refused commit drop the staging;
//       nothing of the shard changes on any error.
//
// Threads: none and no lock of its own: the owner (ShardJob) calls it under
// its lock.
//
// Example (ShardJob::WriteState, under mu_):
//   TESSEL_ASSIGN_OR_RETURN(const bool commit, transfer_.Write(ShardLocked(), req));
//   if (!commit) return StateWritten{transfer_.staged(), version_};
//   if (holds_params) transfer_.CopyTo(absl::MakeSpan(values_), rule_->state());
//   version_ = req.step;
//   transfer_.Drop();
#ifndef TESSEL_SERVER_STATE_TRANSFER_H_
#define TESSEL_SERVER_STATE_TRANSFER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/state_staging.h"

namespace tessel {

// One WriteState call: a chunk of `params` (count floats) and `state`
// (slots x count floats, slot by slot) at `offset`, and/or the commit.
struct StateWrite {
  int64_t step = 0;
  int64_t epoch = 0;  // 0: unchecked
  int64_t offset = 0;
  absl::string_view params;
  absl::string_view state;
  bool commit = false;
  std::vector<int64_t> tensor_skips;  // with the commit
};

class StateTransfer {
 public:
  // The shard as a call finds it (the job's state, read under its lock).
  struct Shard {
    int64_t epoch = 0;
    int64_t version = 0;  // the step it is at
    bool initialized = false;
    bool step_in_progress = false;
    bool pulls_waiting = false;
  };

  // `where` starts every refusal ("job 'J' shard S: "); the shard's range
  // has `elements` elements and `slots` optimizer state slots; the layout
  // `num_tensors` tensors. `holds_params` is false for DDP.
  StateTransfer(std::string where, int64_t elements, int slots, int num_tensors, bool holds_params);

  absl::Status CheckRange(int64_t offset, int64_t count) const;
  absl::Status CheckRead(const Shard& shard, int64_t step, int64_t epoch) const;
  absl::StatusOr<bool> Write(const Shard& shard, const StateWrite& req);

  // Elements staged so far.
  int64_t staged() const { return staging_.staged(); }
  // The staged masters and state (after Write said commit, if the shard
  // holds parameters).
  void CopyTo(absl::Span<float> values, std::vector<std::vector<float>>& state) const {
    staging_.CopyTo(values, state);
  }
  void Drop() { staging_.Drop(); }

 private:
  const std::string where_;
  const int64_t elements_;
  const int slots_;
  const int num_tensors_;
  const bool holds_params_;
  StateStaging staging_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_STATE_TRANSFER_H_
