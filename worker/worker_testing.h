// Helpers shared by the worker SDK's multi-rank tests (worker_test,
// host_aggregation_test, half_parts_test, payload_integrity_worker_test...):
// their layout, initial parameters, gradients and optimizer, bitwise
// comparisons, ranks as threads, waiting for a checkpoint, and training
// through a shard server's restart.
#ifndef TESSEL_WORKER_WORKER_TESTING_H_
#define TESSEL_WORKER_WORKER_TESTING_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/optimizer_params.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "worker/train_state.h"
#include "worker/worker.h"

namespace tessel {

// `n` initial parameters, p[i] = sin(0.37 i).
inline std::vector<float> SineInit(size_t n) {
  std::vector<float> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = std::sin(0.37f * static_cast<float>(i));
  return p;
}

// A two-layer perceptron's tensors: w1 [in, hidden], b1 [hidden],
// w2 [hidden, out].
inline std::vector<TensorDesc> MlpTensors(int64_t in, int64_t hidden, int64_t out) {
  return {{"w1", {in, hidden}}, {"b1", {hidden}}, {"w2", {hidden, out}}};
}

// How many elements `tensors` hold together.
inline size_t NumElements(const std::vector<TensorDesc>& tensors) {
  size_t n = 0;
  for (const TensorDesc& t : tensors) {
    size_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<size_t>(d);
    n += elements;
  }
  return n;
}

// Rank `rank`'s gradient of element i of micro-batch `micro` at `step`,
// from its parameter: spread in magnitude (by rank and micro-batch) so that
// the order of a sum, and half-precision rounding, show in the last bits.
inline float TestMicroBatchGrad(int rank, int64_t step, int micro, size_t i, float param) {
  return 0.01f *
             std::cos(0.11f * static_cast<float>(i) + static_cast<float>(rank + 3 * micro) +
                      0.5f * static_cast<float>(step)) *
             static_cast<float>(1 + 7 * rank + 13 * micro) +
         0.001f * param;
}

// Rank `rank`'s gradient of element i at `step` (one micro-batch).
inline float TestGrad(int rank, int64_t step, size_t i, float param) {
  return TestMicroBatchGrad(rank, step, 0, i, param);
}

// One fp32 step of rank `rank`: every gradient TestGrad of its parameter,
// the first third handed over early (as backward does), then Step().
inline absl::Status StepWithTestGrads(Worker& worker, int rank, int64_t step) {
  absl::Span<float> p = worker.params();
  absl::Span<float> g = worker.grads();
  for (size_t i = 0; i < g.size(); ++i) g[i] = TestGrad(rank, step, i, p[i]);
  TESSEL_RETURN_IF_ERROR(worker.GradientsReady(0, static_cast<int64_t>(g.size()) / 3));
  return worker.Step();
}

// Adam with lr 1e-2, the rest its defaults.
inline OptimizerParams TestAdam() {
  OptimizerParams o;
  o.kind = OptimizerParams::Kind::kAdam;
  o.lr = 1e-2f;
  return o;
}

// `got` is `want` exactly, element by element; the first difference fails.
inline void ExpectParamsEqual(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "parameter " << i;
}

// Every rank's parameters (`params`, by rank) are `want` exactly.
inline void ExpectEveryRankEqual(const std::vector<std::vector<float>>& params,
                                 const std::vector<float>& want) {
  for (size_t r = 0; r < params.size(); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectParamsEqual(params[r], want);
  }
}

// The worker's fp32 masters followed by each optimizer state slot (its
// Serialize blob decoded): a training state to compare bitwise (the half
// parameters a worker gathers would hide a gradient's last bits).
inline absl::StatusOr<std::vector<float>> TrainingStateValues(Worker& worker) {
  TESSEL_ASSIGN_OR_RETURN(std::string blob, worker.Serialize());
  TESSEL_ASSIGN_OR_RETURN(TrainState state, DecodeTrainState(blob));
  std::vector<float> out = std::move(state.params);
  for (const std::vector<float>& slot : state.state)
    out.insert(out.end(), slot.begin(), slot.end());
  return out;
}

// Runs `body(rank)` on `world` threads and waits for all.
inline void OnRanks(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// Waits (up to 5 s) until the job's newest complete checkpoint is `step`:
// checkpoints are written in the background, and a test that restarts a
// server needs this one to roll back to.
inline absl::Status AwaitCompleteCheckpoint(Worker& worker, int64_t step) {
  for (int i = 0; i < 500; ++i) {
    TESSEL_ASSIGN_OR_RETURN(auto steps, worker.CompleteCheckpointSteps());
    if (!steps.empty() && steps.back() == step) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("no complete checkpoint of step ", step));
}

// What each rank ended with in TrainThroughAServerRestart.
struct RestartRun {
  std::vector<std::vector<float>> params;  // GatherAll after the last step
  std::vector<int> recoveries;             // Worker::recoveries()
};

// The restart scenario: `world` ranks (threads, `options(rank)` with
// recovery on and a checkpoint every 2 steps, the initial one too) register
// `tensors` with `init` and train 6 steps, rank r's gradient i at step s
// being grad(r, s, i, its parameter i). Before step 3, once every rank sees
// the checkpoint of step 2 complete, `restart()` runs (a shard server
// restarts); the next step fails recoverably, Recover() must bring every
// rank back to step 2, `after_recover(worker)` (if given) checks the rest,
// and training goes on to step 6. A failure is the calling test's.
inline RestartRun TrainThroughAServerRestart(
    int world, const std::function<WorkerOptions(int rank)>& options,
    const std::vector<TensorDesc>& tensors, const std::vector<float>& init,
    const std::function<float(int rank, int64_t step, size_t i, float param)>& grad,
    const std::function<absl::Status()>& restart,
    const std::function<void(Worker&)>& after_recover = nullptr) {
  constexpr int64_t kTotal = 6;
  constexpr int64_t kBeforeRestart = 3;
  constexpr int64_t kCheckpoint = 2;
  RestartRun run;
  run.params.resize(static_cast<size_t>(world));
  run.recoveries.assign(static_cast<size_t>(world), 0);
  std::atomic<int> arrived{0};
  absl::Notification restarted;
  std::thread restarter([&] {
    while (arrived.load() < world) absl::SleepFor(absl::Milliseconds(5));
    absl::Status s = restart();
    EXPECT_TRUE(s.ok()) << s;
    restarted.Notify();
  });
  OnRanks(world, [&](int r) {
    WorkerOptions o = options(r);
    o.recovery = true;
    o.recovery_timeout = absl::Seconds(30);
    o.checkpoint.every_steps = kCheckpoint;
    o.checkpoint.initial = true;
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    ASSERT_TRUE(worker.RegisterLayout(tensors, init).ok());
    for (int64_t s = worker.step(); s < kTotal; ++s) {
      if (s == kBeforeRestart && !restarted.HasBeenNotified()) {
        // The checkpoint is written in the background: restart once it is
        // complete, so the recovery has it to go back to.
        absl::Status ckpt = AwaitCompleteCheckpoint(worker, kCheckpoint);
        ASSERT_TRUE(ckpt.ok()) << ckpt;
        arrived.fetch_add(1);
        restarted.WaitForNotification();
      }
      absl::Span<float> p = worker.params();
      absl::Span<float> g = worker.grads();
      for (size_t i = 0; i < g.size(); ++i) g[i] = grad(r, s, i, p[i]);
      absl::Status st = worker.Step();
      if (Worker::IsRecoverable(st)) {
        st = worker.Recover();
        ASSERT_TRUE(st.ok()) << st;
        EXPECT_EQ(worker.step(), kCheckpoint);  // back to the checkpoint
        if (after_recover) after_recover(worker);
        s = worker.step() - 1;  // the loop adds one
        continue;
      }
      ASSERT_TRUE(st.ok()) << st;
    }
    run.recoveries[static_cast<size_t>(r)] = worker.recoveries();
    auto all = worker.GatherAll();
    ASSERT_TRUE(all.ok()) << all.status();
    run.params[static_cast<size_t>(r)] = std::move(*all);
  });
  restarter.join();
  return run;
}

}  // namespace tessel

#endif  // TESSEL_WORKER_WORKER_TESTING_H_
