// PushParts: the micro-batch parts one shard took in the step in progress.
// A worker that accumulates gradients may push a bucket in parts before its
// push (FrameHeader::bucket_count = kPushPart + the part's index, core/wire.h);
// the shard sums each part of a rank's bucket once a step. A part that comes
// again (a replay of captured bytes, or a worker's bug) is refused: summed
// twice, it would change the update.
//
// Contract:
//   Take(b, r, i, step)  part i of rank r's push of bucket b: OK, and taken,
//                        unless it was taken already this step; then
//                        AlreadyExists, "rank r already pushed part i of
//                        bucket b in step S (a replayed part)" (docs/errors.md;
//                        `step` is for that message only).
//   Failed(b, r, i)      its receive failed, nothing was summed: it may come
//                        again.
//   NextStep()           the version moved: no part is taken.
// Indices are the frame checks' to bound (below kMaxPushParts); this object
// holds at most one entry per part taken.
//
// Threads: none of its own and no lock: the owner serializes every call
// (PushTracker's owner, ShardJob, holds its mutex). Pure.
//
// Example:
//   PushParts parts;
//   TESSEL_RETURN_IF_ERROR(parts.Take(h.bucket, h.rank, PushPartIndex(h), h.step));
//   if (!received.ok()) parts.Failed(h.bucket, h.rank, PushPartIndex(h));
#ifndef TESSEL_SERVER_PUSH_PARTS_H_
#define TESSEL_SERVER_PUSH_PARTS_H_

#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>

#include "absl/status/status.h"

namespace tessel {

class PushParts {
 public:
  absl::Status Take(int bucket, int rank, uint32_t index, int64_t step);
  void Failed(int bucket, int rank, uint32_t index);
  void NextStep() { taken_.clear(); }
  // Parts taken this step.
  size_t size() const { return taken_.size(); }

 private:
  std::set<std::tuple<int, int, uint32_t>> taken_;  // (bucket, rank, index)
};

}  // namespace tessel

#endif  // TESSEL_SERVER_PUSH_PARTS_H_
