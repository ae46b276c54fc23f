// HybridSession's recovery (worker/hybrid.h): the survivors' rounds, a
// replacement's welcome and meeting, a wedged mesh endpoint renewed in
// place, and the checkpoint every partition rolls back to.
#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/job_name.h"
#include "core/status_macros.h"
#include "rpc/registry_client.h"
#include "runtime/log.h"
#include "worker/collectives.h"
#include "worker/hybrid.h"

namespace tessel {
namespace {

// HybridMessage::kRecovery indexes: the checkpoint lists, the agreed step,
// and the welcome a newcomer receives.
constexpr int kListIndex = 1;
constexpr int kStepIndex = 2;
constexpr int kWelcomeIndex = 3;

uint64_t WelcomeTag() { return HybridTag(HybridMessage::kRecovery, 0, 0, kWelcomeIndex); }

// The generation of a survivors' round acting on the mesh view of `epoch`,
// from the generation `was` they were all at when the recovery began: the
// first round of a new view is its round 0; a recovery that leaves the view
// as it was (a shard server's death) is the next round of it.
PeerGeneration NextGeneration(PeerGeneration was, int64_t epoch) {
  const uint64_t e = static_cast<uint64_t>(epoch);
  if (e > was.epoch) return PeerGeneration{e, 0};
  return PeerGeneration{was.epoch, was.round + 1};
}

}  // namespace

absl::Status HybridSession::Recover(const absl::Status& why) {
  if (!recovery() || !Worker::IsRecoverable(why) || worker_ == nullptr) return why;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.worker.recovery_timeout;
  const int64_t from = worker_->step();
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  TESSEL_LOG(WARNING) << where << ": " << why.message() << "; recovering";
  recovering_ = true;
  struct Done {
    bool* flag;
    ~Done() { *flag = false; }
  } done{&recovering_};
  TESSEL_RETURN_IF_ERROR(AwaitLossRegistered(deadline));
  // Every survivor has been through the same recoveries: they start from the
  // same generation and the same processes.
  const PeerGeneration was = peers_->generation();
  const std::vector<std::string> before = incarnations_;
  int64_t step = -1;
  for (int round = 1;; ++round) {
    // A process killed while writing into this one's shared-memory mesh
    // queue wedges it for good (transport/transport.h): probed while the
    // others wait for a replacement, renewed in place.
    TESSEL_RETURN_IF_ERROR(RenewMeshIfWedged(deadline));
    // Every rank present: a lost one replaced.
    std::vector<int> newcomers;
    TESSEL_RETURN_IF_ERROR(AwaitWholeMesh(deadline, before, &newcomers));
    // The mesh's key stays what it was; shard 0 (perhaps a restarted one,
    // the source of a newcomer's key) is handed it back.
    if (!mesh_secret_.empty()) TESSEL_RETURN_IF_ERROR(KeyMesh(deadline));
    absl::StatusOr<int64_t> agreed = MeetRound(NextGeneration(was, mesh_epoch_), newcomers);
    if (agreed.ok()) {
      step = *agreed;
      break;
    }
    if (!MeshMoved(agreed.status(), deadline)) return agreed.status();
    TESSEL_LOG(WARNING) << where << ": the mesh changed during recovery round " << round << " ("
                        << agreed.status().message() << "); again with its next view";
  }
  // Every partition rolls back to the agreed checkpoint.
  TESSEL_RETURN_IF_ERROR(worker_->RecoverTo(step));
  TESSEL_LOG(WARNING) << where << ": recovered in "
                      << absl::FormatDuration(
                             absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
                      << ": every partition rolled back from step " << from
                      << " to the checkpoint of step " << step << " (peer generation "
                      << peers_->generation().ToString() << ")";
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HybridSession::MeetRound(PeerGeneration next,
                                                 const std::vector<int>& newcomers) {
  // From here on, nothing of the abandoned step (or of an earlier round) is
  // received. Every survivor acting on this view starts the same generation;
  // the first survivor hands it to each newcomer with a welcome. Meeting
  // every process also means each has stopped its step.
  peers_->Reset(next);
  int welcomer = 0;
  while (std::find(newcomers.begin(), newcomers.end(), welcomer) != newcomers.end()) ++welcomer;
  if (rank() == welcomer) {
    for (int r : newcomers)
      TESSEL_RETURN_IF_ERROR(peers_->SendBytes(r, WelcomeTag(), ConfigText()));
  }
  TESSEL_RETURN_IF_ERROR(RecoveryBarrier());
  // The newest step every partition job has a complete checkpoint of.
  return AgreeCheckpointStep();
}

absl::StatusOr<int64_t> HybridSession::MeetAsNewcomer(absl::Time deadline) {
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  for (;;) {
    absl::Status met = RecoveryBarrier();
    absl::StatusOr<int64_t> step = met.ok() ? AgreeCheckpointStep() : met;
    if (step.ok()) return step;
    if (!MeshMoved(step.status(), deadline)) return step.status();
    TESSEL_LOG(WARNING) << where << ": the mesh changed while joining the running job ("
                        << step.status().message() << "); waiting for its next view's welcome";
    TESSEL_RETURN_IF_ERROR(RenewMeshIfWedged(deadline));
    std::vector<int> ignored;
    TESSEL_RETURN_IF_ERROR(AwaitWholeMesh(deadline, incarnations_, &ignored));
    TESSEL_RETURN_IF_ERROR(AwaitWelcome(deadline, deadline).status());
  }
}

absl::StatusOr<PeerGroup::Message> HybridSession::AwaitWelcome(absl::Time first,
                                                               absl::Time deadline) {
  bool seen = false;
  for (;;) {
    const absl::Duration left = (seen ? deadline : first) - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "job '", options_.worker.job, "' ", Describe(),
          seen ? ": the running job's survivors did not welcome it at the mesh's current view"
               : ": nobody welcomed it into a running job"));
    }
    absl::StatusOr<PeerGroup::Message> welcome =
        peers_->RecvAny(WelcomeTag(), std::min(left, absl::Milliseconds(250)));
    if (!welcome.ok()) {
      if (!absl::IsDeadlineExceeded(welcome.status())) return welcome.status();
      if (absl::Status lease = registry_->lease_status(); !lease.ok()) return lease;
      // The mesh moved since this process saw it whole (another member lost
      // or replaced): a running job is recovering around it, whose welcomer
      // may not have seen a whole view yet. Wait for its welcome as for one
      // seen (a whole restart's processes have all joined by now).
      if (!seen && registry_->group_epoch() > mesh_epoch_) {
        TESSEL_LOG(WARNING) << "job '" << options_.worker.job << "' " << Describe()
                            << ": the mesh changed while it waited for a welcome: a running job is "
                               "recovering; waiting for its welcome up to the recovery timeout";
        seen = true;
      }
      continue;
    }
    seen = true;
    // Of a round this process has left already, or from a survivor that
    // acted on an older view than this process holds (its round fails and
    // runs again with the view this one has).
    if (welcome->generation <= peers_->generation()) continue;
    if (welcome->generation.epoch < static_cast<uint64_t>(mesh_epoch_)) continue;
    if (welcome->generation.epoch > static_cast<uint64_t>(mesh_epoch_)) {
      std::vector<int> ignored;
      TESSEL_RETURN_IF_ERROR(AwaitWholeMesh(deadline, incarnations_, &ignored));
      if (welcome->generation.epoch != static_cast<uint64_t>(mesh_epoch_)) continue;
    }
    peers_->Reset(welcome->generation);
    return welcome;
  }
}

bool HybridSession::MeshMoved(const absl::Status& failure, absl::Time deadline) {
  // The checkpoint agreement's verdict, or a misconfiguration: the same in
  // any view.
  if (absl::IsFailedPrecondition(failure) || absl::IsInvalidArgument(failure)) return false;
  const std::string group = MeshGroupName(options_.worker.job);
  const absl::Time until =
      std::min(deadline, absl::Now() + std::max(absl::Seconds(2), 2 * options_.worker.lease_ttl));
  for (;;) {
    if (registry_->group_epoch() > mesh_epoch_) return true;
    absl::StatusOr<v1::View> view = registry_->GetView(group);
    if (view.ok() && view->epoch() > mesh_epoch_) return true;
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::Status HybridSession::RenewMeshIfWedged(absl::Time deadline) {
  absl::Status queue = peers_->CheckReceiveQueue(kReceiveQueueProbeTimeout);
  if (queue.ok()) return absl::OkStatus();
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  const std::string group = MeshGroupName(options_.worker.job);
  TESSEL_LOG(WARNING) << where << ": " << queue.message()
                      << "; renewing its mesh endpoint and joining group '" << group
                      << "' again under the new address";
  TESSEL_RETURN_IF_ERROR(peers_->RenewEndpoint());
  absl::Status joined = RejoinMesh(registry_.get(), group, rank(), peers_->address(),
                                   std::max(absl::Seconds(1), deadline - absl::Now()));
  if (!joined.ok()) {
    return absl::Status(joined.code(), absl::StrCat(where, ": ", joined.message()));
  }
  ++mesh_renewals_;
  TESSEL_LOG(WARNING) << where << ": mesh endpoint renewed (" << mesh_renewals_
                      << " so far); the others reconnect to it";
  return absl::OkStatus();
}

absl::Status HybridSession::RecoveryBarrier() {
  std::vector<int> all(options_.worker.world_size);
  for (int r = 0; r < options_.worker.world_size; ++r) all[r] = r;
  return Barrier(*peers_, all, HybridTag(HybridMessage::kRecovery, 0, 0, 0),
                 "the recovery barrier (every process stopped its step)");
}

absl::Status HybridSession::AwaitLossRegistered(absl::Time deadline) {
  // A lost process shows in the partition job or in the mesh first,
  // whichever lease lapsed first: wait until the mesh has it too, so that
  // an old view (the dead member still listed) is never taken for whole.
  if (worker_->CheckMembers().ok() && registry_->group_epoch() <= mesh_epoch_) {
    return absl::OkStatus();
  }
  while (registry_->group_epoch() <= mesh_epoch_) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("job '", options_.worker.job, "' ", Describe(),
                       ": a worker of its partition job left, but the mesh group '",
                       MeshGroupName(options_.worker.job),
                       "' did not register it within the recovery timeout; "
                       "giving up"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::OkStatus();
}

absl::Status HybridSession::AwaitWholeMesh(absl::Time deadline,
                                           const std::vector<std::string>& before,
                                           std::vector<int>* newcomers) {
  const std::string where = absl::StrCat("job '", options_.worker.job, "' ", Describe());
  const std::string group = MeshGroupName(options_.worker.job);
  const int world = options_.worker.world_size;
  bool logged = false;
  for (;;) {
    absl::Status lease = registry_->lease_status();
    if (!lease.ok()) {
      return absl::AbortedError(absl::StrCat(where, ": this process lost its mesh membership (",
                                             lease.message(), ") while recovering; exiting"));
    }
    absl::StatusOr<v1::View> view = registry_->GetView(group);
    std::vector<std::string> addresses(world), incarnations(world);
    std::vector<std::string> missing;
    if (view.ok()) {
      for (const v1::Member& m : view->members()) {
        if (m.role() == v1::ROLE_WORKER && m.rank() >= 0 && m.rank() < world) {
          addresses[m.rank()] = m.ucx_address();
          incarnations[m.rank()] = m.incarnation();
        }
      }
      for (int r = 0; r < world; ++r) {
        if (addresses[r].empty()) missing.push_back(DescribeRank(options_.config, r));
      }
    }
    if (view.ok() && missing.empty()) {
      const std::vector<std::string> was = peers_->addresses();
      newcomers->clear();
      std::vector<std::string> replaced, renewed;
      for (int r = 0; r < world; ++r) {
        // Members registered without an incarnation (an older build): a new
        // address is a new process.
        const bool known =
            r < static_cast<int>(before.size()) && !before[r].empty() && !incarnations[r].empty();
        const bool moved = addresses[r] != was[r];
        if (known ? incarnations[r] != before[r] : moved) {
          newcomers->push_back(r);
          if (moved) replaced.push_back(DescribeRank(options_.config, r));
        } else if (moved && r != rank()) {
          renewed.push_back(DescribeRank(options_.config, r));
        }
      }
      peers_->UpdateAddresses(addresses);
      incarnations_ = std::move(incarnations);
      mesh_epoch_ = view->epoch();
      if (!replaced.empty()) {
        TESSEL_LOG(WARNING) << where << ": " << absl::StrJoin(replaced, ", ")
                            << " replaced; the mesh is whole again at epoch " << mesh_epoch_;
      }
      if (!renewed.empty()) {
        TESSEL_LOG(WARNING) << where << ": " << absl::StrJoin(renewed, ", ")
                            << " renewed its mesh endpoint; reconnecting (epoch " << mesh_epoch_
                            << ")";
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
  const uint64_t list_tag = HybridTag(HybridMessage::kRecovery, 0, 0, kListIndex);
  const uint64_t step_tag = HybridTag(HybridMessage::kRecovery, 0, 0, kStepIndex);
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

}  // namespace tessel
