#include "worker/internal/membership.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/log.h"

namespace tessel::internal {

std::vector<int> WorkerIdsOf(const v1::ShardStats& stats) {
  std::vector<int> ids(stats.worker_ids().begin(), stats.worker_ids().end());
  if (ids.empty()) {
    for (int r = 0; r < stats.world_size(); ++r) ids.push_back(r);
  }
  return ids;
}

Membership::Membership(JobContext* ctx, DataChannel* channel, const ClientCredentials& credentials)
    : ctx_(ctx),
      channel_(channel),
      registry_(std::make_unique<RegistryClient>(ctx->options.registry, credentials, ctx->token)),
      control_(ControlOptions{credentials, ctx->token}),
      fleet_(control_) {
  for (int r = 0; r < ctx->world_size; ++r) member_ids_.push_back(r);
}

Membership::~Membership() {
  absl::Status s = registry_->Leave();
  (void)s;
}

namespace {
// Shard servers of `pool` with rank < n (all of them for n = 0).
int ServersBelow(const v1::View& pool, int n) {
  int count = 0;
  for (const auto& m : pool.members()) {
    count += m.role() == v1::ROLE_SERVER && (n == 0 || m.rank() < n);
  }
  return count;
}
}  // namespace

absl::Status Membership::FindServers() {
  const WorkerOptions& o = ctx_->options;
  const int want = o.num_servers;
  auto pool = registry_->WaitForView(
      o.server_pool,
      [&](const v1::View& v) {
        return want == 0 ? ServersBelow(v, 0) > 0 : ServersBelow(v, want) == want;
      },
      o.connect_timeout);
  if (!pool.ok()) {
    return absl::UnavailableError(absl::StrCat(ctx_->Where(), ": shard servers of pool '",
                                               o.server_pool,
                                               "' not found: ", pool.status().message()));
  }
  std::vector<const v1::Member*> members;
  for (const auto& m : pool->members()) {
    if (m.role() != v1::ROLE_SERVER) continue;
    if (want != 0 && m.rank() >= want) continue;
    members.push_back(&m);
  }
  std::sort(members.begin(), members.end(),
            [](const v1::Member* a, const v1::Member* b) { return a->rank() < b->rank(); });
  channel_->SetShards(static_cast<int>(members.size()));
  ucx_addresses_.assign(members.size(), std::string());
  server_hosts_.assign(members.size(), std::string());
  for (size_t i = 0; i < members.size(); ++i) server_hosts_[i] = members[i]->host_id();
  for (size_t i = 0; i < members.size(); ++i) {
    const int shard = static_cast<int>(i);
    if (members[i]->rank() != shard) {
      return absl::FailedPreconditionError(absl::StrCat(
          ctx_->Where(), ": pool '", o.server_pool, "' has no shard server ", i,
          " (servers present: ", DescribeView(*pool), "); start it or set num_servers"));
    }
    fleet_.Connect(shard, members[i]->grpc_address());
    channel_->SetAddress(shard, members[i]->grpc_address());
    auto peer = channel_->transport().Connect(members[i]->ucx_address());
    if (!peer.ok() && o.recovery) {
      // A server that just died still holds its lease. Recovery waits for
      // its successor and connects then (Reconnect: the address differs).
      TESSEL_LOG(WARNING) << ctx_->Where() << ": cannot reach shard " << i
                          << " over UCX yet: " << peer.status().message();
      continue;
    }
    if (!peer.ok()) {
      return absl::UnavailableError(absl::StrCat(ctx_->Where(), ": cannot reach shard ", i,
                                                 " over UCX: ", peer.status().message()));
    }
    channel_->SetPeer(shard, *peer);
    ucx_addresses_[i] = members[i]->ucx_address();
  }
  return absl::OkStatus();
}

absl::Status Membership::ClassifyJoin() {
  const WorkerOptions& o = ctx_->options;
  if (o.elastic_max_workers == 0) return RefuseLateReplacement();
  if (fleet_.size() == 0) return absl::OkStatus();
  // A rank beyond the world can only join a job that is running: wait for it.
  const absl::Time deadline = absl::Now() + o.connect_timeout;
  v1::JobRef ref;
  ref.set_job(o.job);
  for (bool logged = false;; logged = true) {
    v1::ShardStats st;
    absl::Status g = fleet_.Call(0, &v1::ShardServer::Stub::GetStats, ref, &st, "GetStats");
    if (g.ok()) {
      const std::vector<int> ids = WorkerIdsOf(st);
      if (std::find(ids.begin(), ids.end(), ctx_->id) != ids.end()) return absl::OkStatus();
      if (static_cast<int>(ids.size()) >= o.elastic_max_workers) {
        return absl::FailedPreconditionError(absl::StrCat(
            ctx_->Where(), ": the running job already has ", ids.size(),
            " workers (registry ranks ", absl::StrJoin(ids, ", "),
            "), elastic_max_workers=", o.elastic_max_workers, ": no room for this one"));
      }
      newcomer_ = true;
      join_epoch_ = st.epoch();
      member_ids_ = ids;
      ctx_->world_size = static_cast<int>(ids.size());
      ctx_->rank = static_cast<int>(ids.size());  // prospective
      TESSEL_LOG(INFO) << ctx_->Where() << ": the job is running with " << ids.size()
                       << " worker(s) (registry ranks " << absl::StrJoin(ids, ", ") << ") at step "
                       << st.step() << "; joining it as a newcomer, admitted at the next "
                       << "checkpoint boundary (a multiple of " << o.checkpoint.every_steps
                       << " steps)";
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(g)) return g;
    // Not created yet: ranks of the world start it; a rank beyond waits.
    if (ctx_->id < o.world_size) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(ctx_->Where(), ": rank ", ctx_->id, " is beyond the world of ", o.world_size,
                       " and joins a running job, but job '", o.job,
                       "' did not start on the shard servers "
                       "within ",
                       absl::FormatDuration(o.connect_timeout), " (connect_timeout)"));
    }
    if (!logged) {
      TESSEL_LOG(INFO) << ctx_->Where() << ": rank " << ctx_->id << " is beyond the world of "
                       << o.world_size << ": waiting for the job to start, then joining it";
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status Membership::RefuseLateReplacement() {
  // A replacement for a worker the job went on without (elastic) would
  // only disturb the survivors: refuse it before it joins.
  if (!ctx_->resume || fleet_.size() == 0) return absl::OkStatus();
  v1::JobRef ref;
  ref.set_job(ctx_->options.job);
  v1::ShardStats st;
  if (fleet_.Call(0, &v1::ShardServer::Stub::GetStats, ref, &st, "GetStats").ok() &&
      st.worker_ids_size() > 0 &&
      std::find(st.worker_ids().begin(), st.worker_ids().end(), ctx_->id) ==
          st.worker_ids().end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx_->Where(), ": the job went on without this worker: an elastic recovery at epoch ",
        st.epoch(), " continued with ", st.worker_ids_size(), " worker(s), registry ranks ",
        absl::StrJoin(st.worker_ids(), ", "),
        ". A replacement cannot rejoin it; restart the whole job from a checkpoint with "
        "--resume and the world size you want"));
  }
  return absl::OkStatus();
}

v1::Member Membership::Me() const {
  v1::Member me;
  me.set_group(ctx_->options.job);
  me.set_role(v1::ROLE_WORKER);
  me.set_rank(ctx_->id);
  me.set_ucx_address(registered_address_);
  me.set_host_id(ctx_->options.host_id);  // "" = RegistryClient fills in HostIdentity()
  return me;
}

absl::Status Membership::Join() {
  const WorkerOptions& o = ctx_->options;
  // Servers first: a worker is useless without its shards.
  absl::Status s = FindServers();
  if (s.ok()) s = ClassifyJoin();
  if (!s.ok()) return s;
  registered_address_ = channel_->transport().address();
  const v1::Member me = Me();
  auto joined = registry_->Join(me, o.lease_ttl);
  // A replacement for a crashed worker waits for the old lease to lapse.
  const absl::Time join_deadline = absl::Now() + o.connect_timeout;
  while (o.recovery && !joined.ok() && absl::IsAlreadyExists(joined.status()) &&
         absl::Now() < join_deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    joined = registry_->Join(me, o.lease_ttl);
  }
  if (!joined.ok()) return joined.status();
  if (newcomer_) {
    // No world to wait for: the job's workers admit this one (Admitted).
    auto view = registry_->GetView(o.job);
    if (!view.ok()) return view.status();
    ctx_->epoch = view->epoch();
    view_epoch_ = view->epoch();
    Remember(*view);
    return absl::OkStatus();
  }
  const int world = ctx_->world_size;
  auto complete = [world](const v1::View& v) {
    int n = 0;
    for (const auto& m : v.members()) n += m.role() == v1::ROLE_WORKER && m.rank() < world;
    return n == world;
  };
  const absl::Time deadline = absl::Now() + o.connect_timeout;
  absl::StatusOr<v1::View> view = absl::DeadlineExceededError("not waited");
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration slice = o.connect_check ? std::min(absl::Milliseconds(500), left) : left;
    view = registry_->WaitForView(o.job, complete, std::max(slice, absl::ZeroDuration()));
    if (view.ok() || !absl::IsDeadlineExceeded(view.status()) || absl::Now() >= deadline) break;
    if (o.connect_check) {
      absl::Status outside = o.connect_check();
      if (!outside.ok()) return outside;
    }
  }
  if (!view.ok()) {
    return absl::DeadlineExceededError(absl::StrCat(ctx_->Where(), ": not all ", world,
                                                    " workers joined: ", view.status().message()));
  }
  ctx_->epoch = view->epoch();
  view_epoch_ = view->epoch();
  Remember(*view);
  TESSEL_LOG(INFO) << ctx_->Where() << ": world of " << world << " complete at epoch "
                   << ctx_->epoch.load() << ", " << num_servers() << " shard server(s)";
  return absl::OkStatus();
}

absl::Status Membership::Check() {
  if (!registry_->lease_status().ok()) {
    // Declared dead while alive (paused, starved or cut off): recovery
    // re-joins if the rank is still free, else this process stands down.
    return ctx_->Recoverable(absl::AbortedError(absl::StrCat(
        ctx_->Where(),
        ": this worker's registry lease lapsed (it was paused or cut off for longer than the "
        "lease ttl) and the job went on without it. ",
        registry_->lease_status().message())));
  }
  absl::Status s = CheckMembers();
  if (s.ok()) s = CheckServers();  // a shard server died or was restarted
  if (s.ok() && wait_check_) s = wait_check_();
  return s;
}

absl::Status Membership::CheckMembers() {
  if (registry_->group_epoch() <= view_epoch_) return absl::OkStatus();
  return MembershipChanged();
}

void Membership::Remember(const v1::View& view) {
  member_addresses_.clear();
  member_hosts_.clear();
  member_joined_.clear();
  for (const auto& m : view.members()) {
    if (m.role() != v1::ROLE_WORKER) continue;
    member_addresses_[m.rank()] = m.ucx_address();
    member_hosts_[m.rank()] = m.host_id();
    member_joined_[m.rank()] = m.joined_epoch();
  }
}

namespace {

// Why this job's workers cannot sum inside a host ("" if they can).
std::string HostAggregationUnsupported(const JobContext& ctx) {
  if (ctx.options.precision != Precision::kFp32) {
    return "mixed precision: a host's partial sum would need fp32 on the wire";
  }
  if (ctx.options.topk_ratio > 0) return "top-k compression";
  if (ctx.unit_grads()) return ctx.fsdp() ? "fsdp gathers unit by unit" : "zero2 with units";
  return "";
}

}  // namespace

AggregationPlan Membership::PlanAggregation(const std::vector<int>& ids) const {
  std::vector<std::string> hosts;
  for (int id : ids) {
    auto it = member_hosts_.find(id);
    // Unknown: a host of its own (never grouped with anyone).
    hosts.push_back(it != member_hosts_.end() && !it->second.empty()
                        ? it->second
                        : absl::StrCat("unknown host of registry rank ", id));
  }
  return internal::PlanAggregation(ctx_->options.aggregation, HostAggregationUnsupported(*ctx_),
                                   hosts, server_hosts_);
}

absl::Status Membership::UseAggregation(const AggregationPlan& plan, const std::vector<int>& ids) {
  std::vector<PeerId> peers(ids.size(), DataChannel::kNoPeer);
  const int me = ctx_->rank.load();
  for (size_t r = 0; r < plan.groups.size(); ++r) {
    if (static_cast<int>(r) == me || plan.groups[r] != plan.groups[static_cast<size_t>(me)]) {
      continue;
    }
    auto address = member_addresses_.find(ids[r]);
    if (address == member_addresses_.end()) {
      return ctx_->Recoverable(absl::UnavailableError(
          absl::StrCat(ctx_->Where(), ": rank ", r, " (registry rank ", ids[r],
                       ") of this host is not in the registry view; cannot aggregate with it")));
    }
    auto known = worker_endpoints_.find(address->second);
    if (known != worker_endpoints_.end()) {
      peers[r] = known->second;
      continue;
    }
    auto peer = channel_->transport().Connect(address->second);
    if (!peer.ok()) {
      return ctx_->Recoverable(absl::UnavailableError(absl::StrCat(
          ctx_->Where(), ": cannot reach rank ", r, " of this host over UCX for host aggregation: ",
          peer.status().message(), " (--aggregation=flat does without)")));
    }
    worker_endpoints_[address->second] = *peer;
    peers[r] = *peer;
  }
  channel_->SetWorkerPeers(std::move(peers));
  if (plan.why != ctx_->aggregation) {
    TESSEL_LOG(INFO) << ctx_->Where() << ": " << plan.why;
  }
  ctx_->rank_groups = plan.groups;
  ctx_->aggregation = plan.why;
  return absl::OkStatus();
}

std::string Membership::AfterPause() const {
  return ctx_->ddp()
             ? "giving every worker the state of the most advanced one (DDP keeps its state on "
               "the workers: nothing rolls back)"
             : "rolling back to the latest checkpoint";
}

absl::Status Membership::MembershipChanged() {
  const WorkerOptions& o = ctx_->options;
  std::string who = "membership changed";
  auto view = registry_->GetView(o.job);
  if (view.ok()) {
    // Only a change to this job's workers matters: one of them gone,
    // replaced by another process, or lapsed and joined again (the same
    // process and address, a new membership: it is recovering, so everyone
    // must). A newcomer that is not one of them (a late replacement being
    // refused) changes nothing here.
    bool same = true;
    std::vector<std::string> rejoined;
    for (int id : member_ids_) {
      bool found = false;
      for (const auto& m : view->members()) {
        if (m.role() != v1::ROLE_WORKER || m.rank() != id || member_addresses_.count(id) == 0 ||
            member_addresses_.at(id) != m.ucx_address()) {
          continue;
        }
        found = true;
        if (member_joined_.count(id) > 0 && member_joined_.at(id) != m.joined_epoch()) {
          rejoined.push_back(absl::StrCat(id));
        }
      }
      same = same && found;
    }
    if (!rejoined.empty()) {
      same = false;
      who = absl::StrCat("worker rank(s) ", absl::StrJoin(rejoined, ", "),
                         " lapsed (paused or cut off past the lease) and joined again");
    }
    if (same) {
      view_epoch_ = view->epoch();
      return absl::OkStatus();
    }
    std::vector<std::string> missing;
    for (int r = 0; r < ctx_->world_size; ++r) {
      bool present = false;
      for (const auto& m : view->members()) {
        present = present || (m.role() == v1::ROLE_WORKER && m.rank() == member_ids_[r]);
      }
      if (!present) missing.push_back(absl::StrCat(r));
    }
    if (!missing.empty()) {
      who = absl::StrCat("worker rank(s) ", absl::StrJoin(missing, ", "),
                         " left the job or stopped heartbeating");
    }
  }
  if (o.recovery) {
    return ctx_->Recoverable(absl::AbortedError(absl::StrCat(
        ctx_->Where(), ": ", who, " (membership epoch ", view_epoch_, " -> ",
        registry_->group_epoch(), "); pausing for up to ", absl::FormatDuration(o.recovery_timeout),
        " until the job is complete again (start the missing rank with --resume)",
        ctx_->elastic() ? absl::StrCat(" or, after ", absl::FormatDuration(o.elastic_grace),
                                       " without a replacement, going on without it (elastic)")
                        : std::string(),
        ", then ", AfterPause())));
  }
  return absl::AbortedError(absl::StrCat(
      ctx_->Where(), ": ", who, " (membership epoch ", view_epoch_, " -> ",
      registry_->group_epoch(),
      "); the step cannot complete. Restart the missing worker(s) and resume from the latest "
      "checkpoint (--resume)"));
}

absl::Status Membership::CheckServers() {
  const WorkerOptions& o = ctx_->options;
  auto pool = registry_->GetView(o.server_pool);
  if (!pool.ok()) return absl::OkStatus();  // the registry is unreachable: not a verdict
  std::vector<std::string> gone;
  for (int shard = 0; shard < num_servers(); ++shard) {
    bool same = false;
    for (const auto& m : pool->members()) {
      same = same || (m.role() == v1::ROLE_SERVER && m.rank() == shard &&
                      m.ucx_address() == ucx_addresses_[shard]);
    }
    if (!same) gone.push_back(absl::StrCat(shard, " (", fleet_.address(shard), ")"));
  }
  if (gone.empty()) return absl::OkStatus();
  const std::string what =
      absl::StrCat("shard server(s) ", absl::StrJoin(gone, ", "), " of pool '", o.server_pool,
                   "' left, stopped heartbeating or were restarted");
  if (o.recovery) {
    return ctx_->Recoverable(absl::AbortedError(absl::StrCat(
        ctx_->Where(), ": ", what, "; pausing for up to ", absl::FormatDuration(o.recovery_timeout),
        " until every shard is back (restart it with the same --shard and --checkpoint_dir), "
        "then ",
        AfterPause())));
  }
  return absl::AbortedError(
      absl::StrCat(ctx_->Where(), ": ", what,
                   "; the step cannot complete. Restart the server and resume every "
                   "worker from the latest checkpoint (--resume)"));
}

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
  TESSEL_LOG(WARNING) << ctx_->Where() << ": the registry lease had lapsed; re-joined as rank "
                      << ctx_->id;
  return absl::OkStatus();
}

absl::Status Membership::WaitForComplete(absl::Time deadline, absl::Time elastic_at,
                                         std::vector<int>* ids) {
  const WorkerOptions& o = ctx_->options;
  const int world = ctx_->world_size;
  bool logged = false;
  std::string missing;
  for (;;) {
    absl::Status rejoined = Rejoin();
    if (!rejoined.ok()) return rejoined;
    auto job = registry_->GetView(o.job);
    auto pool = registry_->GetView(o.server_pool);
    missing.clear();
    if (job.ok() && pool.ok()) {
      std::vector<std::string> ranks, gone;
      std::vector<int> present_ids;
      for (int r = 0; r < world; ++r) {
        bool present = false;
        for (const auto& m : job->members()) {
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
        for (const auto& m : pool->members()) {
          present = present || (m.role() == v1::ROLE_SERVER && m.rank() == sh);
        }
        if (!present) gone.push_back(absl::StrCat(sh));
      }
      const int survivors = static_cast<int>(present_ids.size());
      // Elastic: no replacement within the grace period, enough survivors.
      const bool shrink = ctx_->elastic() && !ranks.empty() && gone.empty() &&
                          survivors >= o.elastic_min_workers && absl::Now() >= elastic_at;
      if (!ranks.empty()) {
        absl::StrAppend(&missing, "worker rank(s) ", absl::StrJoin(ranks, ", "),
                        " (start a replacement with --rank=", ranks.size() == 1 ? ranks[0] : "R",
                        " --resume)");
        if (ctx_->elastic()) {
          absl::StrAppend(
              &missing,
              survivors >= o.elastic_min_workers
                  ? absl::StrCat("; without one, the job goes on elastically with ", survivors,
                                 " worker(s) after ", absl::FormatDuration(o.elastic_grace))
                  : absl::StrCat(
                        "; only ", survivors,
                        " worker(s) left, fewer than elastic_min_workers=", o.elastic_min_workers));
        }
      }
      if (!gone.empty()) {
        absl::StrAppend(&missing, missing.empty() ? "" : " and ", "shard server(s) ",
                        absl::StrJoin(gone, ", "), " of pool '", o.server_pool,
                        "' (restart tessel-server --shard=", gone.size() == 1 ? gone[0] : "N",
                        " with the same --checkpoint_dir)");
      }
      if (missing.empty() || shrink) {
        // A worker that was paused or cut off past its lease may find its
        // rank taken by a replacement: it must not train alongside it.
        for (const auto& m : job->members()) {
          if (m.role() == v1::ROLE_WORKER && m.rank() == ctx_->id &&
              m.pid() != static_cast<int64_t>(getpid())) {
            return absl::AbortedError(
                absl::StrCat(ctx_->Where(), ": rank ", ctx_->id,
                             " is now held by another process (pid ", m.pid(), " on ", m.host(),
                             "): this worker's lease lapsed while it was paused or cut off, and a "
                             "replacement took over. Exiting"));
          }
        }
        *ids = shrink ? present_ids : member_ids_;
        for (int n : growth_) {  // the newcomers agreed on, if still there
          for (const auto& m : job->members()) {
            if (m.role() == v1::ROLE_WORKER && m.rank() == n) {
              ids->push_back(n);
              break;
            }
          }
        }
        if (shrink) {
          TESSEL_LOG(WARNING) << ctx_->Where() << ": no replacement for "
                              << absl::StrJoin(ranks, ", ") << " within "
                              << absl::FormatDuration(o.elastic_grace)
                              << "; going on elastically with the " << survivors
                              << " worker(s) left (registry ranks "
                              << absl::StrJoin(present_ids, ", ") << ")";
        }
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
    server_hosts_[static_cast<size_t>(shard)] = now->host_id();
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
  if (static_cast<int>(ids.size()) > from || newcomer_) {
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
  newcomer_ = false;
  view_epoch_ = view->epoch();
  Remember(*view);
  return absl::OkStatus();
}

std::vector<int> Membership::Newcomers() {
  std::vector<int> out;
  auto view = registry_->GetView(ctx_->options.job);
  if (!view.ok()) return out;
  for (const auto& m : view->members()) {
    if (m.role() == v1::ROLE_WORKER &&
        std::find(member_ids_.begin(), member_ids_.end(), m.rank()) == member_ids_.end()) {
      out.push_back(m.rank());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Membership::PlanGrowth(std::vector<int> newcomers, int64_t step) {
  growth_ = std::move(newcomers);
  growth_step_ = step;
}

void Membership::ClearGrowth() {
  growth_.clear();
  growth_step_ = -1;
}

void Membership::ForgetServerEndpoints() {
  worker_endpoints_.clear();
  std::fill(ucx_addresses_.begin(), ucx_addresses_.end(), std::string());
}

}  // namespace tessel::internal
