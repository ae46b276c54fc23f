// Elastic growth's decisions (WorkerOptions::elastic_max_workers), as pure
// functions of what each rank knows: whether a step is a point to admit
// newcomers and how many each rank may propose, each rank's proposal, and the
// newcomers the ranks agree on. The Worker exchanges the proposals
// (JobCollectives::AllGatherWords) and plans the growth (Membership).
//
// Contract:
//   - GrowthSlots is 0 unless growth is on (max_workers > world_size),
//     checkpoints are periodic (every_steps > 0) and `step` is a multiple of
//     every_steps (the boundary whose checkpoint the grown job starts from);
//     then min(max_workers - world_size, kMaxNewcomersPerBoundary).
//   - Each rank proposes the first `slots` newcomers it sees (registry
//     ranks, ascending), padded with kNoNewcomer: every rank's view of the
//     registry differs in timing, so only what all of them see is admitted.
//   - AgreedNewcomers keeps, in rank 0's order, each of rank 0's proposals
//     that every other rank proposed too; padding is never a newcomer.
//
// Threads: none (pure).
//
// Example:
//   const int slots = GrowthSlots(4, 2, /*every_steps=*/5, /*step=*/10);  // 2
//   std::vector<uint64_t> mine = GrowthProposal(membership.growth().Newcomers(members), slots);
//   // all = every rank's `mine`, rank-major (an all-gather)
//   std::vector<int> admit = AgreedNewcomers(all, world_size, slots);
#ifndef TESSEL_WORKER_INTERNAL_GROWTH_POLICY_H_
#define TESSEL_WORKER_INTERNAL_GROWTH_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tessel::internal {

inline constexpr int kMaxNewcomersPerBoundary = 8;
inline constexpr uint64_t kNoNewcomer = ~uint64_t{0};

int GrowthSlots(int max_workers, int world_size, int64_t every_steps, int64_t step);
std::vector<uint64_t> GrowthProposal(absl::Span<const int> seen, int slots);
// `all`: world_size proposals of `slots` words each, rank-major.
std::vector<int> AgreedNewcomers(absl::Span<const uint64_t> all, int world_size, int slots);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_GROWTH_POLICY_H_
