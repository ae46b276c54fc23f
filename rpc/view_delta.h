// Registry views as deltas: what a Watch stream with WatchRequest.deltas
// sends after its first full view (proto/registry.proto, View.delta), so a
// watcher receives bytes in proportion to what changed, not to the group's
// size (with N members each waiting for the group to fill, full views cost
// O(N^2) bytes per change; deltas O(N)).
//
// Example:
//   v1::View d = ViewDelta(sent, now);        // the registry, per stream
//   absl::Status s = ApplyViewDelta(d, &mine);  // the watcher: mine == now
#ifndef TESSEL_RPC_VIEW_DELTA_H_
#define TESSEL_RPC_VIEW_DELTA_H_

#include "absl/status/status.h"
#include "proto/registry.pb.h"

namespace tessel {

// The delta from `from` to `to` (the same group): delta = true, base_epoch =
// from.epoch(), epoch = to.epoch(), `members` the members of `to` that are
// new or differ in any field, `removed` the keys of those `from` had and `to`
// has not.
v1::View ViewDelta(const v1::View& from, const v1::View& to);

// Turns `view` into the view `delta` leads to, members sorted by (role,
// rank). A full view (delta = false) replaces it. FailedPrecondition, and
// `view` unchanged, when the delta starts from another epoch than view's.
absl::Status ApplyViewDelta(const v1::View& delta, v1::View* view);

}  // namespace tessel

#endif  // TESSEL_RPC_VIEW_DELTA_H_
