// tessel-train: one worker process. Trains the demo MLP (default) or replays
// fixed gradients from .npy files (--grads), through the Worker SDK against
// real shard servers. Normally started by tessel-demo or tessel-replay.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/npy.h"
#include "core/precision.h"
#include "core/status_macros.h"
#include "gpu/device.h"
#include "model/device_layers.h"
#include "model/device_mlp.h"
#include "runtime/flag_config.h"
#include "runtime/log.h"
#include "tools/internal/mlp_job.h"
#include "tools/internal/mlp_units.h"
#include "tools/internal/preemption.h"
#include "worker/device_staging.h"
#include "worker/train_flags.h"
#include "worker/unit_step.h"
#include "worker/worker.h"
#include "worker/worker_flags.h"

ABSL_FLAG(std::string, job, "demo", "job name");
ABSL_FLAG(int, rank, -1,
          "this worker's rank (0 .. --world-1); unset: $JOB_COMPLETION_INDEX (a Kubernetes "
          "Indexed Job's completion index), else $TESSEL_RANK");
ABSL_FLAG(int, world, 1, "number of workers");
ABSL_FLAG(int, servers, 0, "shard servers to use (0 = every server in the pool)");
ABSL_FLAG(std::string, init, "", "replay mode: initial parameters (1-D float32 .npy)");
ABSL_FLAG(std::string, grads, "", "replay mode: directory of step{K}_rank{R}.npy gradients");
ABSL_FLAG(std::string, out, "", "rank 0 writes the final parameters here (.npy)");
ABSL_FLAG(int, log_every, 50, "print progress every N steps (rank 0)");
ABSL_FLAG(int, step_sleep_ms, 0,
          "sleep this long before each step, a stand-in for a model's compute (tests of the "
          "straggler detector: docs/observability.md)");
ABSL_FLAG(bool, hang_on_sigusr1, false,
          "tests only: on SIGUSR1, stop stepping for good before the next step, as a deadlock in "
          "the caller's code would (heartbeats go on; tesselctl why names the rank, "
          "tests/top_why_test.py)");
ABSL_FLAG(int, preempt_grace_s, 20,
          "after SIGTERM, exit (status 143) within this many seconds even if the checkpoint "
          "step cannot complete (keep it below the pod's terminationGracePeriodSeconds)");
ABSL_FLAG(std::string, loss_log, "",
          "every rank appends 'STEP LOSS' to PATH.rankR for every completed step (a replayed "
          "step again)");

namespace {

// --hang_on_sigusr1: set by the signal, read by the training loop.
std::atomic<bool> hang_requested{false};
void OnHangSignal(int) { hang_requested.store(true); }

int Fail(const absl::Status& s) {
  std::cerr << "tessel-train: " << s.message() << "\n";
  return 1;
}

// The worker options (worker/worker_flags.h) plus what this tool decides:
// identity, and one unit per MLP layer for the per-unit strategies.
absl::StatusOr<tessel::WorkerOptions> OptionsFromFlags() {
  TESSEL_ASSIGN_OR_RETURN(tessel::WorkerOptions o, tessel::WorkerOptionsFromFlags());
  o.job = absl::GetFlag(FLAGS_job);
  o.rank = absl::GetFlag(FLAGS_rank);
  if (o.rank < 0) {
    for (const char* name : {"JOB_COMPLETION_INDEX", "TESSEL_RANK"}) {
      const char* value = std::getenv(name);
      if (value == nullptr || *value == '\0') continue;
      if (!absl::SimpleAtoi(value, &o.rank) || o.rank < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("$", name, "='", value, "' is not a rank (an integer >= 0)"));
      }
      break;
    }
    if (o.rank < 0) {
      return absl::InvalidArgumentError(
          "--rank is required (or $JOB_COMPLETION_INDEX / $TESSEL_RANK in the environment)");
    }
  }
  o.world_size = absl::GetFlag(FLAGS_world);
  o.num_servers = absl::GetFlag(FLAGS_servers);
  o.shuffle_seed = tessel::ShuffleSeedFor(o.rank);
  // fsdp gathers per unit; zero2 keeps gradients per unit and frees each
  // unit's as soon as it is pushed. One unit per MLP layer (replay: four).
  // On a device, zero2 keeps full buffers: DeviceStaging overlaps their
  // copies with backward (worker/device_staging.h).
  auto mlp_config = tessel::MlpJobFromFlags();
  const bool on_device =
      mlp_config.ok() && mlp_config->device != "cpu" && absl::GetFlag(FLAGS_grads).empty();
  if (o.strategy == tessel::Strategy::kFsdp ||
      (o.strategy == tessel::Strategy::kZero2 && absl::GetFlag(FLAGS_micro_batches) == 1 &&
       !on_device)) {
    if (!absl::GetFlag(FLAGS_grads).empty()) {
      o.fsdp_units = {0, 1, 2, 3};  // replay: the flat vector in four tensors
    } else if (auto config = tessel::MlpJobFromFlags(); config.ok()) {
      for (size_t l = 0; l + 1 < config->layers.size(); ++l) {
        o.fsdp_units.push_back(static_cast<int>(2 * l));  // one unit per layer
      }
    }
  }
  return o;
}

// A step failed because a worker or shard server was lost: report it, wait
// for the job to be whole and rolled back (or, a worker whose own step was
// lost to a membership change, rejoined in place), and return the step to go
// on from (the checkpoint's, or the one the shards applied; data for step k
// is a function of k, so the rerun is identical), or -1 if recovery failed.
int64_t RecoverOrFail(tessel::Worker* worker, const absl::Status& why) {
  std::cerr << "tessel-train: " << why.message() << "\n";
  const int rollbacks = worker->recoveries();
  absl::Status s = worker->Recover();
  if (!s.ok()) {
    Fail(s);
    return -1;
  }
  // A rollback counts in recoveries(); a rejoin of the step in flight does not.
  std::cerr << "tessel-train: rank " << worker->rank() << " of " << worker->world_size()
            << (worker->recoveries() > rollbacks ? " recovered" : " rejoined in place")
            << "; going on from step " << worker->step() << " (unix_ms "
            << absl::ToUnixMillis(absl::Now()) << ")\n";
  return worker->step();
}

// --loss_log: one line per completed step, appended (a replacement worker
// continues its rank's file).
class LossLog {
 public:
  explicit LossLog(int rank) {
    if (!absl::GetFlag(FLAGS_loss_log).empty()) {
      f_ = std::fopen(absl::StrCat(absl::GetFlag(FLAGS_loss_log), ".rank", rank).c_str(), "a");
    }
  }
  ~LossLog() {
    if (f_ != nullptr) std::fclose(f_);
  }
  void Add(int64_t step, float loss) {
    if (f_ == nullptr) return;
    std::fprintf(f_, "%lld %.9g\n", static_cast<long long>(step), loss);
    std::fflush(f_);
  }

 private:
  std::FILE* f_ = nullptr;
};

int Replay(tessel::Worker* worker, int steps) {
  auto init = tessel::ReadNpyF32(absl::GetFlag(FLAGS_init));
  if (!init.ok()) return Fail(init.status());
  const bool fsdp = worker->options().strategy == tessel::Strategy::kFsdp;
  const bool units = !worker->options().fsdp_units.empty();
  std::vector<tessel::TensorDesc> tensors = {{"flat", {static_cast<int64_t>(init->size())}}};
  if (units) {  // four tensors, one unit each
    tensors.clear();
    const int64_t n = static_cast<int64_t>(init->size());
    for (int64_t i = 0; i < 4; ++i) {
      tensors.push_back({absl::StrCat("flat", i), {n * (i + 1) / 4 - n * i / 4}});
    }
  }
  absl::Status s = worker->RegisterLayout(tensors, *init);
  if (!s.ok()) return Fail(s);
  tessel::Preemption preemption;
  // --straggler_policy=evict: leaves the job as on SIGTERM, at a checkpoint.
  tessel::Preemption eviction([worker] { return worker->straggler_evicted(); },
                              "evicted as a straggler", tessel::kEvictedExit);
  for (int64_t k = worker->step(); k < steps; ++k) {
    tessel::SetLogStep(k);
    // rank, not fixed: an elastic recovery renumbers the workers.
    const std::string path =
        absl::StrCat(absl::GetFlag(FLAGS_grads), "/step", k, "_rank", worker->rank(), ".npy");
    auto g = tessel::ReadNpyF32(path);
    if (!g.ok()) return Fail(g.status());
    if (g->size() != init->size()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          path, " has ", g->size(), " floats but the initial parameters have ", init->size())));
    }
    const auto half = worker->half_type();
    if (units) {
      for (int u = 0; u < worker->num_units(); ++u) {
        const tessel::Range r = worker->unit_range(u);
        if (half) {
          tessel::FloatToHalf(*half, g->data() + r.begin, worker->UnitHalfGrads(u).data(),
                              static_cast<size_t>(r.size()));
        } else {
          absl::Span<float> grads = worker->UnitGrads(u);
          std::copy(g->begin() + r.begin, g->begin() + r.end, grads.begin());
        }
        s = worker->PushUnit(u);
        if (!s.ok()) return Fail(s);
      }
      s = fsdp ? worker->FinishStep() : worker->Step();
    } else if (half) {
      tessel::FloatToHalf(*half, g->data(), worker->half_grads().data(), g->size());
      s = worker->Step();
    } else {
      std::copy(g->begin(), g->end(), worker->grads().begin());
      s = worker->Step();
    }
    if (!s.ok() && tessel::Worker::IsRecoverable(s)) {
      if (int rc = preemption.AfterFailedStep(worker); rc >= 0) return rc;
      if (int rc = eviction.AfterFailedStep(worker); rc >= 0) return rc;
      k = RecoverOrFail(worker, s) - 1;  // the loop goes on at the checkpoint's step
      if (k < -1) return 1;
      continue;
    }
    if (!s.ok()) return Fail(s);
    if (int rc = preemption.AfterStep(worker); rc >= 0) return rc;
    if (int rc = eviction.AfterStep(worker); rc >= 0) return rc;
  }
  return 0;
}

// One step of the MLP on global batch `k` of this rank: its loss, or the
// step's status. Sets *computed to the loss as soon as the forward pass ran
// (a step that fails afterwards may still have completed on the servers).
using MlpStepFn =
    std::function<absl::StatusOr<float>(int64_t k, int rank, int world, float* computed)>;

// The loop TrainMlp and TrainMlpOnDevice share: runs `step` from the
// worker's step to `steps`; on a recoverable failure recovers, then calls
// `after_recovery`; logs losses, reports them, handles preemption and prints
// rank 0's progress lines with `progress_suffix()` appended. Returns the
// process's exit status.
int RunMlpSteps(tessel::Worker* worker, int steps, const tessel::MlpJob& job, const MlpStepFn& step,
                const std::function<absl::Status()>& after_recovery,
                const std::function<std::string()>& progress_suffix) {
  // Data for step k is Batch(k, rank, world); an elastic recovery changes
  // rank and world (each worker keeps its batch), so both are re-read then.
  // Read after RegisterLayout: a newcomer (elastic growth) gets its rank there.
  int rank = worker->rank();
  int world = worker->world_size();
  const int log_every = std::max(1, absl::GetFlag(FLAGS_log_every));
  absl::Time window_start = absl::Now();
  double loss_sum = 0;
  int window = 0;
  tessel::Preemption preemption;
  // --straggler_policy=evict: leaves the job as on SIGTERM, at a checkpoint.
  tessel::Preemption eviction([worker] { return worker->straggler_evicted(); },
                              "evicted as a straggler", tessel::kEvictedExit);
  LossLog loss_log(worker->registry_rank());  // its file stays with the process
  const absl::Duration step_sleep = absl::Milliseconds(absl::GetFlag(FLAGS_step_sleep_ms));
  if (absl::GetFlag(FLAGS_hang_on_sigusr1)) std::signal(SIGUSR1, OnHangSignal);
  for (int64_t k = worker->step(); k < steps; ++k) {
    tessel::SetLogStep(k);
    if (step_sleep > absl::ZeroDuration()) absl::SleepFor(step_sleep);
    while (hang_requested.load()) absl::SleepFor(absl::Milliseconds(20));  // "in the model"
    // This step's loss once the forward pass has run (NaN before).
    float computed = std::numeric_limits<float>::quiet_NaN();
    const absl::StatusOr<float> loss = step(k, rank, world, &computed);
    if (!loss.ok() && tessel::Worker::IsRecoverable(loss.status())) {
      if (int rc = preemption.AfterFailedStep(worker); rc >= 0) return rc;
      if (int rc = eviction.AfterFailedStep(worker); rc >= 0) return rc;
      const int64_t next = RecoverOrFail(worker, loss.status());
      if (next < 0) return 1;
      if (absl::Status r = after_recovery(); !r.ok()) return Fail(r);
      // The servers may have finished this step before the fault struck (the
      // checkpoint restored holds its update): its loss, computed above, is
      // then that of a completed step.
      if (next == k + 1 && !std::isnan(computed)) loss_log.Add(k, computed);
      k = next - 1;  // the loop goes on at the checkpoint's step
      rank = worker->rank();
      world = worker->world_size();
      loss_sum = 0;
      window = 0;
      window_start = absl::Now();
      continue;
    }
    if (!loss.ok()) return Fail(loss.status());
    loss_log.Add(k, *loss);
    worker->ReportLoss(*loss);
    if (int rc = preemption.AfterStep(worker); rc >= 0) return rc;
    if (int rc = eviction.AfterStep(worker); rc >= 0) return rc;
    loss_sum += *loss;
    ++window;
    if (rank == 0 && ((k + 1) % log_every == 0 || k + 1 == steps)) {
      const double secs = absl::ToDoubleSeconds(absl::Now() - window_start);
      std::printf("step %5lld/%d  loss %.4f  %7.1f steps/s  %8.0f samples/s  %.2f ms/step%s\n",
                  static_cast<long long>(k + 1), steps, loss_sum / window, window / secs,
                  window * world * job.config().batch / secs, 1e3 * secs / window,
                  progress_suffix().c_str());
      std::fflush(stdout);
      window_start = absl::Now();
      loss_sum = 0;
      window = 0;
    }
  }
  return 0;
}

// After training: rank 0 prints the test accuracy (and, with recovery on,
// what recovery did).
int ReportFinal(tessel::Worker* worker, const tessel::MlpJob& job) {
  if (worker->rank() != 0) return 0;
  auto params = worker->GatherAll();
  if (!params.ok()) return Fail(params.status());
  std::printf("worker 0: test accuracy %.2f%%\n", 100.0 * job.TestAccuracy(params->data()));
  // Gradient bytes the servers received (top-k: the pairs), and the path.
  auto reports = worker->ServerStats();
  if (reports.ok() && worker->step() > 0) {
    int64_t pushed = 0;
    for (const tessel::ShardReport& r : *reports) pushed += r.pushed_bytes;
    std::printf(
        "worker 0: servers received %.1f KiB of gradients per step (all ranks%s); "
        "payloads %s; %s\n",
        pushed / 1024.0 / static_cast<double>(worker->step()),
        worker->options().topk_ratio > 0
            ? absl::StrFormat(", top-k ratio %g", worker->options().topk_ratio).c_str()
            : "",
        worker->data_path().c_str(), worker->aggregation().c_str());
  }
  if (worker->options().recovery) {
    std::printf(
        "worker 0: recoveries %d, stale frames dropped %lld, wedged UCX endpoints renewed "
        "%lld\n",
        worker->recoveries(), static_cast<long long>(worker->stale_frames_dropped()),
        static_cast<long long>(worker->endpoint_renewals()));
  }
  std::fflush(stdout);
  return 0;
}

// --device: the step on the device. Full-buffer strategies (ddp, zero1,
// zero2) through DeviceStaging: each layer's gradients leave the device as
// backward produces them and the parameters come back layer by layer ahead
// of the next forward. fsdp through the per-unit recipe with DeviceMlpUnits.
// The loss is what the device computed; everything else as TrainMlp.
int TrainMlpOnDevice(tessel::Worker* worker, int steps, tessel::gpu::Device* device,
                     std::unique_ptr<tessel::model::DeviceLayers> device_layers) {
  auto config = tessel::MlpJobFromFlags();
  if (!config.ok()) return Fail(config.status());
  if (absl::GetFlag(FLAGS_micro_batches) > 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--device=", config->device,
                     " computes one batch per step; --micro_batches > 1 runs on "
                     "the CPU (--device=cpu)")));
  }
  tessel::MlpJob job(*config);
  const tessel::model::Mlp& model = job.model();
  std::vector<float> init(model.num_params());
  job.Init(init.data());
  absl::Status s = worker->RegisterLayout(job.Tensors(), init);
  if (!s.ok()) return Fail(s);
  auto mlp = tessel::model::DeviceMlp::Create(model, std::move(device_layers), config->batch);
  if (!mlp.ok()) return Fail(mlp.status());
  std::vector<tessel::Range> layers;
  size_t widest = 0;
  for (int l = 0; l < model.num_layers(); ++l) {
    auto [offset, count] = model.LayerRange(l);
    layers.push_back({static_cast<int64_t>(offset), static_cast<int64_t>(offset + count)});
    widest = std::max(widest, count);
  }
  const bool units = !worker->options().fsdp_units.empty();
  std::unique_ptr<tessel::DeviceStaging> staging;
  tessel::gpu::DeviceBuffer<float> unit_params, unit_grads;
  if (units) {
    auto p = tessel::gpu::DeviceBuffer<float>::Create(device, widest);
    auto g = tessel::gpu::DeviceBuffer<float>::Create(device, widest);
    if (!p.ok()) return Fail(p.status());
    if (!g.ok()) return Fail(g.status());
    unit_params = std::move(*p);
    unit_grads = std::move(*g);
  } else {
    auto st = tessel::DeviceStaging::Create(worker, device, layers);
    if (!st.ok()) return Fail(st.status());
    staging = std::move(*st);
  }
  auto step = [&](int64_t k, int rank, int world, float* computed) -> absl::StatusOr<float> {
    const tessel::model::Dataset batch = job.Batch(k, rank, world);
    absl::Status status;
    if (units) {
      tessel::DeviceMlpUnits unit_model(mlp->get(), device, unit_params.data(), unit_grads.data());
      status = unit_model.SetBatch(batch);
      if (status.ok()) status = tessel::UnitStep(*worker, unit_model, computed);
      if (status.ok()) status = unit_model.status();
    } else {
      TESSEL_RETURN_IF_ERROR((*mlp)->SetBatch(batch.x.data(), batch.y.data()));
      for (int l = 0; l < model.num_layers(); ++l) {
        staging->WaitParams(tessel::gpu::Stream::kCompute, l);
        (*mlp)->Forward(l, staging->params() + layers[l].begin);
      }
      for (int l = model.num_layers(); l-- > 0;) {
        (*mlp)->Backward(l, staging->params() + layers[l].begin,
                         staging->grads() + layers[l].begin);
        staging->GradientsEnqueued(layers[l]);
      }
      status = staging->Step();
      TESSEL_ASSIGN_OR_RETURN(auto loss, (*mlp)->Loss());  // a device error: not recoverable
      *computed = loss;
    }
    TESSEL_RETURN_IF_ERROR(status);
    return *computed;
  };
  const std::string suffix = absl::StrCat("  (", device->kind(), ")");
  int rc = RunMlpSteps(
      worker, steps, job, step, [&] { return staging ? staging->Reload() : absl::OkStatus(); },
      [&] { return suffix; });
  staging.reset();  // unpins the worker's buffers
  return rc != 0 ? rc : ReportFinal(worker, job);
}

int TrainMlp(tessel::Worker* worker, int steps) {
  auto config = tessel::MlpJobFromFlags();
  if (!config.ok()) return Fail(config.status());
  tessel::MlpJob job(*config);
  std::vector<float> init(job.model().num_params());
  job.Init(init.data());
  absl::Status s = worker->RegisterLayout(job.Tensors(), init);
  if (!s.ok()) return Fail(s);
  const auto& tensors = job.model().tensors();
  std::vector<float> work_params, work_grads;  // mixed precision: fp32 compute buffers
  if (worker->half_type()) {
    work_params.resize(job.model().num_params());
    work_grads.resize(job.model().num_params());
  }
  const bool units = !worker->options().fsdp_units.empty();
  const int micro_batches = absl::GetFlag(FLAGS_micro_batches);
  if (micro_batches < 1 || config->batch % micro_batches != 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--micro_batches=", micro_batches, " must be >= 1 and divide --batch=", config->batch)));
  }
  std::vector<float> micro(micro_batches > 1 ? job.model().num_params() : 0);
  auto step = [&](int64_t k, int rank, int world, float* computed) -> absl::StatusOr<float> {
    if (units) {
      tessel::MlpUnits model(job, k, rank, world);
      TESSEL_RETURN_IF_ERROR(tessel::UnitStep(*worker, model, computed));
      return *computed;
    }
    if (micro_batches > 1) {  // gradient accumulation through the SDK
      float sum = 0;
      absl::Status acc;
      for (int m = 0; m < micro_batches && acc.ok(); ++m) {
        sum += job.MicroGradients(worker->params().data(), k, rank, world, m, micro_batches,
                                  micro.data());
        acc = worker->AccumulateGradients(micro);
      }
      TESSEL_RETURN_IF_ERROR(acc);
      *computed = sum / micro_batches;
      TESSEL_RETURN_IF_ERROR(worker->Step());
      return *computed;
    }
    absl::Status ready = absl::OkStatus();
    // Mixed precision: compute in fp32 from the half parameters, hand over
    // each tensor's gradient rounded to half as soon as it is final.
    const auto half = worker->half_type();
    if (half) {
      tessel::HalfToFloat(*half, worker->half_params().data(), work_params.data(),
                          work_params.size());
    }
    float* params = half ? work_params.data() : worker->params().data();
    float* grads = half ? work_grads.data() : worker->grads().data();
    *computed = job.Gradients(params, k, rank, world, grads, [&](size_t i) {
      if (!ready.ok()) return;
      const auto& t = tensors[i];
      if (half) {
        tessel::FloatToHalf(*half, work_grads.data() + t.offset,
                            worker->half_grads().data() + t.offset, t.numel);
      }
      ready = worker->GradientsReady(static_cast<int64_t>(t.offset),
                                     static_cast<int64_t>(t.offset + t.numel));
    });
    TESSEL_RETURN_IF_ERROR(ready);
    TESSEL_RETURN_IF_ERROR(worker->Step());
    return *computed;
  };
  const int rc = RunMlpSteps(
      worker, steps, job, step, [] { return absl::OkStatus(); },
      [&]() -> std::string {
        if (!units) return "";
        return absl::StrFormat("  peak per-unit buffers %.2f MiB",
                               worker->memory().peak_bytes / 1048576.0);
      });
  return rc != 0 ? rc : ReportFinal(worker, job);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel worker process (started by tessel-demo / tessel-replay).\n\n"
      "Usage: tessel-train --registry=HOST:PORT --rank=R --world=W [--job=demo]\n"
      "       tessel-train --config=tessel.json   (rank from $JOB_COMPLETION_INDEX)\n"
      "       [--strategy=zero2] [--optimizer=adam --lr=1e-3 ...] [--steps=300]\n"
      "       [--init=INIT.npy --grads=DIR]  (replay mode)  [--out=FINAL.npy]\n\n"
      "SIGTERM (preemption): the worker asks the servers for a checkpoint at the next\n"
      "step boundary, runs that step, leaves the job and exits with status 143; the\n"
      "job recovers from that checkpoint when the rank is replaced (or goes on with\n"
      "fewer workers under --elastic_min_workers).\n\n"
      "With --straggler_policy=evict (and --elastic_min_workers), a worker the shard\n"
      "servers name the job's slowest straggler for --straggler_evict_after_s leaves\n"
      "the same way and exits with status 3; the others go on without it.\n\n"
      "With --elastic_max_workers=N, a worker started with a rank the running job\n"
      "does not have (--rank in [world, N), e.g. the new index of a scaled-up\n"
      "Indexed Job) joins it: the job's workers admit it at the next checkpoint\n"
      "boundary and go on together, nothing rolled back.");
  tessel::ParseCommandLineWithConfig(argc, argv, "worker");
  auto options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  tessel::SetLogLabel(absl::StrCat("worker[", options->rank, "]"));
  tessel::SetLogContext({.job = options->job, .rank = options->rank});
  tessel::InstallPreemptionHandler(
      absl::Seconds(std::max(0, absl::GetFlag(FLAGS_preempt_grace_s))));
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps < 0) return Fail(absl::InvalidArgumentError("--steps must be >= 0"));
  auto worker = tessel::Worker::Connect(*options);
  if (!worker.ok()) return Fail(worker.status());

  const bool replay = !absl::GetFlag(FLAGS_grads).empty();
  // --device: cuda without a usable GPU (no driver, no device, no cuBLAS for
  // the model's layers) says why and computes on the CPU; host is the device
  // path on the CPU.
  std::unique_ptr<tessel::gpu::Device> device;
  std::unique_ptr<tessel::model::DeviceLayers> layers;  // on `device`; destroyed first
  if (auto config = tessel::MlpJobFromFlags(); !replay && config.ok() && config->device != "cpu") {
    auto d = tessel::gpu::OpenDevice(config->device);
    absl::Status usable = d.status();
    if (d.ok()) {
      auto l = tessel::model::OpenDeviceLayers(d->get());
      usable = l.status();
      if (l.ok()) layers = std::move(*l);
    }
    if (usable.ok()) {
      device = std::move(*d);
      // stdout too (rank 0): launchers show workers' stdout, not their logs.
      if ((*worker)->rank() == 0) {
        // Whether the data path could take device pointers: reported; the
        // staging goes through pinned host memory either way.
        const std::vector<std::string> kinds = (*worker)->device_memory_types();
        std::printf(
            "worker 0: computing on %s; data path moves %s memory, so gradients and parameters "
            "are staged through pinned host memory\n",
            device->description().c_str(),
            kinds.empty() ? "host" : absl::StrCat("host, ", absl::StrJoin(kinds, ", ")).c_str());
        std::fflush(stdout);
      }
      std::cerr << "tessel-train: rank " << (*worker)->rank() << " computes on "
                << device->description() << "\n";
    } else if (usable.code() == absl::StatusCode::kFailedPrecondition) {
      if ((*worker)->rank() == 0) {
        std::printf("worker 0: --device=%s: %s; computing on the CPU\n", config->device.c_str(),
                    std::string(usable.message()).c_str());
        std::fflush(stdout);
      }
      std::cerr << "tessel-train: --device=" << config->device << ": " << usable.message()
                << "; computing on the CPU\n";
    } else {
      return Fail(usable);
    }
  }
  int rc = replay   ? Replay(worker->get(), steps)
           : device ? TrainMlpOnDevice(worker->get(), steps, device.get(), std::move(layers))
                    : TrainMlp(worker->get(), steps);
  if (rc != 0) return rc;
  if ((*worker)->rank() == 0 && !absl::GetFlag(FLAGS_out).empty()) {
    auto params = (*worker)->GatherAll();
    if (!params.ok()) return Fail(params.status());
    absl::Status s = tessel::WriteNpyF32(absl::GetFlag(FLAGS_out), *params);
    if (!s.ok()) return Fail(s);
  }
  return 0;
}
