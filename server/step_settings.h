// StepSettings: what a shard's next step applies besides the gradients, and
// the rules for changing it between steps: the optimizer's hyper-parameters
// (a learning-rate schedule may change them; the kind may not change), the
// tensors the step skips (torch's rule for parameters no rank has a gradient
// for, core/tensor_steps.h), and per tensor the steps that skipped it.
//
// Contract (`version`: the shard's updates applied; settings for step s
// arrive while the shard is at s - 1, before s is applied):
//   SetOptimizer(p, step, version, applying)  validated like a new job's;
//       refused if the kind changes, step != version + 1, or the step is
//       already being applied (`applying`). On error nothing changes.
//   SkipTensors(tensors, step, version, complete)  the tensors `step` skips
//       (indices into the layout, each once); refused if step != version + 1,
//       if another set was given for the step (every rank sends the same),
//       or if a bucket of this shard holding one of them is `complete`
//       (pushed by every rank: its update may have begun). On error nothing
//       changes.
//   ForUpdate(step)  a copy of what a bucket's update of `step` reads.
//   EndStep()  the step was applied: its skipped tensors count one more
//       skip (only those in this shard's range: workers tell only the shards
//       that hold one), and the next step skips nothing until told.
//   ResetSkips(skips)  a restore or a state write: the counts become
//       `skips` (all zero: none), nothing is skipped now.
// A shard whose range is empty takes no part in the steps (core/layout.h):
// it takes optimizer settings for any step and keeps no skipped tensors
// (validated as above either way), since it has nothing to apply them to.
// Refusals start with `where` ("job 'J' shard S: ").
//
// Threads: none and no lock: the owner (ShardJob) serializes every call.
//
// Example:
//   StepSettings settings("job 'a' shard 0: ", layout, 0, optimizer);
//   absl::Status s = settings.SkipTensors({3}, version + 1, version, complete);
//   BucketStep step = settings.ForUpdate(version + 1);  // per bucket
//   settings.EndStep();                                 // once per step
#ifndef TESSEL_SERVER_STEP_SETTINGS_H_
#define TESSEL_SERVER_STEP_SETTINGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "server/update_rule.h"

namespace tessel {

class StepSettings {
 public:
  // `layout` must outlive the settings.
  StepSettings(std::string where, const Layout& layout, int shard,
               const OptimizerParams& optimizer);

  absl::Status SetOptimizer(const OptimizerParams& optimizer, int64_t step, int64_t version,
                            bool applying);
  absl::Status SkipTensors(const std::vector<int32_t>& tensors, int64_t step, int64_t version,
                           const std::function<bool(int bucket)>& complete);
  BucketStep ForUpdate(int64_t step) const;
  void EndStep();
  void ResetSkips(std::vector<int64_t> skips);
  // Per tensor, the steps that skipped it (empty: none ever did).
  const std::vector<int64_t>& skips() const { return skips_; }

 private:
  const std::string where_;
  const Layout& layout_;
  const int shard_;
  // Per tensor of the layout: overlaps this shard's range.
  std::vector<uint8_t> owned_;
  OptimizerParams optimizer_;
  std::vector<int64_t> skips_;
  std::vector<uint8_t> skip_now_;  // empty: none
};

}  // namespace tessel

#endif  // TESSEL_SERVER_STEP_SETTINGS_H_
