// Test-only: JobCollectives' Reducer without shard servers. Ranks are
// threads of one test that meet at a MemoryMean: each deposits its vector,
// the last to arrive computes the mean in rank order (as the servers
// reduce), and every rank takes it.
//
// Contract: every rank calls Mean with the same size in the same order (the
// collectives' own contract); DeleteJob counts into `deleted` if given.
//
// Threads: one per rank; MemoryMean is shared under its own mutex.
//
// Example:
//   MemoryMean mean(/*world=*/2);
//   // on rank r's thread:
//   JobCollectives collectives(&ctx, [&mean, r](size_t) {
//     return absl::StatusOr<std::unique_ptr<Reducer>>(
//         std::make_unique<MemoryReducer>(&mean, r));
//   });
#ifndef TESSEL_WORKER_INTERNAL_MEMORY_REDUCER_H_
#define TESSEL_WORKER_INTERNAL_MEMORY_REDUCER_H_

#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "worker/internal/job_collectives.h"

namespace tessel::internal {

class MemoryMean {
 public:
  explicit MemoryMean(int world) : world_(world) {}
  // Rank `rank`'s vector in; the mean over every rank out.
  void Mean(int rank, absl::Span<float> data);

 private:
  const int world_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<float>> inputs_ ABSL_GUARDED_BY(mu_);
  std::vector<float> mean_ ABSL_GUARDED_BY(mu_);
};

class MemoryReducer : public Reducer {
 public:
  MemoryReducer(MemoryMean* mean, int rank, int* deleted = nullptr)
      : mean_(mean), rank_(rank), deleted_(deleted) {}
  absl::Status Mean(absl::Span<float> data) override {
    mean_->Mean(rank_, data);
    return absl::OkStatus();
  }
  void DeleteJob() override {
    if (deleted_ != nullptr) ++*deleted_;
  }

 private:
  MemoryMean* const mean_;
  const int rank_;
  int* const deleted_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_MEMORY_REDUCER_H_
