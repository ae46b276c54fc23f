#include "worker/hybrid.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/job_name.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "rpc/tls.h"
#include "rpc/token_env.h"
#include "runtime/frame_auth.h"
#include "runtime/log.h"
#include "worker/collectives.h"
#include "worker/internal/make_transport.h"

namespace tessel {
absl::Status ValidateHybridStrategy(Strategy strategy) {
  if (strategy == Strategy::kZero1 || strategy == Strategy::kZero2) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "hybrid partitions reduce through the shard servers with strategy zero1 or zero2; got ",
      StrategyName(strategy), ": use --strategy=zero2 (or zero1)"));
}

absl::StatusOr<std::unique_ptr<HybridSession>> HybridSession::Connect(
    const HybridOptions& options) {
  const WorkerOptions& w = options.worker;
  if (w.registry.empty())
    return absl::InvalidArgumentError("HybridOptions.worker.registry is empty");
  if (w.job.empty()) return absl::InvalidArgumentError("HybridOptions.worker.job is empty");
  TESSEL_RETURN_IF_ERROR(ValidateHybridConfig(options.config, w.world_size));
  if (w.rank < 0 || w.rank >= w.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", w.rank, " is outside [0, ", w.world_size, ")"));
  }
  TESSEL_RETURN_IF_ERROR(ValidateHybridStrategy(w.strategy));
  std::unique_ptr<HybridSession> session(new HybridSession(options));
  TESSEL_RETURN_IF_ERROR(session->Start());
  return session;
}

HybridSession::HybridSession(const HybridOptions& options)
    : options_(options), coords_(CoordsOf(options.config, options.worker.rank)) {}

HybridSession::~HybridSession() {
  worker_ = nullptr;
  own_worker_.reset();
  if (peers_ != nullptr) peers_->Shutdown();
  if (registry_ != nullptr) {
    if (absl::Status s = registry_->Leave(); !s.ok()) {
      TESSEL_LOG(WARNING) << "job '" << options_.worker.job << "' " << Describe()
                          << ": leaving the mesh group failed (its lease lapses on its own): " << s;
    }
  }
}

absl::Status HybridSession::Start() {
  const WorkerOptions& w = options_.worker;
  const HybridConfig config = options_.config;
  TESSEL_ASSIGN_OR_RETURN(auto credentials, LoadClientCredentials(w.tls));
  TESSEL_ASSIGN_OR_RETURN(auto transport, internal::MakeTransport(w));
  PeerGroupOptions po;
  po.name = MeshGroupName(w.job);
  po.timeout = w.step_timeout;
  po.describe = [config](int r) { return DescribeRank(config, r); };
  peers_ = std::make_unique<PeerGroup>(std::move(transport), w.rank, w.world_size, po);

  // The worker's token: registries with member credentials ask for it.
  TESSEL_ASSIGN_OR_RETURN(std::string token, PresentedToken(w.token));
  registry_ = std::make_unique<RegistryClient>(w.registry, credentials, token);
  credentials_ = std::make_unique<ClientCredentials>(credentials);
  token_ = token;
  // Keyed before anyone learns this process's mesh address: no message is
  // ever taken unauthenticated where the servers authenticate theirs.
  TESSEL_RETURN_IF_ERROR(KeyMesh(absl::Now() + w.connect_timeout));
  // A replacement waits for its dead predecessor's lease to lapse.
  absl::StatusOr<MeshView> mesh =
      JoinMesh(registry_.get(), po.name, w.rank, w.world_size, peers_->address(), w.connect_timeout,
               /*wait_for_rank=*/w.resume && w.recovery);
  if (!mesh.ok()) {
    return absl::Status(mesh.status().code(), absl::StrCat("job '", w.job, "' ", Describe(), ": ",
                                                           mesh.status().message()));
  }
  mesh_epoch_ = mesh->epoch;
  incarnations_ = mesh->incarnations;
  TESSEL_RETURN_IF_ERROR(peers_->Connect(mesh->addresses));
  peers_->SetHealthCheck([this] { return MeshHealth(); });
  // With --resume this process either replaces one a running job lost (its
  // peers, recovering, welcome it with their generation and configuration)
  // or is one of a whole job restarting (nobody welcomes it).
  bool replacement = false;
  if (w.resume && w.recovery) {
    const absl::Duration grace = std::max(absl::Seconds(5), 2 * w.lease_ttl);
    absl::StatusOr<PeerGroup::Message> welcome =
        AwaitWelcome(absl::Now() + grace, absl::Now() + w.recovery_timeout);
    if (!welcome.ok() && !absl::IsDeadlineExceeded(welcome.status())) return welcome.status();
    if (welcome.ok()) {
      const std::string& theirs = welcome->bytes;
      if (theirs != ConfigText()) {
        return absl::FailedPreconditionError(
            absl::StrCat("job '", w.job, "': ", Describe(), " was started with '", ConfigText(),
                         "' but ", DescribeRank(config, welcome->from), " runs with '", theirs,
                         "': start the replacement with the job's flags"));
      }
      replacement = true;
      TESSEL_LOG(WARNING) << "job '" << w.job << "' " << Describe()
                          << ": joins the running job as a replacement (welcomed by "
                          << DescribeRank(config, welcome->from) << ", peer generation "
                          << welcome->generation.ToString() << ")";
    }
  }
  if (!replacement) {
    TESSEL_RETURN_IF_ERROR(CheckSameConfig());
  }
  replacement_ = replacement;
  if (!options_.make_worker) {
    // The checkpoint agreement needs the partition's worker: AttachWorker.
    pending_resume_ = w.resume;
    TESSEL_LOG(INFO) << "job '" << w.job << "' " << Describe() << ": mesh of " << w.world_size
                     << " connected (the partition worker is attached later)";
    return absl::OkStatus();
  }

  WorkerOptions partition = w;
  partition.job = PartitionJobName(w.job, coords_.p, coords_.t);
  partition.rank = coords_.d;
  partition.world_size = config.dp;
  // The partitions roll back together (their mesh messages of the step in
  // flight cannot be replayed to one replacement): no rejoin in place.
  partition.rejoin_in_place = false;
  absl::StatusOr<std::unique_ptr<Worker>> worker = Worker::Connect(partition);
  if (!worker.ok()) {
    return absl::Status(worker.status().code(),
                        absl::StrCat(Describe(), ": partition job '", partition.job,
                                     "': ", worker.status().message()));
  }
  own_worker_ = std::move(*worker);
  worker_ = own_worker_.get();
  worker_->SetWaitCheck([this] { return MeshMembership(); });
  if (w.resume) {
    // A replacement meets the survivors (in their Recover); a whole job
    // restarting meets itself.
    TESSEL_ASSIGN_OR_RETURN(int64_t step, replacement
                                              ? MeetAsNewcomer(absl::Now() + w.recovery_timeout)
                                              : AgreeCheckpointStep());
    worker_->SetResumeStep(step);
    TESSEL_LOG(INFO) << "job '" << w.job << "' " << Describe()
                     << ": every partition resumes from the checkpoint of step " << step;
  }
  TESSEL_LOG(INFO) << "job '" << w.job << "' " << Describe() << ": mesh of " << w.world_size
                   << " connected; partition job '" << partition.job << "' as rank " << coords_.d
                   << " of " << config.dp;
  return absl::OkStatus();
}

absl::Status HybridSession::KeyMesh(absl::Time deadline) {
  const WorkerOptions& w = options_.worker;
  const std::string where = absl::StrCat("job '", w.job, "' ", Describe());
  const std::string mesh = MeshGroupName(w.job);
  auto has_shard0 = [](const v1::View& v) {
    for (const auto& m : v.members()) {
      if (m.role() == v1::ROLE_SERVER && m.rank() == 0) return true;
    }
    return false;
  };
  absl::Status last;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    auto pool = registry_->WaitForView(w.server_pool, has_shard0, left);
    if (!pool.ok()) {
      last = pool.status();
      break;
    }
    ShardFleet fleet(ControlOptions{*credentials_, token_});
    fleet.ConnectView(*pool);
    v1::MeshKeyRequest req;
    req.set_mesh(mesh);
    req.set_keep(mesh_secret_);
    v1::FrameKeyResponse resp;
    last = fleet.Call(0, &v1::ShardServer::Stub::GetMeshKey, req, &resp,
                      absl::StrCat("GetMeshKey (the key of mesh '", mesh, "')"));
    if (absl::IsUnimplemented(last)) {
      TESSEL_LOG(WARNING) << where << ": shard server 0 predates mesh keys (" << last.message()
                          << "); worker-to-worker messages go unauthenticated";
      return absl::OkStatus();
    }
    if (last.ok()) {
      if (resp.secret().empty() || resp.secret() == mesh_secret_) return absl::OkStatus();
      absl::StatusOr<std::shared_ptr<FrameAuth>> auth =
          FrameAuth::Create(resp.secret(), JobId(mesh), /*shard=*/-1);
      if (!auth.ok()) {
        return absl::InternalError(
            absl::StrCat(where, ": shard server 0's mesh key: ", auth.status().message()));
      }
      mesh_secret_ = resp.secret();
      peers_->SetAuth(*std::move(auth));
      TESSEL_LOG(INFO) << where << ": worker-to-worker messages authenticated (mesh '" << mesh
                       << "', key from shard server 0)";
      return absl::OkStatus();
    }
    // A restarting server, or one not reachable yet: try again.
    if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::Status(
      last.ok() ? absl::StatusCode::kDeadlineExceeded : last.code(),
      absl::StrCat(where, ": cannot get the mesh's key from shard server 0 of pool '",
                   w.server_pool, "': ", last.ok() ? "timed out" : last.message()));
}

std::string HybridSession::ConfigText() const {
  const HybridConfig& c = options_.config;
  return absl::StrCat("dp=", c.dp, " tp=", c.tp, " pp=", c.pp, " micro_batches=", c.micro_batches,
                      " strategy=", StrategyName(options_.worker.strategy), " ",
                      options_.fingerprint);
}

absl::Status HybridSession::CheckSameConfig() {
  const HybridConfig& c = options_.config;
  const std::string mine = ConfigText();
  const int world = options_.worker.world_size;
  if (world == 1) return absl::OkStatus();
  const uint64_t tag = HybridTag(HybridMessage::kConfig, 0, 0, 0);
  auto differs = [&](int other, const std::string& theirs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", options_.worker.job, "': ", Describe(), " was started with '", mine, "' but ",
        DescribeRank(c, other), " with '", theirs, "': start every process with the same flags"));
  };
  std::vector<int> everyone(world);
  for (int r = 0; r < world; ++r) everyone[r] = r;
  TESSEL_ASSIGN_OR_RETURN(
      std::vector<std::string> all,
      AllGather(*peers_, everyone, tag, mine, "the configuration check at start-up"));
  // Rank 0 names the first process that differs; the others compare with it.
  for (int r = rank() == 0 ? 1 : 0; r < (rank() == 0 ? world : 1); ++r) {
    if (all[r] != mine) return differs(r, all[r]);
  }
  return absl::OkStatus();
}

absl::Status HybridSession::MeshHealth() {
  // A shard server that left or came back ends worker-to-worker waits too:
  // a process whose step went through may wait for one whose step failed.
  if (recovery() && !recovering_ && worker_ != nullptr) {
    TESSEL_RETURN_IF_ERROR(worker_->CheckServers());
  }
  return MeshMembership();
}

absl::Status HybridSession::MeshMembership() {
  absl::Status lease = registry_->lease_status();
  if (!lease.ok()) {
    return absl::AbortedError(absl::StrCat("job '", options_.worker.job, "' ", Describe(),
                                           ": this process lost its mesh membership (",
                                           lease.message(), ")"));
  }
  const int64_t now = registry_->group_epoch();
  if (now <= mesh_epoch_) return absl::OkStatus();
  const std::string group = MeshGroupName(options_.worker.job);
  std::vector<std::string> gone;
  absl::StatusOr<v1::View> view = registry_->GetView(group);
  for (int r = 0; r < options_.worker.world_size && view.ok(); ++r) {
    bool present = false;
    for (const v1::Member& m : view->members()) present = present || m.rank() == r;
    if (!present) gone.push_back(DescribeRank(options_.config, r));
  }
  const std::string who = gone.empty() ? std::string("the mesh membership changed")
                                       : absl::StrCat(absl::StrJoin(gone, ", "),
                                                      " left the mesh or stopped heartbeating");
  if (recovery() && worker_ != nullptr) {
    return Worker::MarkRecoverable(absl::AbortedError(absl::StrCat(
        "job '", options_.worker.job, "' ", Describe(), ": ", who, " (group '", group, "' epoch ",
        mesh_epoch_, " -> ", now, "); pausing for up to ",
        absl::FormatDuration(options_.worker.recovery_timeout),
        " until a replacement joins (start it with the same flags, its --rank and --resume; "
        "tessel-launch --max_restarts does for tessel.torch), "
        "then rolling every partition back to a common checkpoint")));
  }
  return absl::AbortedError(absl::StrCat(
      "job '", options_.worker.job, "' ", Describe(), ": ", who, " (group '", group, "' epoch ",
      mesh_epoch_, " -> ", now,
      "); the step cannot complete. Recovery is off (--recover): restart every process of the "
      "job with --resume (it goes on from the newest checkpoint complete in every partition; "
      "needs --checkpoint_every_steps)"));
}

bool HybridSession::recovery() const {
  return own_worker_ != nullptr || worker_ == nullptr ? options_.worker.recovery
                                                      : worker_->options().recovery;
}

absl::Status HybridSession::AttachWorker(Worker* worker) {
  if (own_worker_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", options_.worker.job, "' ", Describe(),
                     ": this session made its own partition worker; it takes no other"));
  }
  if (worker_ != nullptr) worker_->SetWaitCheck(nullptr);
  worker_ = worker;
  if (worker_ == nullptr) return absl::OkStatus();
  worker_->SetWaitCheck([this] { return MeshMembership(); });
  if (!pending_resume_) return absl::OkStatus();
  pending_resume_ = false;
  // A replacement meets the survivors (in their Recover).
  TESSEL_ASSIGN_OR_RETURN(
      int64_t step, replacement_ ? MeetAsNewcomer(absl::Now() + worker_->options().recovery_timeout)
                                 : AgreeCheckpointStep());
  worker_->SetResumeStep(step);
  TESSEL_LOG(INFO) << "job '" << options_.worker.job << "' " << Describe()
                   << ": every partition resumes from the checkpoint of step " << step;
  return absl::OkStatus();
}

absl::Status HybridSession::Finish() {
  // Everyone who passes the barrier below may leave; everyone still in it
  // has already turned this off (they entered the barrier before anyone
  // could pass it).
  peers_->SetHealthCheck(nullptr);
  if (worker_ != nullptr) worker_->SetWaitCheck(nullptr);
  std::vector<int> all(options_.worker.world_size);
  for (int r = 0; r < options_.worker.world_size; ++r) all[r] = r;
  absl::Status s = Barrier(*peers_, all, HybridTag(HybridMessage::kBarrier, 0, 0, 0),
                           "the final barrier (every process done)");
  absl::Status f = peers_->Flush();
  return s.ok() ? f : s;
}

}  // namespace tessel
