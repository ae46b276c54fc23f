// UpdatePool: splits one large bucket's update over several threads.
//
// A shard server runs `--update_threads` compute threads (server/data_plane.h)
// that each take a whole complete bucket. When one large bucket is all there
// is to update (the last bucket of a step, a one-bucket shard), the other
// cores would sit idle; UpdatePool lets the thread updating it hand chunks of
// the bucket's range to helper threads. Every update kernel is element-wise
// (core/optimizer.h, core/reduce.h: the rank-order sum and the optimizer of
// element i read and write element i only), so a chunked update gives the
// very bits of one call over the whole range, whatever the split and
// whichever thread ran a chunk.
//
// Contract:
//   - ParallelFor(n, min_chunk, fn) calls fn(begin, end) for disjoint
//     chunks covering [0, n), each of at least min_chunk elements (one chunk
//     when n < 2 * min_chunk), each begin a multiple of 16 elements (64
//     bytes of floats: no two chunks write one cache line), and returns once
//     every call returned. The calling thread runs chunks too: a pool whose
//     helpers are all busy runs everything on the caller (never waits for a
//     helper to be free, so it cannot deadlock).
//   - Helpers do not add to the compute threads' load: a helper joins a
//     call only while fewer than threads() threads run chunks (callers
//     included), and leaves it, after the chunk it runs, once more run.
//     Callers always run their own chunks, so several compute threads each
//     updating a bucket at once run on their own.
//   - fn must not call ParallelFor of the same pool.
//   - threads() == 1: no helper thread; ParallelFor calls fn(0, n) inline.
//
// Threads: ParallelFor may be called from any number of threads at once.
// The destructor joins the helpers; no ParallelFor may run then.
//
// The compute threads find their pool through Current() (set by Scope for
// the thread's life), so code that runs inside a compute thread
// (UpdateRule::Apply) splits without the pool passing through every layer
// between them; elsewhere (tests, tools, the transport thread) Current() is
// null and updates run on the calling thread.
//
// Example:
//   UpdatePool pool(4);
//   UpdatePool::Scope scope(&pool);  // on this thread, Current() == &pool
//   pool.ParallelFor(n, UpdatePool::kMinChunk, [&](size_t b, size_t e) {
//     ReduceAndApply(p, step, params + b, srcs_at(b), w, state_at(b), e - b, w);
//   });
#ifndef TESSEL_SERVER_UPDATE_POOL_H_
#define TESSEL_SERVER_UPDATE_POOL_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace tessel {

class UpdatePool {
 public:
  // The smallest chunk a bucket's update is split into: 256K elements (1 MiB
  // of fp32 parameters, 0.1-0.5 ms of update on one core), far above a
  // helper's wake-up (tens of microseconds). Buckets under twice this run on
  // one thread.
  static constexpr size_t kMinChunk = size_t{1} << 18;
  // Chunks per running thread, at most: more chunks than threads balance a
  // helper that starts late or a core taken by another process.
  static constexpr size_t kChunksPerThread = 4;

  // threads >= 1 (less is taken as 1): threads - 1 helpers start now.
  explicit UpdatePool(int threads);
  ~UpdatePool();
  UpdatePool(const UpdatePool&) = delete;
  UpdatePool& operator=(const UpdatePool&) = delete;

  int threads() const { return threads_; }

  void ParallelFor(size_t n, size_t min_chunk, absl::FunctionRef<void(size_t, size_t)> fn);

  // The pool of the calling thread (null: none, run on this thread).
  static UpdatePool* Current();
  // Makes `pool` (may be null) the calling thread's pool until destroyed.
  class Scope {
   public:
    explicit Scope(UpdatePool* pool);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    UpdatePool* const previous_;
  };

  // Since the pool started (for tests and stats): ParallelFor calls split
  // into chunks, and chunks helpers ran.
  size_t split_calls();
  size_t helped_chunks();

 private:
  struct Call;
  void HelperLoop();
  // Claims and runs chunks of `call` until none is left.
  // A helper (`helper`) stops early once more than threads() run.
  size_t RunChunks(Call* call, bool helper);

  const int threads_;
  absl::Mutex mu_;
  std::deque<Call*> open_ ABSL_GUARDED_BY(mu_);  // calls with chunks to claim
  // Threads running chunks; changed under mu_, read by helpers without it.
  std::atomic<int> running_{0};
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  size_t split_calls_ ABSL_GUARDED_BY(mu_) = 0;
  size_t helped_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> helpers_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_UPDATE_POOL_H_
