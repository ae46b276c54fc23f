// StateStaging: where WriteState collects a shard's training state before
// it is committed. Chunks of the masters and of every optimizer state slot
// arrive for one step, in any order, possibly overlapping; the staging
// counts which elements came, so a commit can check the whole range did.
//
// Contract:
//   Stage(step, offset, params, state)  `params` is count floats for
//       elements [offset, offset + count); `state` is `slots` blocks of
//       count floats, slot by slot. A chunk for another step than the one
//       staged first drops what was staged. A chunk that does not fit
//       (params not whole floats, state not slots * params bytes, elements
//       outside [0, elements)) drops everything and returns false.
//   Complete(step)  every element of the range was staged for `step`.
//   CopyTo(values, state)  writes the staged masters and slots (requires
//       Complete).
//   Drop()  forgets everything and frees the memory (a full copy of the
//       shard's state while staging).
//
// Threads: none and no lock: the owner (ShardJob) serializes every call.
//
// Example:
//   StateStaging staging(/*elements=*/n, /*slots=*/2);
//   if (!staging.Stage(step, 0, params_bytes, state_bytes)) { /* refuse */ }
//   if (staging.Complete(step)) staging.CopyTo(values, state);
#ifndef TESSEL_SERVER_STATE_STAGING_H_
#define TESSEL_SERVER_STATE_STAGING_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tessel {

class StateStaging {
 public:
  StateStaging(int64_t elements, int slots) : elements_(elements), slots_(slots) {}

  bool Stage(int64_t step, int64_t offset, absl::string_view params, absl::string_view state);
  // Distinct elements staged, and for which step (-1: nothing staged).
  int64_t staged() const { return count_; }
  int64_t step() const { return step_; }
  bool Complete(int64_t step) const { return step_ == step && count_ == elements_; }
  void CopyTo(absl::Span<float> values, std::vector<std::vector<float>>& state) const;
  void Drop();

 private:
  const int64_t elements_;
  const int slots_;
  std::vector<float> staged_;  // masters, then each slot, `elements_` floats each
  std::vector<uint8_t> seen_;  // per element: staged yet
  int64_t count_ = 0;
  int64_t step_ = -1;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_STATE_STAGING_H_
