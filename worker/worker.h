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
//                 (On the wire the two are the same; they differ in what the
//                 worker keeps, which matters once mixed precision lands.)
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
// Example:
//   WorkerOptions opt;
//   opt.registry = "127.0.0.1:7070"; opt.job = "mlp"; opt.rank = r; opt.world_size = 2;
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

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/early_stopping.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/wire.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/registry_client.h"
#include "rpc/tls.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"
#include "worker/train_state.h"

namespace tessel {

struct WorkerOptions {
  std::string registry;  // host:port of the registry (required)
  std::string job;       // job name (required)
  int rank = 0;          // in [0, world_size)
  int world_size = 1;
  std::string server_pool = "default";
  int num_servers = 0;  // shard servers to use: ranks 0..n-1 of the pool; 0 = all present
  v1::Strategy strategy = v1::STRATEGY_ZERO2;
  OptimizerParams optimizer;
  int64_t bucket_bytes = 4 << 20;  // data-path bucket size
  int64_t align_elems = 64;        // shard range alignment (elements)
  absl::Duration connect_timeout = absl::Seconds(60);
  // Polled about every 0.5 s while Connect waits for the other workers to
  // join; a non-OK status ends the wait with it. (AllReduceMean's reducers:
  // the parent job's membership changed, so some rank will never join.)
  std::function<absl::Status()> connect_check;
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration lease_ttl = absl::Seconds(3);
  UcxOptions ucx;
  // Testing aid: when non-zero, buckets are pushed in a random order with
  // random pauses, to prove results do not depend on arrival order.
  uint64_t shuffle_seed = 0;
  // Checkpoints (ZeRO only; servers need --checkpoint_dir). Every shard
  // snapshots at each multiple of every_steps; rank 0 also asks for one
  // every `checkpoint_interval` of wall time.
  v1::CheckpointPolicy checkpoint;
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  // Start from the job's checkpoint at resume_step (-1: the latest) instead
  // of `init`; the shard count and world size may differ from the run that
  // wrote it. After RegisterLayout, step() is the restored step.
  bool resume = false;
  int64_t resume_step = -1;
  // Admin token for servers that require one ("" = $TESSEL_TOKEN if set).
  std::string token;
  // Early stopping (ReportMetric / ShouldEarlyStop): the patience rule over
  // the job-wide mean of the reported metric, and optionally a hook that
  // decides instead (it sees the mean and the rule's bookkeeping; it runs on
  // every rank with the same inputs, so it must be deterministic).
  EarlyStoppingPolicy early_stopping;
  std::function<bool(double mean, const EarlyStopping& rule)> early_stop_hook;
  // Mutual TLS for the registry and shard-server channels (rpc/tls.h);
  // empty = plaintext. The UCX data path is not encrypted.
  TlsOptions tls;
  // Units (groups of tensors): index of the first tensor of each, ascending
  // from 0. Required for fsdp. For zero2 they make gradients live per unit:
  // UnitGrads(u) (UnitHalfGrads(u) under mixed precision) / PushUnit(u)
  // instead of grads(), each unit's buffer freed as soon as it is pushed;
  // Step() then pulls the parameters.
  std::vector<int> fsdp_units;
  // Mixed precision: DTYPE_F16 or DTYPE_BF16 keeps parameters and gradients
  // in half on this worker and on the wire (half_params(), half_grads(); for
  // fsdp GatherHalf()/UnitHalfGrads()).
  //   zero1/zero2/fsdp  servers keep fp32 masters and optimizer state and
  //                     serve the masters rounded to half.
  //   ddp               servers average the widened half gradients in fp32
  //                     and return the mean rounded to half; each worker keeps
  //                     fp32 masters and state, applies the update and rounds
  //                     the masters to half_params().
  v1::DType precision = v1::DTYPE_F32;
  // Recovery (docs/operations.md, "Recovery"). When a worker or shard server
  // of the job dies, a step fails with a status IsRecoverable() accepts
  // instead of a fatal one; Recover() then waits up to recovery_timeout for
  // the missing members to come back and rolls every shard and every worker
  // back to the latest complete checkpoint (zero1, zero2, fsdp). DDP, whose
  // state lives only on the workers, does not roll back: the servers are
  // re-created empty and every rank takes the state of the most advanced one
  // (a replacement holds none). With `resume`, RegisterLayout takes part in
  // such a recovery: that is how a replacement worker, or a whole restarted
  // job, rejoins.
  bool recovery = false;
  absl::Duration recovery_timeout = absl::Seconds(60);
  // Elastic continuation, a job policy (needs recovery; every strategy but
  // hybrid). 0 = off: a lost worker must be replaced (same rank, --resume).
  // N >= 1: when a worker is lost and no replacement has joined within
  // elastic_grace, the job goes on without it as long as at least N workers
  // remain. The survivors are renumbered 0..W'-1 in their old rank order
  // (options().rank and options().world_size change; registry identities do
  // not), every shard is restored from the latest complete checkpoint for W'
  // workers (DDP: re-created at the survivors' step, no rollback), and the
  // training loop re-reads rank and world size after Recover(). Each worker
  // keeps its own batch, so the global batch becomes W' x batch and the
  // optimizer averages over W' workers (docs/operations.md, "Elastic
  // continuation"). A worker that comes back after that is refused.
  int elastic_min_workers = 0;
  absl::Duration elastic_grace = absl::Seconds(10);
};

// What SynchronizeOptimizerState found.
struct OptimizerStateReport {
  int64_t step = 0;
  // DDP: one digest of (step, params, optimizer state) per rank, as found
  // before any repair. ZeRO/FSDP: one state digest per shard.
  std::vector<std::string> digests;
  bool consistent = true;           // all ranks equal (DDP), all shards at step (ZeRO)
  std::vector<int> repaired_ranks;  // DDP: ranks overwritten with rank 0's state
};

struct WorkerMemory {
  int64_t params_bytes = 0;
  int64_t grads_bytes = 0;
  int64_t optimizer_bytes = 0;  // DDP only: optimizer state lives on the worker
  int64_t peak_bytes = 0;       // fsdp: most parameter + gradient bytes held at once
};

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

  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<float> grads() { return absl::MakeSpan(grads_); }
  // Mixed precision: the parameters and gradients, as half bit patterns.
  std::optional<HalfType> half_type() const { return half_; }
  absl::Span<uint16_t> half_params() { return absl::MakeSpan(params_half_); }
  absl::Span<uint16_t> half_grads() { return absl::MakeSpan(grads_half_); }
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
  // Pushes what is left, waits for the updated parameters (or the averaged
  // gradient, applied locally, for DDP). On error the step is not applied and
  // the status names the job, step, shard and cause.
  absl::Status Step();

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
  void SetWaitCheck(std::function<absl::Status()> check) { wait_check_ = std::move(check); }
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
  void SetResumeStep(int64_t step) { options_.resume_step = step; }
  // Steps of this job's complete checkpoints (manifest written), ascending.
  absl::StatusOr<std::vector<int64_t>> CompleteCheckpointSteps();
  // OK while every shard server this worker uses is registered at the
  // address it knows; otherwise the status a failed step would carry
  // (recoverable with recovery on): for waits outside Step(), e.g. a hybrid
  // job's worker-to-worker messages.
  absl::Status CheckServers() { return ServersChanged(); }
  int recoveries() const { return recoveries_; }
  // This worker's registry rank: options().rank at Create, kept when an
  // elastic recovery renumbers the data-parallel ranks.
  int registry_rank() const { return id_; }
  // Registry ranks of the job's workers in data-parallel rank order.
  const std::vector<int>& worker_ids() const { return member_ids_; }
  // Data frames this worker dropped because they came from an older epoch.
  int64_t stale_frames_dropped();
  // How often a recovery found this worker's UCX receive queue wedged and
  // re-created its endpoint (RenewWedgedEndpoint).
  int64_t endpoint_renewals() const { return endpoint_renewals_.load(); }

  // --- fsdp -------------------------------------------------------------
  int num_units() const { return static_cast<int>(units_.size()); }
  Range unit_range(int unit) const { return units_[unit].range; }
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
  // Waits until every shard has applied this step; step() advances.
  absl::Status FinishStep();
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
  // Early stopping: every rank reports its value of the monitored metric
  // (e.g. its validation loss); the job-wide mean feeds the rule (or hook),
  // and the decision, the same on every rank, is returned and kept for
  // ShouldEarlyStop().
  absl::StatusOr<bool> ReportMetric(float value);
  bool ShouldEarlyStop() const { return early_stop_; }
  const EarlyStopping& early_stopping() const { return stopper_; }
  // The mean over ranks of `data` (same size on every rank), in place, in
  // rank order through the shard servers. The building block of the above.
  absl::Status AllReduceMean(absl::Span<float> data);

  int64_t step() const { return step_; }
  int64_t epoch() const { return epoch_; }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  const Layout& layout() const { return *layout_; }
  const WorkerOptions& options() const { return options_; }
  WorkerMemory memory() const;
  // Shard statistics from every server (control plane), for tools and tests.
  absl::StatusOr<std::vector<v1::ShardStats>> ServerStats();

 private:
  struct Server {
    int shard = 0;
    std::string grpc_address;
    std::unique_ptr<v1::ShardServer::Stub> stub;
    PeerId peer = 0;
    std::string ucx_address;  // to notice a restarted server
  };

  explicit Worker(const WorkerOptions& options);
  absl::Status Start();
  Accept OnFrame(const Incoming& in);
  absl::Span<float> TensorSpan(std::vector<float>& flat, const std::string& name);
  FrameHeader Header(FrameType type, int64_t step, int shard, int bucket) const;
  // Sends a frame to its shard; a failed send fails the step in progress.
  void SendData(const FrameHeader& h, const void* payload);
  void PushBucket(int shard, int bucket);
  absl::Status SendPulls(int64_t version);
  absl::Status WaitForParams(int64_t version);
  std::string Where() const;
  void Authorize(grpc::ClientContext* ctx) const;
  void MaybeCheckpoint();
  // DDP: applies the averaged gradient to this worker's masters and state.
  void ApplyLocalUpdate();
  absl::Status MembershipChanged();
  // A collective barrier that also agrees on failure: every rank passes
  // whether it is ok; all get an error if any rank was not.
  absl::Status AgreeOk(bool ok, const std::string& what);
  absl::Status ReadServerState(TrainState* out);
  absl::Status WriteServerState(const TrainState& state);
  // Recovery (the "recovery" section of worker.cc).
  absl::Status Recoverable(absl::Status s) const;
  absl::Status ServersChanged();
  absl::Status RunRecovery(int64_t restore_step);
  absl::Status RecoverOnce(absl::Time deadline, absl::Time elastic_at, int64_t restore_step,
                           int64_t after_epoch);
  // Takes on the membership a recovery set (elastic: renumbered survivors).
  void AdoptMembers(const std::vector<int>& ids);
  void RememberMembers(const v1::View& view);
  // What a recovery does once the job is whole again, for pause messages.
  std::string AfterPause() const;
  bool elastic() const { return options_.elastic_min_workers > 0; }
  void ResetForRecovery();
  // Waits until every worker and shard is present (ids = the current
  // workers), or, elastic, until elastic_at with enough survivors (ids = the
  // survivors' registry ranks in data-parallel order).
  absl::Status WaitForMembers(absl::Time deadline, absl::Time elastic_at, std::vector<int>* ids);
  absl::Status Reconnect(const v1::View& pool);
  void SettleReceives(absl::Duration limit);
  // Probes the UCX receive queue; if wedged, resets the transport and marks
  // every server for reconnection.
  void RenewWedgedEndpoint();
  absl::Status RestoreShards(int64_t restore_step, const std::vector<int>& ids, int64_t* epoch,
                             int64_t* step);
  // ids: the workers that restore recorded, in data-parallel rank order.
  absl::Status AwaitRestore(absl::Time deadline, int64_t after_epoch, int64_t* epoch, int64_t* step,
                            std::vector<int>* ids);
  // DDP, after a restore: the ranks compare (step, state digest); if any
  // differs or holds no state (a replacement), every rank takes the state of
  // the lowest rank at the highest step, and the servers (re-created at
  // `server_step`) move to that step. Exact: each rank applied the same
  // averaged gradients, so a rank one step ahead is that rank's future.
  absl::Status AlignDdpState(int64_t server_step);

  // Collective helpers over AllReduceMean (state queries and recovery).
  // Every rank's `mine` (same length everywhere), exactly, rank-major.
  absl::StatusOr<std::vector<uint64_t>> ExchangeWords(absl::Span<const uint64_t> mine);
  // DDP: a digest of (step, params, optimizer state).
  uint64_t DdpStateDigest() const;
  // DDP: every rank takes rank `root`'s step, params and optimizer state,
  // bit for bit.
  absl::Status BroadcastDdpState(int root);
  // Frees the reducer of vectors of `size` after a barrier: its job on the
  // servers holds world_size receive buffers of that size.
  absl::Status ReleaseReducer(size_t size);
  // Drops every reducer (a recovery renames them by epoch), deleting their
  // jobs on the servers (best effort).
  void DropReducers();
  void DeleteJobOnServers();

  struct Unit {
    Range range;
    std::vector<std::pair<int, int>> buckets;   // per shard: first bucket, count
    std::vector<float> params;                  // held parameters; empty when released
    std::shared_ptr<std::vector<float>> grads;  // until pushed
    // Mixed precision: the same, in half (the fp32 ones stay empty).
    std::vector<uint16_t> params_half;
    std::shared_ptr<std::vector<uint16_t>> grads_half;
    int64_t version = -1;  // version held or in flight
    int64_t expected = 0;
    int64_t received = 0;
  };
  bool fsdp() const { return options_.strategy == v1::STRATEGY_FSDP; }
  // zero2 with units: gradients live per unit (UnitGrads/PushUnit), freed once
  // pushed, instead of in a full-model buffer.
  bool unit_grads() const {
    return fsdp() || (options_.strategy == v1::STRATEGY_ZERO2 && !options_.fsdp_units.empty());
  }
  absl::Status InitUnits();
  absl::Status WaitForUnit(int unit);
  static int64_t UnitBytes(const Unit& u);
  Accept OnFsdpFrame(const FrameHeader& h, const Incoming& in);
  // Waits (up to step_timeout) until `done`, an ERROR frame or a failed send;
  // on time-out the status says `what()` was waited for. Both run under mu_.
  absl::Status WaitFor(const std::function<bool()>& done, const std::function<std::string()>& what);
  void AccountLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitForSends();

  // rank and world_size change only in an elastic recovery (AdoptMembers,
  // under mu_); everything else is as given to Create.
  WorkerOptions options_;
  const int id_;                 // registry rank (options.rank at Create)
  std::vector<int> member_ids_;  // registry ranks in data-parallel rank order
  // Registry rank -> UCX address of the job's workers when last complete
  // (a restarted process has a new address).
  std::map<int, std::string> member_addresses_;
  std::unique_ptr<RegistryClient> registry_;
  std::unique_ptr<Transport> transport_;
  std::vector<Server> servers_;
  std::unique_ptr<Layout> layout_;
  uint64_t job_id_ = 0;
  // The job's fencing epoch, stamped on every frame: the registry epoch at
  // the start, a newer one after each recovery. Read by the transport thread.
  std::atomic<int64_t> epoch_{0};
  int64_t view_epoch_ = 0;  // registry epoch of the job group when last complete
  v1::JobSpec spec_;        // as registered
  int recoveries_ = 0;
  int64_t step_ = 0;
  // DDP: false for a replacement worker until a recovery gave it the job's
  // state (parameters and optimizer state live only on the workers).
  bool holds_state_ = true;
  std::function<absl::Status()> wait_check_;  // SetWaitCheck
  int micro_batches_ = 0;                     // AccumulateGradients calls this step
  absl::Time last_checkpoint_ = absl::Now();
  std::string token_;
  ClientCredentials credentials_;  // for every gRPC channel (mutual TLS or not)
  // AllReduceMean: one reduce-only DDP job per vector size ("<job>~sync<n>").
  std::map<size_t, std::unique_ptr<Worker>> reducers_;
  bool reduce_only_ = false;  // this Worker is such a reducer: Step() only averages
  std::vector<float> synced_grads_;
  EarlyStopping stopper_;
  bool early_stop_ = false;

  std::vector<float> params_;
  std::vector<float> grads_;
  std::optional<HalfType> half_;
  std::vector<uint16_t> params_half_;
  std::vector<uint16_t> grads_half_;
  std::vector<std::vector<float>> optimizer_state_;  // DDP only
  // Per (shard, bucket): elements handed over this step, and pushed flag.
  std::vector<std::vector<int64_t>> ready_elems_;
  std::vector<std::vector<uint8_t>> pushed_;
  std::mt19937_64 shuffle_rng_;

  std::vector<Unit> units_;           // fsdp; buffers and counters under mu_
  std::vector<int64_t> unit_starts_;  // fsdp: range.begin of each unit

  absl::Mutex mu_;
  int64_t outstanding_sends_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_version_ ABSL_GUARDED_BY(mu_) = -1;  // fsdp: step a barrier waits for
  int64_t sync_expected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expect_version_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expected_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> received_by_shard_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t send_failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status send_error_ ABSL_GUARDED_BY(mu_);
  int64_t inflight_receives_ ABSL_GUARDED_BY(mu_) = 0;  // PARAMS accepted, not yet landed
  // Buffers a transfer from before a rollback may still write into: kept
  // until the transport is shut down (SettleReceives).
  std::vector<std::vector<float>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint16_t>> retired_half_ ABSL_GUARDED_BY(mu_);
  int64_t stale_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> endpoint_renewals_{0};
  std::string registered_address_;  // the UCX address this worker joined with
};

}  // namespace tessel

#endif  // TESSEL_WORKER_WORKER_H_
