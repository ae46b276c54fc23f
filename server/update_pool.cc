#include "server/update_pool.h"

#include <algorithm>

namespace tessel {
namespace {

// Chunk starts are multiples of this many elements (64 bytes of floats).
constexpr size_t kChunkAlign = 16;

thread_local UpdatePool* current_pool = nullptr;

}  // namespace

// One ParallelFor in progress: its chunks are claimed through `next`.
struct UpdatePool::Call {
  absl::FunctionRef<void(size_t, size_t)> fn;
  size_t n;
  size_t chunk;
  size_t chunks;
  std::atomic<size_t> next{0};
  int helpers = 0;  // helpers running its chunks (under the pool's mu_)
};

UpdatePool::UpdatePool(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) helpers_.emplace_back([this] { HelperLoop(); });
}

UpdatePool::~UpdatePool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : helpers_) t.join();
}

size_t UpdatePool::RunChunks(Call* call, bool helper) {
  size_t ran = 0;
  for (;;) {
    if (helper && running_.load(std::memory_order_relaxed) > threads_) return ran;
    const size_t i = call->next.fetch_add(1, std::memory_order_relaxed);
    if (i >= call->chunks) return ran;
    const size_t begin = i * call->chunk;
    call->fn(begin, std::min(call->n, begin + call->chunk));
    ++ran;
  }
}

void UpdatePool::ParallelFor(size_t n, size_t min_chunk,
                             absl::FunctionRef<void(size_t, size_t)> fn) {
  min_chunk = std::max<size_t>(min_chunk, 1);
  if (threads_ == 1 || n < 2 * min_chunk) {
    if (n > 0) fn(0, n);
    return;
  }
  const size_t most = static_cast<size_t>(threads_) * kChunksPerThread;
  const size_t wanted = std::min(n / min_chunk, most);
  size_t chunk = (n + wanted - 1) / wanted;
  chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  Call call{fn, n, chunk, (n + chunk - 1) / chunk};
  {
    absl::MutexLock lock(&mu_);
    open_.push_back(&call);
    ++running_;
    ++split_calls_;
  }
  RunChunks(&call, /*helper=*/false);
  absl::MutexLock lock(&mu_);
  // No helper joins after this; wait for those that did.
  const auto it = std::find(open_.begin(), open_.end(), &call);
  if (it != open_.end()) open_.erase(it);
  --running_;
  mu_.Await(absl::Condition(
      +[](Call* c) { return c->helpers == 0; }, &call));
}

void UpdatePool::HelperLoop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(
        +[](UpdatePool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return p->stop_ || (!p->open_.empty() && p->running_.load() < p->threads_);
        },
        this));
    if (stop_) return;
    Call* call = open_.front();
    ++call->helpers;
    ++running_;
    mu_.Unlock();
    const size_t ran = RunChunks(call, /*helper=*/true);
    mu_.Lock();
    --running_;
    helped_chunks_ += ran;
    // Every chunk is claimed: no other helper needs to look at it (a helper
    // that left early leaves it open). Its caller waits for helpers == 0
    // under mu_, so `call` lives until then.
    if (call->next.load(std::memory_order_relaxed) >= call->chunks) {
      const auto it = std::find(open_.begin(), open_.end(), call);
      if (it != open_.end()) open_.erase(it);
    }
    --call->helpers;
  }
}

size_t UpdatePool::split_calls() {
  absl::MutexLock lock(&mu_);
  return split_calls_;
}

size_t UpdatePool::helped_chunks() {
  absl::MutexLock lock(&mu_);
  return helped_chunks_;
}

UpdatePool* UpdatePool::Current() { return current_pool; }

UpdatePool::Scope::Scope(UpdatePool* pool) : previous_(current_pool) { current_pool = pool; }

UpdatePool::Scope::~Scope() { current_pool = previous_; }

}  // namespace tessel
