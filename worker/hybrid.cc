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
namespace {

// HybridMessage::kRecovery index of the welcome a replacement receives.
constexpr int kWelcomeIndex = 3;

}  // namespace

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
  TESSEL_RETURN_IF_ERROR(peers_->Connect(mesh->addresses));
  peers_->SetHealthCheck([this] { return MeshHealth(); });
  // With --resume this process either replaces one a running job lost (its
  // peers, recovering, welcome it with their generation and configuration)
  // or is one of a whole job restarting (nobody welcomes it).
  bool replacement = false;
  if (w.resume && w.recovery) {
    const absl::Duration grace = std::max(absl::Seconds(5), 2 * w.lease_ttl);
    absl::StatusOr<PeerGroup::Message> welcome =
        peers_->RecvAny(HybridTag(HybridMessage::kRecovery, 0, 0, kWelcomeIndex), grace);
    if (welcome.ok()) {
      const std::string& theirs = welcome->bytes;
      if (theirs != ConfigText()) {
        return absl::FailedPreconditionError(
            absl::StrCat("job '", w.job, "': ", Describe(), " was started with '", ConfigText(),
                         "' but ", DescribeRank(config, welcome->from), " runs with '", theirs,
                         "': start the replacement with the job's flags"));
      }
      peers_->Reset(welcome->generation);
      replacement = true;
      TESSEL_LOG(WARNING) << "job '" << w.job << "' " << Describe()
                          << ": joins the running job as a replacement (welcomed by "
                          << DescribeRank(config, welcome->from) << ", peer generation "
                          << welcome->generation << ")";
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
    if (replacement) {  // meets the survivors in Recover
      TESSEL_RETURN_IF_ERROR(RecoveryBarrier());
    }
    TESSEL_ASSIGN_OR_RETURN(int64_t step, AgreeCheckpointStep());
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

absl::Status HybridSession::Recover(const absl::Status& why) {
  if (!recovery() || !Worker::IsRecoverable(why) || worker_ == nullptr) return why;
  const absl::Time start = absl::Now();
  const int64_t from = worker_->step();
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  TESSEL_LOG(WARNING) << where << ": " << why.message() << "; recovering";
  recovering_ = true;
  struct Done {
    bool* flag;
    ~Done() { *flag = false; }
  } done{&recovering_};
  // 0. Every process present: a lost one replaced. (A shard server's death
  // leaves the mesh as it was.)
  std::vector<int> replaced;
  TESSEL_RETURN_IF_ERROR(AwaitWholeMesh(start + options_.worker.recovery_timeout, &replaced));
  // A process killed while writing into this one's shared-memory mesh queue
  // wedges it for good (transport/transport.h). Renewing the mesh endpoint
  // in place is not built for hybrid jobs (peers would take the new address
  // for a replacement): say so now rather than time out in the barrier.
  if (absl::Status s = peers_->CheckReceiveQueue(absl::Seconds(3)); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": the worker-to-worker (mesh) endpoint cannot recover in place: ", s.message(),
        ". Restart the whole job with --resume (it goes on from the newest checkpoint)"));
  }
  // The mesh's key stays what it was; shard 0 (perhaps a restarted one, the
  // source of a replacement's key) is handed it back.
  if (!mesh_secret_.empty()) {
    TESSEL_RETURN_IF_ERROR(KeyMesh(start + options_.worker.recovery_timeout));
  }
  // 1. A new generation: from here on, nothing of the abandoned step is
  // received. Every survivor has been through the same recoveries, so they
  // agree on it; the first survivor hands it to each replacement with a
  // welcome (HybridSession::Start). Meeting every process also means each
  // has stopped its step.
  peers_->Reset(peers_->generation() + 1);
  int welcomer = 0;
  while (std::find(replaced.begin(), replaced.end(), welcomer) != replaced.end()) ++welcomer;
  if (rank() == welcomer) {
    for (int r : replaced) {
      TESSEL_RETURN_IF_ERROR(peers_->SendBytes(
          r, HybridTag(HybridMessage::kRecovery, 0, 0, kWelcomeIndex), ConfigText()));
    }
  }
  TESSEL_RETURN_IF_ERROR(RecoveryBarrier());
  // 2. The newest step every partition job has a complete checkpoint of.
  TESSEL_ASSIGN_OR_RETURN(int64_t step, AgreeCheckpointStep());
  // 3. Every partition rolls back to it.
  TESSEL_RETURN_IF_ERROR(worker_->RecoverTo(step));
  TESSEL_LOG(WARNING) << where << ": recovered in "
                      << absl::FormatDuration(
                             absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
                      << ": every partition rolled back from step " << from
                      << " to the checkpoint of step " << step << " (peer generation "
                      << peers_->generation() << ")";
  return absl::OkStatus();
}

absl::Status HybridSession::RecoveryBarrier() {
  std::vector<int> all(options_.worker.world_size);
  for (int r = 0; r < options_.worker.world_size; ++r) all[r] = r;
  return Barrier(*peers_, all, HybridTag(HybridMessage::kRecovery, 0, 0, 0),
                 "the recovery barrier (every process stopped its step)");
}

absl::Status HybridSession::AwaitWholeMesh(absl::Time deadline, std::vector<int>* replaced) {
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  const std::string group = MeshGroupName(options_.worker.job);
  const int world = options_.worker.world_size;
  // A lost process shows in the partition job or in the mesh first,
  // whichever lease lapsed first: wait until the mesh has it too, so that
  // an old view (the dead member still listed) is never taken for whole.
  if (!worker_->CheckMembers().ok() || registry_->group_epoch() > mesh_epoch_) {
    while (registry_->group_epoch() <= mesh_epoch_) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": a worker of its partition job left, but the mesh group '", group,
                         "' did not register it within the recovery timeout; giving up"));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  bool logged = false;
  for (;;) {
    absl::Status lease = registry_->lease_status();
    if (!lease.ok()) {
      return absl::AbortedError(absl::StrCat(where, ": this process lost its mesh membership (",
                                             lease.message(), ") while recovering; exiting"));
    }
    absl::StatusOr<v1::View> view = registry_->GetView(group);
    std::vector<std::string> addresses(world);
    std::vector<std::string> missing;
    if (view.ok()) {
      for (const v1::Member& m : view->members()) {
        if (m.role() == v1::ROLE_WORKER && m.rank() >= 0 && m.rank() < world) {
          addresses[m.rank()] = m.ucx_address();
        }
      }
      for (int r = 0; r < world; ++r) {
        if (addresses[r].empty()) missing.push_back(DescribeRank(options_.config, r));
      }
    }
    if (view.ok() && missing.empty()) {
      const std::vector<std::string> before = peers_->addresses();
      replaced->clear();
      for (int r = 0; r < world; ++r) {
        if (addresses[r] != before[r]) replaced->push_back(r);
      }
      peers_->UpdateAddresses(addresses);
      mesh_epoch_ = view->epoch();
      if (!replaced->empty()) {
        std::vector<std::string> names;
        for (int r : *replaced) names.push_back(DescribeRank(options_.config, r));
        TESSEL_LOG(WARNING) << where << ": " << absl::StrJoin(names, ", ")
                            << " replaced; the mesh is whole again at epoch " << mesh_epoch_;
      }
      return absl::OkStatus();
    }
    const std::string what =
        view.ok() ? absl::StrCat(absl::StrJoin(missing, ", "),
                                 " (start a replacement with the same flags, its --rank and "
                                 "--resume)")
                  : absl::StrCat("the registry (", view.status().message(), ")");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          where, ": ", what, " did not return within ",
          absl::FormatDuration(options_.worker.recovery_timeout),
          " (--recovery_timeout_s); giving up. Restart every process of the job with --resume"));
    }
    if (!logged) {
      TESSEL_LOG(WARNING) << where << ": paused; waiting for " << what;
      logged = true;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::StatusOr<int64_t> HybridSession::AgreeCheckpointStep() {
  const int world = options_.worker.world_size;
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  absl::StatusOr<std::vector<int64_t>> mine = worker_->CompleteCheckpointSteps();
  const std::string listed = mine.ok() ? absl::StrJoin(*mine, ",") : std::string("!");
  const uint64_t list_tag = HybridTag(HybridMessage::kRecovery, 0, 0, 1);
  const uint64_t step_tag = HybridTag(HybridMessage::kRecovery, 0, 0, 2);
  std::string chosen;
  if (rank() == 0) {
    std::vector<int64_t> common = mine.ok() ? *mine : std::vector<int64_t>();
    std::string why_none = mine.ok() ? std::string() : std::string(mine.status().message());
    for (int r = 1; r < world; ++r) {
      TESSEL_ASSIGN_OR_RETURN(std::string theirs,
                              peers_->RecvBytes(r, list_tag, "its partition's checkpoint list"));
      const std::string& text = theirs;
      std::vector<int64_t> steps;
      for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
        int64_t v = 0;
        if (absl::SimpleAtoi(part, &v)) steps.push_back(v);
      }
      if (text == "!") {
        why_none = absl::StrCat(DescribeRank(options_.config, r),
                                " could not list its partition's checkpoints");
      }
      std::vector<int64_t> both;
      std::set_intersection(common.begin(), common.end(), steps.begin(), steps.end(),
                            std::back_inserter(both));
      common = std::move(both);
    }
    chosen = common.empty() ? absl::StrCat("none", why_none.empty() ? "" : ": ", why_none)
                            : absl::StrCat(common.back());
  } else {
    TESSEL_RETURN_IF_ERROR(peers_->SendBytes(0, list_tag, listed));
  }
  std::vector<int> everyone(world);
  for (int r = 0; r < world; ++r) everyone[r] = r;
  TESSEL_RETURN_IF_ERROR(Broadcast(*peers_, everyone, 0, step_tag, &chosen, "the checkpoint step"));
  int64_t step = -1;
  if (!absl::SimpleAtoi(chosen, &step)) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": no step has a complete checkpoint in every partition job (", chosen,
        "). Checkpoints need --checkpoint_every_steps (and --checkpoint_initial), servers "
        "sharing one --checkpoint_dir, and --keep_checkpoints >= 3"));
  }
  return step;
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
  if (replacement_) {  // meets the survivors in Recover
    TESSEL_RETURN_IF_ERROR(RecoveryBarrier());
  }
  TESSEL_ASSIGN_OR_RETURN(int64_t step, AgreeCheckpointStep());
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
