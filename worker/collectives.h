// Collectives over a PeerGroup: all-reduce (a sum of floats), all-gather and
// broadcast (of bytes), and a barrier, among a subgroup of its ranks. The
// single implementation of worker-to-worker collectives: hybrid jobs use it
// for tensor-parallel sums and loss reports, and for agreeing on
// configurations and checkpoint steps.
//
// AllReduceSum sums IN FIXED RANK ORDER: every member sends its vector to
// every other member, and each member computes v_{m0} + v_{m1} + ... + v_{mk}
// left to right in the order of `members`, so every member gets the same bits
// whatever order messages arrive in, and a single process can reproduce the
// result exactly. (All-to-all costs (k-1) messages per member: right for the
// small tensor-parallel groups of one host; a ring would need a different
// fixed order.)
//
// Contract: `members` are ascending ranks of the group and include the
// caller; every member calls the same collective with the same members, tag
// and (for AllReduceSum) size, in the same order; a tag is not reused while
// its messages are in flight. Failures name the collective (`what`) and the
// peer, as PeerGroup's waits do.
//
// Threads: the caller's thread; see PeerGroup.
//
// Example:
//   RETURN_IF_ERROR(AllReduceSum(group, {0, 1}, tag, absl::MakeSpan(partial), "fc1 sum"));
//   TESSEL_ASSIGN_OR_RETURN(auto texts, AllGather(group, all, tag, config, "configurations"));
#ifndef TESSEL_WORKER_COLLECTIVES_H_
#define TESSEL_WORKER_COLLECTIVES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/peer_group.h"

namespace tessel {

// data <- the sum over `members` of their `data`, in member order.
absl::Status AllReduceSum(PeerGroup& group, absl::Span<const int> members, uint64_t tag,
                          absl::Span<float> data, absl::string_view what);

// Every member's `mine`, in member order (this member's included).
absl::StatusOr<std::vector<std::string>> AllGather(PeerGroup& group, absl::Span<const int> members,
                                                   uint64_t tag, absl::string_view mine,
                                                   absl::string_view what);

// `*bytes` of member `root` onto every member.
absl::Status Broadcast(PeerGroup& group, absl::Span<const int> members, int root, uint64_t tag,
                       std::string* bytes, absl::string_view what);

// Returns once every member has reached the barrier with this tag.
absl::Status Barrier(PeerGroup& group, absl::Span<const int> members, uint64_t tag,
                     absl::string_view what);

}  // namespace tessel

#endif  // TESSEL_WORKER_COLLECTIVES_H_
