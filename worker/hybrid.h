// Hybrid data x tensor x pipeline parallelism on top of the Worker SDK.
//
// A hybrid job runs dp * tp * pp worker processes; global rank r is the
// coordinates (d, p, t) of a data-parallel replica, pipeline stage and tensor
// rank (the mapping, groups, message tags and 1F1B schedule are plain
// arithmetic in worker/hybrid_layout.h, included here).
//
// Each (p, t) holds one partition of the model. The partition is its own
// Tessel job on the shard servers, named "<job>.p<p>.t<t>"
// (PartitionJobName, core/job_name.h), with world size
// dp, in which this process is rank d: the dp replicas of a partition reduce
// their gradients through that job's shards, with the ordinary Worker
// (strategy zero1 or zero2: servers keep master parameters and optimizer
// state), one Worker per process.
//
// Worker-to-worker traffic (tensor-parallel sums, pipeline activations and
// their gradients) goes through a PeerGroup over a second UCX endpoint per
// process. Peers find each other in the registry: every process joins group
// "<job>.mesh" (MeshGroupName) with its global rank and UCX address and waits for all.
//
// HybridSession::Connect does all of this and checks, before any job is
// created on the servers, that every process was started with the same
// configuration. While the job runs, a process that leaves the mesh (dies,
// or stops heartbeating) ends its peers' waits within a few seconds, naming
// it, through the mesh group's epoch (PeerGroup::SetHealthCheck). A model's
// stage code (e.g. tools/internal/hybrid_mlp.h) builds on the session's
// PeerGroup and hybrid_layout.h's tags and schedule.
// docs/hybrid_design.md describes the whole design, docs/hybrid.md its use.
//
// Example:
//   HybridOptions o;
//   o.worker.registry = "127.0.0.1:7070"; o.worker.job = "mlp";
//   o.worker.rank = r; o.worker.world_size = 8;       // global
//   o.config = {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4};
//   TESSEL_ASSIGN_OR_RETURN(auto session, HybridSession::Connect(o));
//   session->worker().RegisterLayout(partition_tensors, partition_init);
//   for (...) { /* 1F1B over micro-batches, then */ session->worker().Step(); }
//   session->Finish();
#ifndef TESSEL_WORKER_HYBRID_H_
#define TESSEL_WORKER_HYBRID_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/hybrid_layout.h"
#include "worker/peer_group.h"
#include "worker/worker.h"

namespace tessel {

class RegistryClient;      // rpc/registry_client.h
struct ClientCredentials;  // rpc/tls.h

// The partitions' strategy must be zero1 or zero2 (servers keep the master
// parameters and optimizer state); anything else is refused.
absl::Status ValidateHybridStrategy(Strategy strategy);

struct HybridOptions {
  // Registry, base job name, strategy (zero1 or zero2), optimizer, servers,
  // timeouts and UCX settings. rank and world_size are GLOBAL (0..dp*tp*pp-1
  // and dp*tp*pp): the session derives the partition job's rank (d) and world
  // size (dp). step_timeout is also the deadline of every peer wait.
  WorkerOptions worker;
  HybridConfig config;
  // Whatever else every process must agree on (model shape, batch, data and
  // init seeds): checked against rank 0's at start-up, with the config.
  std::string fingerprint;
  // false: Connect joins the mesh and checks the configuration but makes no
  // partition Worker; the caller makes its own (job PartitionJobName(job, p,
  // t), rank d of dp) and hands it to AttachWorker (tessel.torch.parallel does:
  // its DistributedOptimizer makes the worker after the model is built on the
  // mesh). With worker.resume, AttachWorker then does what Connect does for its
  // own worker: meets the survivors (a replacement) and agrees on the
  // checkpoint to resume from (Worker::SetResumeStep, before RegisterLayout).
  bool make_worker = true;
};

// Threads: one thread drives a session (as a Worker).
class HybridSession {
 public:
  static absl::StatusOr<std::unique_ptr<HybridSession>> Connect(const HybridOptions& options);
  ~HybridSession();

  const HybridConfig& config() const { return options_.config; }
  int rank() const { return options_.worker.rank; }
  const RankCoords& coords() const { return coords_; }
  std::string Describe() const { return DescribeRank(options_.config, rank()); }
  PeerGroup& peers() { return *peers_; }
  // The partition's Worker: job PartitionJobName(job, p, t), rank d of dp.
  // Only while there is one (made by Connect, or attached).
  Worker& worker() { return *worker_; }
  bool has_worker() const { return worker_ != nullptr; }
  // Whether this process joined a running job as a replacement (welcomed by
  // its survivors; worker.resume with worker.recovery).
  bool replacement() const { return replacement_; }
  // A mesh-only session's partition Worker (nullptr detaches it). It must
  // stay alive until detached or the session is gone; Recover, the health
  // check (a shard server lost) and Finish then use it as they use their own,
  // and its options().recovery says whether the session recovers. A session
  // connected with worker.resume resumes through the first worker attached
  // (see make_worker): attach it after Worker::Connect, before RegisterLayout.
  // FailedPrecondition on a session that made its own worker.
  absl::Status AttachWorker(Worker* worker);

  // Recovery (HybridOptions.worker.recovery, and checkpoints on the
  // partition jobs): when a shard server or a worker process dies, every
  // process's step fails with a status Worker::IsRecoverable() accepts (in
  // the partition job's Step(), or in a worker-to-worker wait, whose health
  // check also watches the servers and the mesh). Recover(why) then, on
  // every surviving process, in rounds (hybrid_recovery.cc):
  //   - renews its mesh endpoint if its receive queue is wedged (a process
  //     killed while writing into it), joining the mesh group again at the
  //     new address;
  //   - waits until every rank is in the mesh group (a lost one replaced:
  //     a process started with the same flags, its --rank and --resume);
  //   - starts the round's peer generation, {the mesh view's epoch, the
  //     round within it}: the same on every process acting on the same view,
  //     and nothing of the abandoned step or of an earlier round is ever
  //     received; the first survivor welcomes each new process with it;
  //   - meets every other process and agrees with them on the newest step
  //     whose checkpoint is complete in every partition job.
  // If the mesh's view moves meanwhile (another process replaced, or one
  // renewing its endpoint), the round is run again until the recovery
  // timeout. Then it rolls its partition back to the agreed step
  // (Worker::RecoverTo; each partition's replica 0 restores its shards).
  // Afterwards worker().step() is that step, the same on every process: the
  // training loop re-seeks its data there. A status that is not recoverable
  // is returned as it is.
  absl::Status Recover(const absl::Status& why);
  // How many times this process renewed its wedged mesh endpoint.
  int mesh_renewals() const { return mesh_renewals_; }

  // With HybridOptions.worker.resume, Connect has already agreed with every
  // process on the checkpoint step to resume from (the newest complete in
  // every partition job): RegisterLayout restores it.

  // Call after the last step: waits until every process got here (so nobody
  // leaves while a peer still needs its messages) and every send has left.
  // (From here on a member leaving the mesh is normal, so the membership
  // check below is turned off first.)
  absl::Status Finish();

 private:
  explicit HybridSession(const HybridOptions& options);
  absl::Status Start();
  absl::Status CheckSameConfig();
  // The peer waits' health check: Aborted, naming the ranks gone, once the
  // mesh group's epoch moved past the complete view's (a member left or its
  // lease lapsed), or this process's own lease is lost.
  absl::Status MeshHealth();
  // Whether failures pause for a recovery: the options', or the attached
  // worker's.
  bool recovery() const;
  // The mesh part of it (this process's lease, members gone or replaced),
  // also run by the partition Worker's waits: a step of this partition may
  // wait for a process of another one that died.
  absl::Status MeshMembership();
  // Collective: the newest step whose checkpoint is complete in every
  // partition job (each process sends its partition's list to rank 0, which
  // intersects and answers). FailedPrecondition, the same on every process,
  // if there is none.
  absl::StatusOr<int64_t> AgreeCheckpointStep();
  // Recover's first step: if the partition job or the mesh saw a member
  // leave, waits (until `deadline`) until the mesh registered it, so that a
  // view still listing the dead process is never taken for whole.
  absl::Status AwaitLossRegistered(absl::Time deadline);
  // Waits (until `deadline`) until every rank is in the mesh group, then
  // takes that view: peer endpoints of ranks at another address are remade,
  // mesh_epoch_ and incarnations_ are the view's. `newcomers` gets the
  // ranks whose process is not the one `before` named (a replacement; a
  // process that only renewed its endpoint keeps its incarnation).
  absl::Status AwaitWholeMesh(absl::Time deadline, const std::vector<std::string>& before,
                              std::vector<int>* newcomers);
  // Probes this process's mesh receive queue; if it is wedged, renews the
  // endpoint (PeerGroup::RenewEndpoint) and joins the mesh group again under
  // the new address (the same rank and incarnation).
  absl::Status RenewMeshIfWedged(absl::Time deadline);
  // A survivor's round at generation `next` (view and round): the first
  // survivor welcomes each newcomer with `next`, then the recovery barrier
  // and the checkpoint agreement. The agreed step.
  absl::StatusOr<int64_t> MeetRound(PeerGeneration next, const std::vector<int>& newcomers);
  // A newcomer's part (a replacement, welcomed in Start at the generation
  // it then Reset to): the recovery barrier and the checkpoint agreement; if
  // the mesh moves meanwhile, the next view and the next welcome, until
  // `deadline`. The agreed step.
  absl::StatusOr<int64_t> MeetAsNewcomer(absl::Time deadline);
  // Waits for a welcome of a later generation than this process's whose
  // view is not older than the one it holds (a stale welcomer's round is run
  // again), refreshing its view if the welcome's is newer, and Resets to its
  // generation: until `first` for any welcome, then (one came, but stale, or
  // the mesh moved meanwhile: a running job recovering) until `deadline`.
  // DeadlineExceeded if none fit.
  absl::StatusOr<PeerGroup::Message> AwaitWelcome(absl::Time first, absl::Time deadline);
  // After a failed round: whether the mesh's view moved past the round's
  // (another round can succeed), watching the registry for up to a few
  // heartbeats (a peer's send may fail before its re-join shows).
  bool MeshMoved(const absl::Status& failure, absl::Time deadline);
  std::string ConfigText() const;
  // Authenticates the mesh when the pool's servers authenticate data-path
  // frames: the mesh's secret from shard 0 (GetMeshKey, over the control
  // plane), handed to the PeerGroup. A member that holds the secret already
  // hands it back, so a restarted shard 0 keeps the running mesh's. Waits
  // for shard 0 (a restarting one) until `deadline`. Servers from before
  // mesh keys (UNIMPLEMENTED) leave the mesh unauthenticated.
  absl::Status KeyMesh(absl::Time deadline);
  // Every process of the mesh, at this generation: the survivors in Recover
  // and a newcomer in Start (or AttachWorker) meet here.
  absl::Status RecoveryBarrier();

  const HybridOptions options_;
  const RankCoords coords_;
  std::unique_ptr<RegistryClient> registry_;        // keeps the mesh membership's lease
  std::unique_ptr<ClientCredentials> credentials_;  // the control plane's, for KeyMesh
  std::string token_;
  std::string mesh_secret_;  // "" while the mesh is not authenticated
  int64_t mesh_epoch_ = 0;   // the mesh group's epoch once complete
  // Each rank's process (v1::Member.incarnation) in that view.
  std::vector<std::string> incarnations_;
  int mesh_renewals_ = 0;
  // In Recover(): the servers are expected to change, so the health check
  // does not look at them.
  bool recovering_ = false;
  std::unique_ptr<PeerGroup> peers_;
  std::unique_ptr<Worker> own_worker_;  // made by Start (make_worker)
  bool pending_resume_ = false;         // mesh-only with resume: done by AttachWorker
  bool replacement_ = false;            // welcomed into a running job
  Worker* worker_ = nullptr;            // own_worker_, or attached
};

}  // namespace tessel

#endif  // TESSEL_WORKER_HYBRID_H_
