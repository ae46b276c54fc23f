// One in-order work queue served by its own thread: a stream of the host
// device (gpu/host_device.h). Tasks run one at a time in enqueue order;
// Enqueue never waits for them. The destructor runs everything already
// enqueued, then joins the thread.
//
// Thread safety: Enqueue may be called from any thread; tasks run on the
// queue's thread only.
//
// Example:
//   StreamThread s;
//   s.Enqueue([&] { Step1(); });
//   s.Enqueue([&] { Step2(); });   // after Step1
//   // ~StreamThread: both have run
#ifndef TESSEL_GPU_INTERNAL_STREAM_THREAD_H_
#define TESSEL_GPU_INTERNAL_STREAM_THREAD_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tessel::gpu::internal {

class StreamThread {
 public:
  StreamThread();
  ~StreamThread();
  StreamThread(const StreamThread&) = delete;
  StreamThread& operator=(const StreamThread&) = delete;

  void Enqueue(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;                       // last: starts once the members above exist
};

}  // namespace tessel::gpu::internal

#endif  // TESSEL_GPU_INTERNAL_STREAM_THREAD_H_
