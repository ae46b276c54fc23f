#include "worker/internal/membership.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "worker/internal/rejoin.h"

namespace tessel::internal {
namespace {

// Rank 0's line when the servers start (or stop) naming a rank a straggler.
std::string DescribeStraggler(const std::string& job, const v1::Straggler& s, bool started) {
  return absl::StrFormat(
      "job '%s': rank %d (registry rank %d%s) %s: score %.2f (1.0 = the median rank's pace), its "
      "last push %.3f s after the first rank's (shard %d)",
      job, s.rank(), s.registry_rank(),
      s.host().empty() ? "" : absl::StrCat("; host ", s.host(), " pid ", s.pid()),
      started ? "is a straggler" : "is no longer a straggler", s.score(), s.lateness_seconds(),
      s.shard());
}

}  // namespace

Membership::Membership(JobContext* ctx, DataChannel* channel, const ClientCredentials& credentials)
    : ctx_(ctx),
      channel_(channel),
      registry_(std::make_unique<RegistryClient>(ctx->options.registry, credentials, ctx->token)),
      control_(ControlOptions{credentials, ctx->token}),
      fleet_(control_),
      aggregation_(ctx, channel),
      growth_(ctx, registry_.get(), &fleet_) {
  for (int r = 0; r < ctx->world_size; ++r) member_ids_.push_back(r);
  // Rank 0 says which ranks the servers name stragglers (heartbeat thread);
  // every rank keeps the list for Worker::stragglers().
  registry_->SetStragglerListener([ctx, named = named_](const std::vector<v1::Straggler>& now) {
    std::map<int, v1::Straggler> next;
    for (const v1::Straggler& s : now) next[s.rank()] = s;
    absl::MutexLock lock(&named->mu);
    if (ctx->rank.load() == 0) {
      for (const auto& [rank, s] : next) {
        if (named->now.count(rank) != 0) continue;
        TESSEL_LOG(WARNING) << DescribeStraggler(ctx->options.job, s, /*started=*/true);
      }
      for (const auto& [rank, s] : named->now) {
        if (next.count(rank) == 0) {
          TESSEL_LOG(INFO) << DescribeStraggler(ctx->options.job, s, /*started=*/false);
        }
      }
    }
    // This rank the slowest (highest score, then lowest rank) since when.
    const v1::Straggler* slowest = nullptr;
    for (const auto& [rank, s] : next) {
      if (slowest == nullptr || s.score() > slowest->score()) slowest = &s;
    }
    if (slowest == nullptr || slowest->rank() != ctx->rank.load()) {
      named->slowest_since = absl::InfiniteFuture();
    } else if (named->slowest_since == absl::InfiniteFuture()) {
      named->slowest_since = absl::Now();
    }
    named->now = std::move(next);
  });
}

absl::Time Membership::SlowestSince(v1::Straggler* entry) const {
  absl::MutexLock lock(&named_->mu);
  if (auto it = named_->now.find(ctx_->rank.load()); it != named_->now.end()) *entry = it->second;
  return named_->slowest_since;
}

std::vector<v1::Straggler> Membership::stragglers() const {
  absl::MutexLock lock(&named_->mu);
  std::vector<v1::Straggler> out;
  for (const auto& [rank, s] : named_->now) out.push_back(s);
  return out;
}

Membership::~Membership() {
  absl::Status s = registry_->Leave();
  (void)s;
}

int Membership::ServersBelow(const v1::View& pool, int n) {
  int count = 0;
  for (const auto& m : pool.members()) {
    count += m.role() == v1::ROLE_SERVER && (n == 0 || m.rank() < n);
  }
  return count;
}

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
  std::vector<std::string> hosts;
  for (const v1::Member* m : members) hosts.push_back(m->host_id());
  aggregation_.SetServerHosts(std::move(hosts));
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
  TESSEL_RETURN_IF_ERROR(FindServers());
  TESSEL_ASSIGN_OR_RETURN(std::optional<std::vector<int>> running, growth_.ClassifyJoin());
  if (running.has_value()) member_ids_ = *std::move(running);  // a newcomer's job
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
  TESSEL_RETURN_IF_ERROR(joined);
  ctx_->member_epoch = registry_->joined_epoch();
  if (growth_.newcomer()) {
    // No world to wait for: the job's workers admit this one (Admitted).
    TESSEL_ASSIGN_OR_RETURN(const v1::View view, registry_->GetView(o.job));
    ctx_->epoch = view.epoch();
    view_epoch_ = view.epoch();
    Remember(view);
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
    if (o.connect_check) TESSEL_RETURN_IF_ERROR(o.connect_check());
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
  member_joined_.clear();
  for (const auto& m : view.members()) {
    if (m.role() != v1::ROLE_WORKER) continue;
    member_addresses_[m.rank()] = m.ucx_address();
    member_joined_[m.rank()] = m.joined_epoch();
  }
  aggregation_.SetWorkers(view);
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
    } else {
      who = "a worker of the job was replaced by another process";
    }
    // A process that lapsed (paused, cut off) and joined again rolls back
    // with everyone (Worker::Recover; issue 44 item 4), as does everything
    // when a shard server changed too.
    if (rejoined.empty() && InPlaceEligible(*ctx_) && CheckServers().ok()) {
      return WaitInPlace(who);
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

absl::Status Membership::WaitInPlace(const std::string& who) {
  const WorkerOptions& o = ctx_->options;
  const absl::Time start = absl::Now();
  TESSEL_LOG(WARNING) << ctx_->Where() << ": " << who << " (membership epoch " << view_epoch_
                      << " -> " << registry_->group_epoch() << "); step " << ctx_->step + 1
                      << " waits for its replacement (start the missing rank with --resume) for "
                      << "up to " << absl::FormatDuration(o.recovery_timeout)
                      << "; nothing rolls back";
  const std::vector<std::string> servers = ucx_addresses_;
  std::vector<int> ids;
  TESSEL_RETURN_IF_ERROR(WaitForComplete(start + o.recovery_timeout, absl::InfiniteFuture(), &ids));
  if (ids != member_ids_ || ucx_addresses_ != servers) {
    return ctx_->Recoverable(absl::AbortedError(absl::StrCat(
        ctx_->Where(), ": while step ", ctx_->step + 1, " waited for a replacement, ",
        ids != member_ids_ ? "the job's workers changed" : "a shard server was restarted", "; ",
        AfterPause())));
  }
  TESSEL_LOG(WARNING) << ctx_->Where() << ": every rank is back after "
                      << absl::FormatDuration(
                             absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
                      << "; step " << ctx_->step + 1 << " goes on in place (no rollback)";
  return absl::OkStatus();
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

}  // namespace tessel::internal
