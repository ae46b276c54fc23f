// JobCollectives: collectives over the ranks of one job, between steps: the
// mean of a float vector (reduced in rank order by the shard servers, so
// bitwise what a step computes), an all-gather of each rank's bytes, a
// broadcast of one rank's bytes, and a barrier that agrees on failure. The
// state queries and recovery are built on them.
//
// The reduction itself is a Reducer: a reduce-only DDP job of one vector
// size on the shard servers ("<job>~sync<n>.e<epoch>"), made on first use by
// the factory the Worker installs (so this layer does not depend on the
// Worker). Bytes travel as 16-bit words in floats, each from one rank with
// every other rank contributing zero: a mean over W ranks of such words is
// exact (W * mean rounds back to the word) for W up to 2^20.
//
// Contract: every rank calls the same collectives in the same order with the
// same sizes. Release(n) frees one reducer after a barrier; DropAll() frees
// every reducer (a recovery renames them by epoch).
//
// Threads: the driving thread only.
//
// Example: the same calls on every rank:
//   JobCollectives collectives(&ctx, [&](size_t n) { return ServerReducer::Make(site, n); });
//   std::vector<float> loss = {local_loss};
//   TESSEL_RETURN_IF_ERROR(collectives.AllReduceMean(absl::MakeSpan(loss)));
//   TESSEL_ASSIGN_OR_RETURN(std::vector<uint64_t> all, collectives.AllGatherWords(mine));
//   TESSEL_RETURN_IF_ERROR(collectives.AgreeOk(wrote.ok(), "writing the servers"));
#ifndef TESSEL_WORKER_INTERNAL_JOB_COLLECTIVES_H_
#define TESSEL_WORKER_INTERNAL_JOB_COLLECTIVES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

// The mean over ranks of a float vector of one size.
class Reducer {
 public:
  virtual ~Reducer() = default;
  // In place; every rank passes the same size.
  virtual absl::Status Mean(absl::Span<float> data) = 0;
  // Deletes the reducer's job on the servers (best effort).
  virtual void DeleteJob() = 0;
};
using ReducerFactory = std::function<absl::StatusOr<std::unique_ptr<Reducer>>(size_t size)>;

class JobCollectives {
 public:
  JobCollectives(JobContext* ctx, ReducerFactory factory)
      : ctx_(ctx), factory_(std::move(factory)) {}

  // The mean over ranks of `data`, in place.
  absl::Status AllReduceMean(absl::Span<float> data);
  // Every rank's `mine` (the same length everywhere), rank-major.
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine);
  // Every rank's 64-bit values (the same count everywhere), rank-major.
  absl::StatusOr<std::vector<uint64_t>> AllGatherWords(absl::Span<const uint64_t> mine);
  // `bytes` of rank `root` onto every rank (every rank passes the size).
  absl::Status Broadcast(int root, std::string* bytes);
  // A barrier that also agrees on failure: every rank passes whether it is
  // ok; all get an error naming `what` if any rank was not.
  absl::Status AgreeOk(bool ok, const std::string& what);

  // Frees the reducer of vectors of `size` after a barrier: its job on the
  // servers holds world_size receive buffers of that size.
  absl::Status Release(size_t size);
  // Frees the reducer that carried `bytes` bytes (Broadcast, AllGather).
  absl::Status ReleaseBytes(size_t bytes, int ranks = 1);
  void DropAll();

 private:
  static size_t WordsFor(size_t bytes) { return (bytes + 1) / 2; }

  JobContext* const ctx_;
  const ReducerFactory factory_;
  std::map<size_t, std::unique_ptr<Reducer>> reducers_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_JOB_COLLECTIVES_H_
