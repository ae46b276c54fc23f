// Membership's recovery side (worker/internal/membership.h): taking the
// rank again after a lapsed lease (Rejoin), waiting until every rank and
// shard is back (WaitForComplete, or enough survivors when elastic),
// reconnecting restarted servers, and adopting the workers that go on.
#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "worker/internal/membership.h"

namespace tessel::internal {

absl::Status Membership::Rejoin() {
  if (registry_->lease_status().ok()) return absl::OkStatus();
  // Declared dead while paused or cut off: take the rank again if it is free.
  auto joined = registry_->Join(Me(), ctx_->options.lease_ttl);
  const absl::StatusCode code = joined.status().code();
  if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
      code == absl::StatusCode::kAborted || code == absl::StatusCode::kUnknown) {
    // The registry is unreachable or restarting: no verdict yet. Recovery
    // tries again until its timeout.
    return ctx_->Recoverable(absl::UnavailableError(absl::StrCat(
        ctx_->Where(), ": this worker's registry lease lapsed and joining again failed (",
        joined.status().message(), "); trying again")));
  }
  if (code == absl::StatusCode::kAlreadyExists) {
    // Held by this very process: a join of ours whose answer was lost (cut
    // off mid-call). Nobody renews it, so it lapses within a lease.
    auto view = registry_->GetView(ctx_->options.job);
    bool ours = false;
    if (view.ok()) {
      for (const auto& m : view->members()) {
        ours = ours || (m.role() == v1::ROLE_WORKER && m.rank() == ctx_->id &&
                        m.ucx_address() == registered_address_);
      }
    }
    if (ours) {
      return ctx_->Recoverable(absl::UnavailableError(absl::StrCat(
          ctx_->Where(), ": rank ", ctx_->id,
          " is held by an earlier join of this process whose answer was lost; it lapses within "
          "a lease, trying again")));
    }
  }
  if (!joined.ok()) {
    return absl::AbortedError(absl::StrCat(
        ctx_->Where(),
        ": this worker's registry lease lapsed (it was paused or cut off for longer "
        "than the lease ttl) and rank ",
        ctx_->id, " cannot be re-joined (", joined.status().message(), ")",
        code == absl::StatusCode::kAlreadyExists ? ": a replacement has taken over" : "",
        ". Exiting"));
  }
  ctx_->member_epoch = registry_->joined_epoch();
  TESSEL_LOG(WARNING) << ctx_->Where() << ": the registry lease had lapsed; re-joined as rank "
                      << ctx_->id;
  return absl::OkStatus();
}

absl::Status Membership::WaitForComplete(absl::Time deadline, absl::Time elastic_at,
                                         std::vector<int>* ids) {
  const WorkerOptions& o = ctx_->options;
  bool logged = false;
  for (;;) {
    TESSEL_RETURN_IF_ERROR(Rejoin());
    auto job = registry_->GetView(o.job);
    auto pool = registry_->GetView(o.server_pool);
    std::string missing;
    if (job.ok() && pool.ok()) {
      TESSEL_ASSIGN_OR_RETURN(const bool complete,
                              LookForComplete(*job, *pool, elastic_at, ids, &missing));
      if (complete) {
        view_epoch_ = job->epoch();
        Remember(*job);
        return Reconnect(*pool);
      }
    } else {
      missing = absl::StrCat("the registry at ", o.registry, " (",
                             (job.ok() ? pool.status() : job.status()).message(), ")");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(ctx_->Where(), ": ", missing, " did not return within ",
                       absl::FormatDuration(o.recovery_timeout), " (recovery_timeout); giving up"));
    }
    if (!logged) {
      TESSEL_LOG(WARNING) << ctx_->Where() << ": paused; waiting for " << missing;
      logged = true;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::StatusOr<bool> Membership::LookForComplete(const v1::View& job, const v1::View& pool,
                                                 absl::Time elastic_at, std::vector<int>* ids,
                                                 std::string* missing) {
  const WorkerOptions& o = ctx_->options;
  std::vector<std::string> ranks, gone;
  std::vector<int> present_ids;
  for (int r = 0; r < ctx_->world_size; ++r) {
    bool present = false;
    for (const auto& m : job.members()) {
      present = present || (m.role() == v1::ROLE_WORKER && m.rank() == member_ids_[r]);
    }
    if (present) {
      present_ids.push_back(member_ids_[r]);
    } else {
      ranks.push_back(absl::StrCat(member_ids_[r]));
    }
  }
  for (int sh = 0; sh < num_servers(); ++sh) {
    bool present = false;
    for (const auto& m : pool.members()) {
      present = present || (m.role() == v1::ROLE_SERVER && m.rank() == sh);
    }
    if (!present) gone.push_back(absl::StrCat(sh));
  }
  const int survivors = static_cast<int>(present_ids.size());
  // Elastic: no replacement within the grace period, enough survivors.
  const bool shrink = ctx_->elastic() && !ranks.empty() && gone.empty() &&
                      survivors >= o.elastic_min_workers && absl::Now() >= elastic_at;
  if (!ranks.empty()) {
    absl::StrAppend(missing, "worker rank(s) ", absl::StrJoin(ranks, ", "),
                    " (start a replacement with --rank=", ranks.size() == 1 ? ranks[0] : "R",
                    " --resume)");
    if (ctx_->elastic()) {
      absl::StrAppend(
          missing, survivors >= o.elastic_min_workers
                       ? absl::StrCat("; without one, the job goes on elastically with ", survivors,
                                      " worker(s) after ", absl::FormatDuration(o.elastic_grace))
                       : absl::StrCat("; only ", survivors,
                                      " worker(s) left, fewer than elastic_min_workers=",
                                      o.elastic_min_workers));
    }
  }
  if (!gone.empty()) {
    absl::StrAppend(missing, missing->empty() ? "" : " and ", "shard server(s) ",
                    absl::StrJoin(gone, ", "), " of pool '", o.server_pool,
                    "' (restart tessel-server --shard=", gone.size() == 1 ? gone[0] : "N",
                    " with the same --checkpoint_dir)");
  }
  if (!missing->empty() && !shrink) return false;
  // A worker that was paused or cut off past its lease may find its rank
  // taken by a replacement: it must not train alongside it.
  for (const auto& m : job.members()) {
    if (m.role() == v1::ROLE_WORKER && m.rank() == ctx_->id &&
        m.pid() != static_cast<int64_t>(getpid())) {
      return absl::AbortedError(
          absl::StrCat(ctx_->Where(), ": rank ", ctx_->id, " is now held by another process (pid ",
                       m.pid(), " on ", m.host(),
                       "): this worker's lease lapsed while it was paused or cut off, and a "
                       "replacement took over. Exiting"));
    }
  }
  *ids = shrink ? present_ids : member_ids_;
  for (int n : growth_.Present(job)) ids->push_back(n);  // the newcomers agreed on
  if (shrink) {
    TESSEL_LOG(WARNING) << ctx_->Where() << ": no replacement for " << absl::StrJoin(ranks, ", ")
                        << " within " << absl::FormatDuration(o.elastic_grace)
                        << "; going on elastically with the " << survivors
                        << " worker(s) left (registry ranks " << absl::StrJoin(present_ids, ", ")
                        << ")";
  }
  return true;
}

absl::StatusOr<std::unique_ptr<ShardFleet>> Membership::CurrentFleet(absl::Time deadline) {
  const std::string& name = ctx_->options.server_pool;
  auto pool = registry_->WaitForView(
      name, [this](const v1::View& v) { return ServersBelow(v, num_servers()) == num_servers(); },
      std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!pool.ok()) {
    return ctx_->Recoverable(
        absl::UnavailableError(absl::StrCat(ctx_->Where(), ": shard servers of pool '", name,
                                            "' not all back: ", pool.status().message())));
  }
  auto fleet = std::make_unique<ShardFleet>(control_);
  fleet->ConnectView(*pool);
  return fleet;
}

absl::Status Membership::Reconnect(const v1::View& pool) {
  for (int shard = 0; shard < num_servers(); ++shard) {
    const v1::Member* now = nullptr;
    for (const auto& m : pool.members()) {
      if (m.role() == v1::ROLE_SERVER && m.rank() == shard) now = &m;
    }
    if (now == nullptr || now->ucx_address() == ucx_addresses_[shard]) continue;
    auto peer = channel_->transport().Connect(now->ucx_address());
    if (!peer.ok()) {
      return ctx_->Recoverable(absl::UnavailableError(absl::StrCat(
          ctx_->Where(), ": cannot reach ", ucx_addresses_[shard].empty() ? "" : "the restarted ",
          "shard ", shard, " at ", now->grpc_address(), " over UCX: ", peer.status().message(),
          " (check that --ucx_tls and UCX_NET_DEVICES reach that host)")));
    }
    if (ucx_addresses_[shard].empty()) {
      TESSEL_LOG(INFO) << ctx_->Where() << ": shard " << shard << " at " << now->grpc_address()
                       << " connected again over UCX (this worker's endpoint is new)";
    } else {
      TESSEL_LOG(INFO) << ctx_->Where() << ": shard " << shard << " is back at "
                       << now->grpc_address() << " (was " << fleet_.address(shard) << ")";
    }
    fleet_.Connect(shard, now->grpc_address());
    channel_->SetAddress(shard, now->grpc_address());
    channel_->SetPeer(shard, *peer);
    ucx_addresses_[shard] = now->ucx_address();
    aggregation_.SetServerHost(shard, now->host_id());
  }
  return absl::OkStatus();
}

void Membership::Adopt(const std::vector<int>& ids) {
  if (ids == member_ids_) return;
  const int rank = static_cast<int>(std::find(ids.begin(), ids.end(), ctx_->id) - ids.begin());
  const int from = ctx_->world_size;
  ctx_->world_size = static_cast<int>(ids.size());
  ctx_->rank = rank;
  member_ids_ = ids;
  if (static_cast<int>(ids.size()) > from || growth_.newcomer()) {
    TESSEL_LOG(WARNING) << ctx_->Where() << ": the job grows from " << from << " to " << ids.size()
                        << " workers (registry ranks " << absl::StrJoin(ids, ", ")
                        << "); this worker is rank " << rank << " of " << ids.size();
  } else {
    TESSEL_LOG(WARNING) << ctx_->Where() << ": the job continues elastically with " << ids.size()
                        << " of " << from << " workers (registry ranks " << absl::StrJoin(ids, ", ")
                        << "); this worker is now rank " << rank << " of " << ids.size();
  }
}

absl::Status Membership::Admitted(const std::vector<int>& ids) {
  // Every worker the restore names, with the address it has now.
  auto view = registry_->GetView(ctx_->options.job);
  if (!view.ok()) return ctx_->Recoverable(absl::UnavailableError(view.status().message()));
  Adopt(ids);
  growth_.Admitted();
  view_epoch_ = view->epoch();
  Remember(*view);
  return absl::OkStatus();
}

void Membership::ForgetServerEndpoints() {
  aggregation_.ForgetEndpoints();
  std::fill(ucx_addresses_.begin(), ucx_addresses_.end(), std::string());
}

}  // namespace tessel::internal
