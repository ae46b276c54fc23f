// Worker SDK: what training code links to take part in a Tessel job.
//
// A Worker joins the registry as (job, rank), waits for the whole world and
// the shard servers, registers the model's tensors once (creating the job on
// every shard server), and then runs synchronous steps: the training code
// writes gradients into grads(), optionally hands over ranges as backward
// produces them (GradientsReady, so pushes overlap computation), and calls
// Step(), which returns when params() holds the updated parameters.
//
// Strategies (WorkerOptions::strategy):
//   zero2, zero1  servers keep fp32 master params and optimizer state of
//                 their range; a step pushes gradients and pulls parameters.
//                 The two are the same on the wire and on the worker, in
//                 fp32 and mixed precision alike, unless zero2 has units
//                 (WorkerOptions::fsdp_units): then its gradients live per
//                 unit (UnitGrads/PushUnit), each freed once pushed.
//   ddp           servers only average; each worker pulls the averaged
//                 gradient and runs the optimizer itself, identically.
//   fsdp          (ZeRO-3) the worker holds no full copy: per unit (a group
//                 of tensors, WorkerOptions::fsdp_units) it gathers the
//                 parameters before forward and again before backward
//                 (Prefetch/Gather/Release), pushes the unit's gradients after
//                 its backward (UnitGrads/PushUnit, freed once sent), and
//                 FinishStep() waits until every shard applied the step.
// Hybrid DPxTPxPP is built on top of this class: see worker/hybrid.h and
// docs/hybrid.md (each pipeline-stage/tensor-rank partition is its own
// zero1/zero2 job whose data-parallel replicas use a Worker each).
//
// Correctness contract: after step k, params() equals single-process
// training with the mean of the workers' gradients, bit for bit, because
// servers reduce in rank order whatever order buckets arrive in.
//
// Threads: one thread drives a Worker (all methods); the transport's progress
// thread fills params() during Step() only.
//
// This is the SDK's public header: it includes no gRPC, protobuf, UCX or CUDA
// header (worker/options.h holds the options in plain C++ types). The data
// path is injected (WorkerOptions::transport: UCX by default, in-process in
// unit tests). Behind this facade the work is done by collaborators in
// worker/internal/ (docs/architecture.md, "The worker SDK").
//
// Example:
//   WorkerOptions opt;
//   opt.registry = "127.0.0.1:7070"; opt.job = "mlp"; opt.rank = r; opt.world_size = 2;
//   opt.strategy = Strategy::kZero2;
//   opt.optimizer.kind = OptimizerParams::Kind::kAdam;
//   TESSEL_ASSIGN_OR_RETURN(auto worker, Worker::Connect(opt));
//   RETURN_IF_ERROR(worker->RegisterLayout(model.tensors(), init));
//   for (...) {
//     model.LossAndGrad(worker->params().data(), x, y, batch, worker->grads().data());
//     RETURN_IF_ERROR(worker->Step());
//   }
//
// Recovery (WorkerOptions::recovery): a step that fails because a worker or
// shard server was lost returns a status for which IsRecoverable() holds;
// Recover() then rolls back to the latest checkpoint and the loop re-seeks
// its data to step():
//   absl::Status s = worker->Step();
//   if (Worker::IsRecoverable(s)) s = worker->Recover();  // step() went back
// Threads: Recover() runs on the thread that drives the Worker.
#ifndef TESSEL_WORKER_WORKER_H_
#define TESSEL_WORKER_WORKER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/early_stopping.h"
#include "core/grad_norm.h"
#include "core/layout.h"
#include "core/precision.h"
#include "worker/ddp_updater.h"
#include "worker/options.h"
#include "worker/reports.h"

namespace tessel {

namespace internal {
struct WorkerParts;  // the collaborators behind the facade (worker.cc)
}  // namespace internal
class CheckpointWatch;  // rank 0's checkpoint duties (worker/checkpoint_watch.h)

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Connect(const WorkerOptions& options);
  ~Worker();

  // Declares the model's tensors (in order) and creates the job on every shard
  // server. `init` holds the initial parameters (num_params floats): rank 0's
  // are sent to the servers (ZeRO) and every rank starts from them; for DDP
  // every rank must pass the same init (e.g. the same seed). Other ranks may
  // pass an empty span for ZeRO.
  absl::Status RegisterLayout(const std::vector<TensorDesc>& tensors, absl::Span<const float> init);

  // The model's parameters and gradients in the full-buffer modes (ddp,
  // zero1, zero2; zero2 with units: params() only; fsdp: neither). Under
  // mixed precision (half_type() set) they are empty except DDP's params(),
  // its fp32 masters: the model lives in half_params()/half_grads(), as half
  // bit patterns (zero2 with units: half_params() only).
  absl::Span<float> params();
  absl::Span<float> grads();
  std::optional<HalfType> half_type() const;
  absl::Span<uint16_t> half_params();
  absl::Span<uint16_t> half_grads();
  // Views of one tensor, or an empty span if there is no such tensor.
  absl::Span<float> tensor_params(const std::string& name);
  absl::Span<float> tensor_grads(const std::string& name);

  // Gradient accumulation over micro-batches (fp32 full-buffer modes: ddp,
  // zero1, zero2 without units): adds one micro-batch's gradient into
  // grads() (the first call of a step overwrites it); Step() then pushes the
  // mean over the micro-batches (sum in call order, divided by the count), so
  // M micro-batches of B samples equal one batch of M*B.
  absl::Status AccumulateGradients(absl::Span<const float> micro_batch_grads);

  // Gradients of flat elements [begin, end) are final for this step: buckets
  // they complete are pushed now, while backward goes on. Optional.
  absl::Status GradientsReady(int64_t begin, int64_t end);
  // Top-k compression (options().topk_ratio > 0) done by the caller, e.g. on
  // a GPU (worker/device_staging.h): the caller writes a bucket's pairs, in
  // core/topk.h's wire form (SparseBytes(TopkCount(ratio, bucket size))
  // bytes), into SparseBucket(shard, bucket) and hands them over with
  // SparseGradientsReady(shard, bucket), which checks them and pushes them
  // as they are. The caller then keeps that bucket's residual: the worker's
  // own is used only for buckets it compresses itself from grads() (those
  // not handed over this way by Step()). sparse_grads() is every bucket's
  // pairs, one buffer (to pin it). FailedPrecondition without top-k or
  // before RegisterLayout; InvalidArgument for a bucket out of range, handed
  // over twice in a step, or pairs that fail core/topk.h's CheckSparse (then
  // nothing is pushed).
  absl::Span<uint8_t> sparse_grads();
  absl::StatusOr<absl::Span<uint8_t>> SparseBucket(int shard, int bucket);
  absl::Status SparseGradientsReady(int shard, int bucket);
  // DDP: `updater` applies each step's update from now on (nullptr: the
  // worker again, from its own copies, which are refreshed first). Installing
  // one hands it the current parameters and state (Load). Between steps the
  // worker's params()/half_params() are then stale; GatherAll, Serialize,
  // SynchronizeOptimizerState and recoveries Store first. FailedPrecondition
  // unless the job is ddp and laid out; the error of the Load or Store
  // otherwise (then nothing changed).
  absl::Status SetDdpUpdater(DdpUpdater* updater);
  // Pushes what is left, waits for the updated parameters (or the averaged
  // gradient, applied locally, for DDP). On error the step is not applied and
  // the status names the job, step, shard and cause, with one exception that
  // a recovery loop already handles: with elastic growth
  // (WorkerOptions::elastic_max_workers) a step that reaches a checkpoint
  // boundary while newcomers wait is applied (step() moved on) and returns a
  // recoverable status; Recover() admits them without rolling back (step()
  // stays), and the loop re-reads rank() and world_size().
  absl::Status Step();

  // Asks every shard server to snapshot the job when it completes the next
  // step (step() + 1): a boundary no shard can pass before this worker
  // pushes it, so any rank may ask. For a worker about to leave (SIGTERM,
  // preemption): ask, run one more step, then go, and the job's recovery
  // loses nothing. FailedPrecondition for DDP (its state lives on workers)
  // or servers without --checkpoint_dir.
  absl::Status RequestCheckpoint();

  // New optimizer hyper-parameters (a learning-rate schedule, weight decay,
  // momentum...) from the next step on, on every shard (DDP: this worker).
  // The kind may not change. Every rank of the job calls it with the same
  // values between the same two steps (after Step() returned, before
  // pushing the next), so every shard applies the next step with them, on
  // every strategy; recoveries and restores keep them. Before
  // RegisterLayout it only changes options(). On error nothing changed.
  absl::Status SetOptimizer(const OptimizerParams& optimizer);

  // Tensors (indices into layout().tensors()) the next step leaves alone:
  // torch's rule for parameters without a gradient (p.grad is None), which
  // keep their values and optimizer state, weight decay and momentum
  // included, while each tensor's own step count (Adam's bias corrections,
  // Adagrad's lr_decay) counts only its updates (core/tensor_steps.h). Pass
  // the tensors no rank has a gradient for (a tensor one rank has a gradient
  // for is updated with the mean, the other ranks' zeros included): every
  // rank calls it with the same set after the previous step returned and
  // before it pushes a bucket holding one of them (Step() or GradientsReady
  // of their range). Applies to that one step; on every strategy; kept by
  // checkpoints, Serialize and recoveries. An empty set does nothing.
  // InvalidArgument for an index out of range or given twice; on error
  // nothing changed.
  absl::Status SkipTensors(absl::Span<const int32_t> tensors);

  // --- recovery (WorkerOptions::recovery) --------------------------------
  // True for a failed step's status that Recover() can repair: a worker or
  // shard server left, came back, or the job was rolled back under us.
  static bool IsRecoverable(const absl::Status& status);
  // `status` tagged so that IsRecoverable() holds: for layers on top whose
  // own waits see a loss Recover() repairs (a hybrid job's mesh).
  static absl::Status MarkRecoverable(absl::Status status);
  // OK unless one of the job's workers left or was replaced since the
  // membership was last complete (then: the status a failed step carries).
  absl::Status CheckMembers();
  // Installs (nullptr removes) a check a blocked wait (a step's parameters,
  // a barrier) runs every 250 ms on the driving thread: a non-OK status ends
  // the wait with it. For what only a layer on top can see: a hybrid job's
  // process of another partition lost, which this partition's step waits
  // for indirectly.
  void SetWaitCheck(std::function<absl::Status()> check);
  // Waits (up to recovery_timeout) until every rank and shard is present,
  // then rolls back: rank 0 restores every shard from the latest complete
  // checkpoint at a new epoch (frames of the old one are refused), the other
  // ranks wait for that, and each worker pulls the checkpoint's parameters.
  // On success step() is the checkpoint's step and params() (or Gather) hold
  // its parameters: the training loop re-seeks its data to step() and goes on.
  // params()/half_params() may point elsewhere afterwards: take them again.
  // A failure names the rank or shard that did not return.
  absl::Status Recover();
  // Recover() to the checkpoint of `step` instead of the latest: for jobs
  // that must roll back together (the partitions of a hybrid job agree on a
  // step every one of them has complete; CompleteCheckpointSteps).
  absl::Status RecoverTo(int64_t step);
  // Before RegisterLayout with WorkerOptions::resume: the checkpoint to
  // resume from, decided after Connect (e.g. a hybrid job's partitions agree
  // on one); -1 = the latest.
  void SetResumeStep(int64_t step);
  // Steps of this job's complete checkpoints (manifest written), ascending.
  absl::StatusOr<std::vector<int64_t>> CompleteCheckpointSteps();
  // OK while every shard server this worker uses is registered at the
  // address it knows; otherwise the status a failed step would carry
  // (recoverable with recovery on): for waits outside Step(), e.g. a hybrid
  // job's worker-to-worker messages.
  absl::Status CheckServers();
  int recoveries() const;
  // Whether this worker (a replacement started with options().resume)
  // rejoined its job's step in flight without a rollback: step() is the
  // step the shards had applied, and the loop goes on from there (its next
  // batch is that of step() + 1, as after any resume).
  bool rejoined_in_place() const;
  // After rejoining in place: whether the step in flight it recomputes is a
  // held step (the other ranks hold it for clipping; HoldUpdates is set to
  // match, so its pushes agree with theirs).
  bool rejoined_step_held() const;
  // Where this worker serves its Prometheus metrics (HOST:PORT, the port
  // bound when options().metrics_address asked for port 0); "" when off.
  std::string metrics_address() const;
  // The training loss of the step just finished, reported to the registry
  // with the next heartbeat (about once a second): the registry's status page
  // plots rank 0's (docs/observability.md). Cheap; call it every step.
  void ReportLoss(double loss);
  // This worker's registry rank: options().rank, kept when an elastic
  // recovery renumbers the data-parallel ranks.
  int registry_rank() const;
  // Registry ranks of the job's workers in data-parallel rank order.
  const std::vector<int>& worker_ids() const;
  // Data frames this worker dropped because they came from an older epoch.
  int64_t stale_frames_dropped();
  // Data frames this worker dropped for a missing or wrong tag (the shard
  // servers authenticate frames: docs/operations.md, "Data-path
  // authentication"); and whether any of them does.
  int64_t unauthenticated_frames_dropped() const;
  // Rank 0 of a job with checkpoints: the first step whose checkpoint failed
  // on some shard since one last succeeded, as the shards said when last
  // asked (WorkerOptions::checkpoint_report_interval, at a step's end); -1
  // while they succeed or before
  // the first answer. The log says it too (WARNING), with the reason.
  int64_t checkpoints_failing_since() const;
  bool data_path_authenticated() const;
  // How often a recovery found this worker's UCX receive queue wedged and
  // re-created its endpoint (RenewWedgedEndpoint).
  int64_t endpoint_renewals() const;

  // --- fsdp -------------------------------------------------------------
  int num_units() const;
  Range unit_range(int unit) const;
  // Starts gathering a unit's parameters (for the current step) in the
  // background. Idempotent while the unit is held or in flight.
  absl::Status Prefetch(int unit);
  // Waits for the unit's parameters; the view stays valid until Release.
  absl::StatusOr<absl::Span<const float>> Gather(int unit);
  // Mixed precision (fsdp with WorkerOptions::precision fp16/bf16): the unit's
  // parameters as half bit patterns; the worker holds only these.
  absl::StatusOr<absl::Span<const uint16_t>> GatherHalf(int unit);
  // Frees the unit's parameters.
  void Release(int unit);
  // A zeroed buffer for the unit's gradients, valid until PushUnit.
  absl::Span<float> UnitGrads(int unit);
  // Mixed precision fsdp: the same in half (UnitGrads is then empty).
  absl::Span<uint16_t> UnitHalfGrads(int unit);
  // Pushes the unit's gradients; the buffer is freed once they are sent.
  absl::Status PushUnit(int unit);
  // fsdp: pushes the unit's gradients of one micro-batch as a part: the
  // servers add it to this rank's push of the unit (PushUnit ends it), each
  // rank's parts in order and in the job's precision (fp16/bf16: each add
  // rounded to half, as torch's in-place `grad += g`), so a worker holds one
  // micro-batch's gradients of a unit at a time however many micro-batches a
  // step has. The buffer is freed once sent; UnitGrads (UnitHalfGrads) gives
  // a new zeroed one.
  absl::Status PushUnitPart(int unit);
  // Waits until every shard has applied this step; step() advances.
  absl::Status FinishStep();
  // --- held steps: clipping by the job-wide gradient norm ---------------
  // zero1, zero2 and fsdp (worker/worker_held_step.cc; server/step_hold.h). With
  // HoldUpdates(true) every push of the coming steps asks the servers to
  // reduce the step but hold its update; HeldGradientNorm() (after the
  // step's gradients are handed over: fsdp, every unit pushed) pushes what is
  // left and returns the step's mean gradient's stats over the job's shards,
  // summed in shard order (the same bits on every rank; GradNormStats,
  // NormOf); ReleaseStep(multiplier) lets the servers apply the step with
  // the gradient times `multiplier` (replacing the step's grad_scale; 0:
  // the step's own settings). Step() and FinishStep() release a held step
  // not released yet with 0. Set it between steps; FailedPrecondition for
  // ddp (its workers clip themselves) and with host aggregation. Every rank
  // must hold the same steps (servers refuse pushes that disagree) and
  // release with the same multiplier.
  absl::Status HoldUpdates(bool hold);
  bool holding_updates() const;
  absl::StatusOr<GradNormStats> HeldGradientNorm();
  absl::Status ReleaseStep(float multiplier);
  // ddp (its workers apply the update, so they clip it): pushes what is
  // left of the step and waits for the averaged gradient (in grads() or
  // half_grads()) without applying it; the next Step() applies it with the
  // settings then (a clipping factor as grad_scale, SetOptimizer). Once a
  // step; FailedPrecondition for other strategies.
  absl::Status PullMean();
  // fsdp: waits until every shard holds parameters of `version`.
  absl::Status Barrier(int64_t version);
  // The full parameters at the current step (tools and tests; allocates P floats).
  absl::StatusOr<std::vector<float>> GatherAll();

  // --- state queries -----------------------------------------------------
  // Collective: every rank of the job calls them at the same point, between
  // steps (after Step()/FinishStep() returned, before the next pushes).
  //
  // The mean over ranks of this step's gradients (grads(), divided by the
  // micro-batch count if accumulating; half gradients widened), reduced in
  // rank order by the shard servers exactly as a step would, without
  // applying anything: for gradient norms, clipping decisions, checks. Costs
  // one extra all-reduce; grads() is unchanged and Step() proceeds as usual.
  // Not for fsdp or per-unit zero2, whose gradients are pushed and freed
  // unit by unit. The view stays valid until the next call.
  absl::StatusOr<absl::Span<const float>> SynchronizeGradients();
  // ZeRO/FSDP: the state lives once, sharded on the servers; checks every
  // shard is at this step and reports its state digest. DDP: every rank
  // holds a copy; compares digests of (step, params, state) across ranks
  // and, where one differs from rank 0's, overwrites it with rank 0's
  // exactly (a broadcast). `consistent` says what was found.
  absl::StatusOr<OptimizerStateReport> SynchronizeOptimizerState();
  // The whole training state (params as fp32 masters, optimizer state,
  // step) as a portable blob (worker/train_state.h): independent of world
  // size, shard count and strategy.
  absl::StatusOr<std::string> Serialize();
  // Loads a Serialize() blob into this job (every rank passes the same
  // bytes): same tensors and optimizer kind required; anything else may
  // differ. Afterwards step() is the blob's step and every rank holds its
  // parameters. On error nothing changed, on every rank.
  absl::Status Deserialize(absl::string_view blob);
  // New parameters for the job (fp32, num_params(), the same on every rank:
  // a pretrained model's), keeping the optimizer state and the step; every
  // rank holds them afterwards. On error nothing changed, on every rank.
  absl::Status LoadParameters(absl::Span<const float> params);
  // Early stopping: every rank reports its value of the monitored metric
  // (e.g. its validation loss); the job-wide mean feeds the rule (or hook),
  // and the decision, the same on every rank, is returned and kept for
  // ShouldEarlyStop().
  absl::StatusOr<bool> ReportMetric(float value);
  bool ShouldEarlyStop() const;
  const EarlyStopping& early_stopping() const;
  // The mean over ranks of `data` (same size on every rank), in place, in
  // rank order through the shard servers. The building block of the above.
  // No all-reduce sum is offered: a sum is W * mean (exact for W a power of
  // two), and quantities built from ratios of sums (a mean over a global
  // batch, SyncBatchNorm's statistics) need none.
  absl::Status AllReduceMean(absl::Span<float> data);
  // Rank `root`'s `bytes` onto every rank, in place, exactly: every rank
  // passes the same size (any bytes: floats with their NaN payloads, int64
  // counters). One AllReduceMean of size/2 floats (JobCollectives::Broadcast:
  // 16-bit words, the other ranks' zeros); nothing travels with one rank or
  // no bytes. InvalidArgument for a root outside [0, world_size());
  // FailedPrecondition before RegisterLayout.
  absl::Status Broadcast(int root, absl::Span<uint8_t> bytes);

  int64_t step() const;
  int64_t epoch() const;
  // The last Step()'s push / wait / pull times (worker/reports.h).
  StepPhases last_step_phases() const;
  // The ranks the job's shard servers name stragglers now, one per rank in
  // rank order, as the registry's last heartbeat answer (about once a
  // second) said; empty when none is, or without a registry
  // (worker/reports.h StragglerReport). Cheap: a copy under a mutex.
  std::vector<StragglerReport> stragglers() const;
  // options().straggler_policy kEvict: whether this worker is evicted, i.e.
  // the servers have named it the job's slowest straggler for
  // options().straggler_evict_after and the job keeps at least
  // elastic_min_workers without it. The first time, it logs (WARNING) and
  // counts (tessel_worker_straggler_evictions_total); it stays true. The
  // caller then leaves the job at a checkpoint (tessel-train: asks for one at
  // the next step, runs that step, exits), and the others go on without it
  // through the elastic shrink. Always false with kOff. Call after a step.
  bool straggler_evicted();
  // How this worker's payloads moved to and from each shard server so far:
  // "in place" (UCX shared memory on one host: servers reduce gradients
  // where this worker keeps them, parameters are copied once) or "copied"
  // (through UCX's queues: another host, tcp, --ucx_zero_copy=false), as one
  // word when every shard agrees, else per shard ("shard 0: in place, ...").
  std::string data_path() const;
  // How this worker's host sends gradients (WorkerOptions::aggregation,
  // docs/hierarchical.md): "host aggregation: 2 hosts (ranks 0-1; 2-3)", or
  // "flat (why)"; it may change at a recovery.
  std::string aggregation() const;
  // Memory kinds besides host memory the data path can move (UCX: "cuda"
  // where a cuda_copy/cuda_ipc transport exists; Transport::DeviceMemoryTypes).
  // GPU workers report it; they stage through host memory either way.
  std::vector<std::string> device_memory_types() const;
  int num_servers() const;
  const Layout& layout() const;
  // What the caller passed to Connect, changed since only by its own
  // SetOptimizer and SetResumeStep: the worker never rewrites it. What the
  // worker decides is below.
  const WorkerOptions& options() const;
  // This worker's data-parallel rank and the job's world size now:
  // options().rank and options().world_size at Connect, except for a
  // newcomer (elastic growth: its prospective rank and the running job's
  // world from Connect, the grown world once RegisterLayout admitted it);
  // an elastic recovery renumbers the ranks. Re-read after Recover().
  int rank() const;
  int world_size() const;
  // Whether RegisterLayout took the job's state from the servers (a
  // checkpoint, or a recovery) rather than from `init`: options().resume,
  // or decided at RegisterLayout (options().auto_resume found the job under
  // way, or this worker is a newcomer). Before RegisterLayout:
  // options().resume.
  bool resumed() const;
  WorkerMemory memory() const;
  // Shard statistics from every server (control plane), for tools and tests.
  absl::StatusOr<std::vector<ShardReport>> ServerStats();

 private:
  explicit Worker(std::unique_ptr<internal::WorkerParts> parts);
  // Step()/FinishStep(): a held step not released yet is released with 0.
  absl::Status ReleaseIfHeld();
  absl::Status Start();
  // Creates (or, resuming, restores) the registered job on every shard.
  absl::Status CreateJob();
  // A resuming worker with recovery on: rejoins the step in flight where the
  // job allows (options.h rejoin_in_place), else joins a rollback.
  absl::Status ResumeInJob();
  // ResumeInJob()'s (`replacement`) and Recover()'s choice: a replacement
  // rejoins in place where the job allows it, else (and for Recover) a
  // rollback to `restore_step`.
  absl::Status RejoinOrRollBack(int64_t restore_step, bool replacement);
  absl::Status PullInitial(absl::Span<const float> init);
  // Rank 0, after a step: time-based checkpoints and failure reports
  // (CheckpointWatch).
  void WatchCheckpoints();
  // Elastic growth, after a step: at a checkpoint boundary the ranks agree
  // on the newcomers they all see; if any, a recoverable status (Recover()
  // admits them).
  absl::Status AdmitNewcomers();
  absl::Status RunRecovery(int64_t restore_step);
  // Records a finished step in the worker's metrics.
  void StepMetrics(const StepPhases& phases, double update_seconds);

  std::unique_ptr<internal::WorkerParts> p_;
  std::unique_ptr<CheckpointWatch> checkpoints_;
};

}  // namespace tessel

#endif  // TESSEL_WORKER_WORKER_H_
