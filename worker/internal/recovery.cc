#include "worker/internal/recovery.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "worker/internal/rejoin.h"
#include "worker/internal/server_state.h"

namespace tessel::internal {

absl::Status RecoveryCoordinator::Run(int64_t restore_step, bool restore_if_nobody_does) {
  JobContext& ctx = *p_.ctx;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + ctx.options.recovery_timeout;
  const int64_t from = ctx.step;
  // Only a restore newer than anything this worker knew when the failure
  // struck counts; a retry may take the same restore again (the job cannot
  // have moved past it without this worker).
  const int64_t after_epoch = std::max(ctx.epoch.load(), p_.membership->view_epoch());
  const absl::Time elastic_at = start + ctx.options.elastic_grace;
  // Growth: the boundary's checkpoint, which every worker has reached.
  ElasticGrowth& growth = p_.membership->growth();
  const int64_t growth_step = growth.step();
  if (growth_step >= 0 && restore_step < 0 && !ctx.ddp()) restore_step = growth_step;
  struct ClearGrowth {
    ElasticGrowth* g;
    ~ClearGrowth() { g->Clear(); }
  } clear_growth{&growth};
  own_restore_.reset();
  for (int attempt = 1;; ++attempt) {
    absl::Status s = Once(deadline, elastic_at, restore_step, after_epoch, restore_if_nobody_does);
    if (s.ok()) {
      ++recoveries_;
      TESSEL_LOG(WARNING)
          << ctx.Where() << ": recovered in "
          << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
          << (ctx.ddp()
                  ? absl::StrCat(": servers re-created and every worker's state aligned at step ",
                                 ctx.step, " (this worker was at ", from, ")")
                  : absl::StrCat(": rolled back from step ", from, " to the checkpoint of step ",
                                 ctx.step,
                                 from == ctx.step ? " (this worker's own step: nothing lost)" : ""))
          << ", epoch " << ctx.epoch.load() << " (attempt " << attempt << ")";
      return s;
    }
    if (!IsRecoverable(s) || absl::Now() >= deadline) return Untagged(s);
    TESSEL_LOG(WARNING) << ctx.Where() << ": recovery attempt " << attempt
                        << " did not complete, trying again: " << s.message();
    absl::SleepFor(absl::Milliseconds(200));
  }
}

void RecoveryCoordinator::Reset() {
  p_.exchange->Reset();
  p_.units->Reset();
  p_.channel->ClearErrors();
}

void RecoveryCoordinator::SettleReceives(absl::Duration limit) {
  // PARAMS accepted before the rollback land where the checkpoint's will.
  // A live server's finish within moments; what is still in flight after
  // that comes from a dead or stalled server and could land at any time (a
  // stalled one may wake up), so the buffers it targets are retired (kept
  // alive, never read again) and replaced by fresh ones.
  const bool stuck = p_.channel->SettleReceives(limit);
  p_.units->Retire(stuck, &retired_, &retired_half_);
  p_.exchange->Retire(stuck, &retired_payload_, &retired_payload_half_);
  if (const int64_t n = p_.channel->inflight_receives(); n > 0) {
    TESSEL_LOG(WARNING) << p_.ctx->Where() << ": " << n
                        << " parameter transfer(s) from before the rollback are still in flight "
                           "(a dead or stalled server); their buffers were replaced";
  }
}

absl::Status RecoveryCoordinator::Once(absl::Time deadline, absl::Time elastic_at,
                                       int64_t restore_step, int64_t after_epoch,
                                       bool restore_if_nobody_does) {
  JobContext& ctx = *p_.ctx;
  Reset();
  // A server killed while writing into this worker's receive queue wedges
  // it; a fresh endpoint reconnects to every server (no address matches
  // ""). The registry keeps the first address: it names this process, and
  // servers answer through the endpoint each message arrives on.
  if (p_.channel->RenewIfWedged()) p_.membership->ForgetServerEndpoints();
  // The workers to go on with: all of them, or (elastic) the survivors.
  std::vector<int> ids;
  TESSEL_RETURN_IF_ERROR(p_.membership->WaitForComplete(deadline, elastic_at, &ids));
  SettleReceives(absl::Seconds(1));
  int64_t epoch = 0, step = 0;
  // The first of them restores every shard and records the membership
  // there; the others adopt whatever that restore recorded.
  bool restore_here = ids.front() == ctx.id;
  if (!restore_here && restore_if_nobody_does) {
    // The first may be waiting in place for this worker's step: give a
    // restore already under way a moment, else make one.
    std::vector<int> restored_ids;
    const absl::Status seen = AwaitRestore(std::min(deadline, absl::Now() + absl::Seconds(3)),
                                           after_epoch, &epoch, &step, &restored_ids);
    if (seen.ok()) {
      p_.membership->Adopt(restored_ids);
      return TakeRestore(epoch, step, restored_ids);
    }
    if (!absl::IsDeadlineExceeded(seen)) return seen;
    TESSEL_LOG(WARNING) << ctx.Where()
                        << ": no other worker is restoring the shards (they may be waiting in "
                           "place); restoring them from here";
    restore_here = true;
  }
  if (restore_here) {
    if (own_restore_.has_value() && own_restore_->ids == ids && StillRestored(*own_restore_)) {
      epoch = own_restore_->epoch;
      step = own_restore_->step;
      TESSEL_LOG(INFO) << ctx.Where() << ": every shard still holds this worker's restore of step "
                       << step << " at epoch " << epoch << "; taking it again";
    } else {
      TESSEL_RETURN_IF_ERROR(RestoreShards(deadline, restore_step, ids, &epoch, &step));
      own_restore_ = OwnRestore{epoch, step, ids};
    }
  } else {
    TESSEL_RETURN_IF_ERROR(AwaitRestore(deadline, after_epoch, &epoch, &step, &ids));
  }
  p_.membership->Adopt(ids);
  return TakeRestore(epoch, step, ids);
}

absl::Status RecoveryCoordinator::TakeRestore(int64_t epoch, int64_t step,
                                              const std::vector<int>& ids) {
  JobContext& ctx = *p_.ctx;
  p_.collectives->DropAll();  // named by the old epoch; the new one gets fresh ones
  p_.channel->SetEpoch(epoch);
  // A restarted server has a new frame key (its jobs are new there).
  absl::StatusOr<std::vector<FrameKeyGrant>> keys = p_.control->FrameKeys();
  if (!keys.ok()) return ctx.Recoverable(absl::UnavailableError(keys.status().message()));
  TESSEL_RETURN_IF_ERROR(p_.channel->SetFrameKeys(*keys));
  p_.spec->set_world_size(static_cast<int>(ids.size()));
  // The hosts may differ now (a replacement elsewhere, fewer or more ranks).
  AggregationPlanner& aggregation = p_.membership->aggregation();
  const AggregationPlan plan = aggregation.Plan(ids);
  TESSEL_RETURN_IF_ERROR(aggregation.Use(plan, ids));
  p_.spec->clear_rank_groups();
  for (int g : plan.groups) p_.spec->add_rank_groups(g);
  SetServedVersions(ctx.options, p_.spec);
  if (ctx.layout != nullptr && !ctx.fsdp()) {
    p_.exchange->Regroup();
    TESSEL_RETURN_IF_ERROR(p_.exchange->Meet());
  }
  // DDP keeps its own state: the ranks align it among themselves.
  if (ctx.ddp()) return ctx.Recoverable(AlignDdpState(step));
  ctx.step = step;
  if (ctx.fsdp()) return p_.units->Barrier(step);
  return p_.exchange->Pull(step);
}

absl::Status RecoveryCoordinator::Admit() {
  JobContext& ctx = *p_.ctx;
  const WorkerOptions& o = ctx.options;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + std::max(o.connect_timeout, o.recovery_timeout);
  TESSEL_LOG(INFO) << ctx.Where() << ": waiting to be admitted (up to "
                   << absl::FormatDuration(deadline - start) << ")";
  Reset();
  int64_t epoch = 0, step = 0;
  std::vector<int> ids;
  absl::Status s =
      AwaitRestore(deadline, p_.membership->growth().join_epoch(), &epoch, &step, &ids);
  if (!s.ok()) return Untagged(s);
  TESSEL_RETURN_IF_ERROR(p_.membership->Admitted(ids));
  TESSEL_RETURN_IF_ERROR(TakeRestore(epoch, step, ids));
  TESSEL_LOG(WARNING) << ctx.Where() << ": admitted after "
                      << absl::FormatDuration(
                             absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
                      << " at step " << ctx.step << ", epoch " << epoch;
  return absl::OkStatus();
}

absl::StatusOr<bool> RecoveryCoordinator::RejoinInPlace() {
  JobContext& ctx = *p_.ctx;
  if (!InPlaceEligible(ctx) || ctx.layout == nullptr) return false;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + ctx.options.recovery_timeout;
  Reset();
  std::vector<int> ids;
  TESSEL_RETURN_IF_ERROR(p_.membership->WaitForComplete(deadline, absl::InfiniteFuture(), &ids));
  std::vector<int> buckets;
  for (int s = 0; s < p_.channel->num_shards(); ++s) buckets.push_back(ctx.layout->num_buckets(s));
  RejoinPlan plan;
  int64_t keyed_epoch = -1;  // the epoch whose frame keys this process holds
  absl::Time keyed_at = absl::InfiniteFuture();
  for (;;) {
    auto stats = p_.control->Stats(absl::Seconds(5));
    if (!stats.ok() && absl::IsNotFound(stats.status())) return false;  // a whole restart
    if (stats.ok()) {
      plan = PlanRejoin(*stats, ctx.rank.load(), ids, buckets);
      if (!plan.in_place) {
        TESSEL_LOG(WARNING) << ctx.Where() << ": not rejoining in place (" << plan.why_not
                            << "); joining a rollback";
        return false;
      }
      // The rank's frame keys first (handed over to this process): each
      // shard then abandons the pushes the dead process left landing, so
      // the stats read next, which the plan is made from, list them owed.
      if (plan.epoch != keyed_epoch) {
        p_.channel->SetEpoch(plan.epoch);
        absl::StatusOr<std::vector<FrameKeyGrant>> keys = p_.control->FrameKeys();
        if (!keys.ok()) return ctx.Recoverable(absl::UnavailableError(keys.status().message()));
        TESSEL_RETURN_IF_ERROR(p_.channel->SetFrameKeys(*keys));
        keyed_epoch = plan.epoch;
        keyed_at = absl::Now();
        continue;
      }
      // A push of the dead process still landing (a shard without frame
      // keys hands nothing over): its slot frees when the transfer fails.
      // And the replacement must push as the step in flight's pushes do
      // (held for clipping or not): it waits for the first of them (the
      // others are computing it; a job of one worker has no others).
      if (!plan.receiving && (plan.held >= 0 || ctx.world_size == 1)) break;
      // Nobody pushed the step in flight within a lease (at least 2 s) of
      // this process taking its keys: every rank restarted (a whole job
      // resuming: it restores its checkpoint, as it always did), or the
      // others' steps take longer than that (then too, a rollback is safe).
      if (plan.held < 0 &&
          absl::Now() >= keyed_at + std::max(ctx.options.lease_ttl, absl::Seconds(2))) {
        TESSEL_LOG(WARNING) << ctx.Where() << ": no other rank pushed a gradient of step "
                            << plan.step + 1
                            << " since this process joined (a whole job restarting, or steps "
                               "longer than a lease); joining a rollback instead of rejoining";
        return false;
      }
    }
    if (absl::Now() >= deadline) {
      return ctx.Recoverable(absl::AbortedError(absl::StrCat(
          ctx.Where(), ": the shards' stats did not settle within the recovery timeout: ",
          !stats.ok()      ? std::string(stats.status().message())
          : plan.receiving ? "a push of this rank's previous process is still landing"
                           : "no other rank pushed a gradient of the step in flight")));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ctx.step = plan.step;
  if (plan.held >= 0) ctx.hold_update = plan.held == 1;
  rejoined_held_ = plan.held == 1;
  if (ctx.fsdp()) {
    // Units are gathered at plan.step as the forward asks for them.
    TESSEL_RETURN_IF_ERROR(ctx.Recoverable(p_.units->Barrier(plan.step)));
    p_.units->SkipPushed(plan.step, plan.pushed);
  } else {
    TESSEL_RETURN_IF_ERROR(ctx.Recoverable(p_.exchange->Pull(plan.step)));
    // zero2 pushed by units (Worker::PushUnit) leaves them out there too.
    p_.units->SkipPushed(plan.step, plan.pushed);
    for (size_t s = 0; s < plan.pushed.size(); ++s) {
      for (size_t b = 0; b < plan.pushed[s].size(); ++b) {
        if (plan.pushed[s][b]) p_.exchange->MarkPushed(static_cast<int>(s), static_cast<int>(b));
      }
    }
  }
  ++in_place_rejoins_;
  last_in_place_step_ = plan.step;
  TESSEL_LOG(WARNING) << ctx.Where() << ": rejoined in place after "
                      << absl::FormatDuration(
                             absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
                      << ": the shards applied step " << plan.step << " (epoch " << plan.epoch
                      << "); this worker computes step " << plan.step + 1 << " again, "
                      << plan.buckets_pushed
                      << " of its buckets of that step were already on the shards; nothing "
                         "rolls back";
  return true;
}

absl::Status RecoveryCoordinator::RestoreShards(absl::Time deadline, int64_t restore_step,
                                                const std::vector<int>& ids, int64_t* epoch,
                                                int64_t* step) {
  JobContext& ctx = *p_.ctx;
  const JobControl& control = *p_.control;
  const bool ddp = ctx.ddp();
  // The step to go back to: the latest complete checkpoint (DDP: ours).
  *step = ctx.step;
  if (!ddp) {
    auto info = control.GetCheckpoint(restore_step, "finding the checkpoint to roll back to");
    // Growth: the boundary's checkpoint may still be being written.
    while (absl::IsNotFound(info.status()) && restore_step >= 0 &&
           restore_step == p_.membership->growth().step() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      info = control.GetCheckpoint(restore_step, absl::StrCat("the checkpoint of step ",
                                                              restore_step, " to grow the job at"));
    }
    if (absl::IsNotFound(info.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(info.status().message(),
                       ". Recovery needs a complete checkpoint: run with "
                       "CheckpointPolicy.every_steps (--checkpoint_every_steps) and initial "
                       "(--checkpoint_initial) on servers sharing one --checkpoint_dir"));
    }
    if (!info.ok()) return ctx.Recoverable(absl::UnavailableError(info.status().message()));
    *step = info->step();
  }
  // An epoch above every one in use: ours, the registry's, every shard's.
  auto shards_epoch = control.MaxEpoch();
  if (!shards_epoch.ok()) {
    return ctx.Recoverable(absl::UnavailableError(shards_epoch.status().message()));
  }
  *epoch = std::max({ctx.epoch.load(), p_.membership->view_epoch(), *shards_epoch}) + 1;
  v1::CreateJobRequest req;
  *req.mutable_spec() = *p_.spec;
  req.mutable_spec()->set_world_size(static_cast<int>(ids.size()));
  req.mutable_spec()->clear_rank_groups();
  for (int g : p_.membership->aggregation().Plan(ids).groups) {
    req.mutable_spec()->add_rank_groups(g);
  }
  SetServedVersions(ctx.options, req.mutable_spec());
  for (int id : ids) req.add_worker_ids(id);
  req.set_epoch(*epoch);
  req.set_restore(!ddp);
  req.set_restore_step(*step);
  req.set_replace(true);
  req.set_start_step(*step);
  bool refused = false;
  absl::Status s = control.CreateJob(
      req, absl::StrCat("restoring to step ", *step),
      [&](int shard, const v1::CreateJobResponse& resp) {
        if (resp.step() == *step) return absl::OkStatus();
        return absl::InternalError(absl::StrCat(ctx.Where(), ": shard ", shard, " restored step ",
                                                resp.step(), "; expected step ", *step));
      },
      &refused);
  if (!s.ok() && !refused && !absl::IsInvalidArgument(s) && !absl::IsPermissionDenied(s) &&
      !absl::IsUnauthenticated(s)) {
    // Others may get better by trying again: the server died again, or
    // pruning removed checkpoint C while it was read (the next attempt picks
    // the newest one).
    return ctx.Recoverable(absl::UnavailableError(s.message()));
  }
  TESSEL_RETURN_IF_ERROR(s);
  TESSEL_LOG(INFO) << ctx.Where() << ": restored " << p_.membership->fleet().size()
                   << " shard(s) to step " << *step << " at epoch " << *epoch << " for "
                   << ids.size() << " worker(s)";
  return absl::OkStatus();
}

RestoreSeen ReadRestore(const std::vector<v1::ShardStats>& stats, int64_t after_epoch) {
  RestoreSeen seen;
  seen.ready = true;
  for (size_t shard = 0; shard < stats.size(); ++shard) {
    const v1::ShardStats& st = stats[shard];
    std::vector<int> shard_ids = WorkerIdsOf(st);
    if (st.epoch() <= after_epoch || st.restored_from_step() != st.step() ||
        (shard > 0 && (st.epoch() != seen.epoch || st.step() != seen.step))) {
      seen.last = absl::StrCat("shard ", shard, " at epoch ", st.epoch(), " step ", st.step(),
                               " (restored from ", st.restored_from_step(), ")");
      seen.ready = false;
      return seen;
    }
    if (shard > 0 && shard_ids != seen.ids) {
      seen.last =
          absl::StrCat("shard ", shard, " restored for workers ", absl::StrJoin(shard_ids, ","),
                       ", another shard for ", absl::StrJoin(seen.ids, ","));
      seen.ready = false;
      return seen;
    }
    seen.epoch = st.epoch();
    seen.step = st.step();
    seen.ids = std::move(shard_ids);
  }
  return seen;
}

DdpAlignment PlanDdpAlignment(absl::Span<const uint64_t> words, int world) {
  DdpAlignment plan;
  for (int r = 0; r < world; ++r) {
    if (words[2 * r] > 0 && (plan.donor < 0 || words[2 * r] > words[2 * plan.donor])) {
      plan.donor = r;
    }
  }
  if (plan.donor < 0) return plan;
  const uint64_t top = words[2 * plan.donor];
  const uint64_t digest = words[2 * plan.donor + 1];
  plan.step = static_cast<int64_t>(top) - 1;
  for (int r = 0; r < world; ++r) {
    const uint64_t step1 = words[2 * r];
    if (step1 == top && words[2 * r + 1] == digest) continue;
    plan.behind.push_back(step1 == 0     ? absl::StrCat(r, " (no state: a replacement)")
                          : step1 == top ? absl::StrCat(r, " (same step, other state)")
                                         : absl::StrCat(r, " (at step ", step1 - 1, ")"));
  }
  return plan;
}

bool RecoveryCoordinator::StillRestored(const OwnRestore& r) {
  auto stats = p_.control->Stats(absl::Seconds(5));
  if (!stats.ok()) return false;
  const RestoreSeen seen = ReadRestore(*stats, r.epoch - 1);
  return seen.ready && seen.epoch == r.epoch && seen.step == r.step && seen.ids == r.ids;
}

absl::Status RecoveryCoordinator::AwaitRestore(absl::Time deadline, int64_t after_epoch,
                                               int64_t* epoch, int64_t* step,
                                               std::vector<int>* ids) {
  JobContext& ctx = *p_.ctx;
  std::string last = "no answer yet";
  int polls = 0;
  for (;;) {
    // Restored by this recovery: a newer epoch, every shard the same, and
    // still at the step it was restored to (no step can pass without us).
    auto stats = p_.control->Stats(absl::Seconds(5));
    bool unreachable = false;
    RestoreSeen seen;
    if (stats.ok()) {
      seen = ReadRestore(*stats, after_epoch);
      if (!seen.ready) last = seen.last;
    } else {
      last = std::string(stats.status().message());
      unreachable = !absl::IsNotFound(stats.status());
    }
    const bool ready = seen.ready;
    const int64_t e = seen.epoch, k = seen.step;
    std::vector<int>& restored_ids = seen.ids;
    const bool newcomer = p_.membership->growth().newcomer();
    if (ready && newcomer &&
        std::find(restored_ids.begin(), restored_ids.end(), ctx.id) == restored_ids.end()) {
      // A recovery of the job without this newcomer: wait for the next.
      last = absl::StrCat("a recovery at epoch ", e, " restored step ", k, " for registry ranks ",
                          absl::StrJoin(restored_ids, ", "), ", not yet this one");
      after_epoch = e;
    } else if (ready) {
      if (std::find(restored_ids.begin(), restored_ids.end(), ctx.id) == restored_ids.end()) {
        // Not recoverable: the job went on without this worker.
        return absl::AbortedError(
            absl::StrCat(ctx.Where(), ": the job went on without this worker (registry rank ",
                         ctx.id, "): a recovery at epoch ", e, " restored step ", k, " for ",
                         restored_ids.size(), " worker(s), registry ranks ",
                         absl::StrJoin(restored_ids, ", "), " (elastic continuation). Exiting"));
      }
      *epoch = e;
      *step = k;
      *ids = std::move(restored_ids);
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline && newcomer) {
      return absl::DeadlineExceededError(absl::StrCat(
          ctx.Where(), ": not admitted to the running job within ",
          absl::FormatDuration(std::max(ctx.options.connect_timeout, ctx.options.recovery_timeout)),
          " (last seen: ", last,
          "). Its workers admit newcomers at checkpoint boundaries (multiples of "
          "--checkpoint_every_steps) when they run with --elastic_max_workers above their "
          "world size; do they?"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(ctx.Where(), ": the first worker did not restore the shard servers within ",
                       absl::FormatDuration(ctx.options.recovery_timeout), " (last seen: ", last,
                       "); is it running with recovery enabled?"));
    }
    if (newcomer) {  // not one of the job's workers: their comings and goings are theirs
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    // Someone left again, or a server died again: start over.
    TESSEL_RETURN_IF_ERROR(p_.membership->CheckMembers());
    if (++polls % 10 == 0 || unreachable) TESSEL_RETURN_IF_ERROR(p_.membership->CheckServers());
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status RecoveryCoordinator::AlignDdpState(int64_t server_step) {
  JobContext& ctx = *p_.ctx;
  ModelBuffers& buffers = p_.exchange->buffers();
  DdpState& ddp = *p_.ddp;
  // A DDP updater holds the values that count.
  if (ddp.holds_state()) TESSEL_RETURN_IF_ERROR(ddp.SyncToHost(ctx.half, &buffers));
  // Per rank: step + 1 (0: holds no state) and the digest of its state.
  const uint64_t mine[2] = {ddp.holds_state() ? static_cast<uint64_t>(ctx.step) + 1 : 0,
                            ddp.holds_state() ? ddp.Digest(ctx.step, buffers.params) : 0};
  TESSEL_ASSIGN_OR_RETURN(const std::vector<uint64_t> all, p_.collectives->AllGatherWords(mine));
  const DdpAlignment plan = PlanDdpAlignment(all, ctx.world_size);
  if (plan.donor < 0) {
    // Not recoverable: nobody can supply the state.
    return absl::DataLossError(absl::StrCat(
        ctx.Where(),
        ": no worker of this DDP job holds its state (every one was restarted): DDP keeps "
        "parameters and optimizer state only on the workers and writes no checkpoint. Start the "
        "job afresh, or use zero1/zero2/fsdp with --checkpoint_every_steps to survive losing "
        "every worker"));
  }
  const int64_t target = plan.step;
  if (!plan.behind.empty()) {
    TESSEL_LOG(WARNING) << ctx.Where() << ": rank(s) " << absl::StrJoin(plan.behind, ", ")
                        << " differ from rank " << plan.donor << " at step " << target
                        << "; every rank takes rank " << plan.donor << "'s state";
    TESSEL_RETURN_IF_ERROR(BroadcastDdpState(plan.donor, &ctx, &buffers, &ddp, p_.collectives));
    TESSEL_RETURN_IF_ERROR(ddp.SyncFromHost(buffers));
  }
  ddp.set_holds_state(true);
  if (target == server_step) return absl::OkStatus();
  // The first worker re-created the servers at its own step; move them to
  // the job's, and let nobody push before they are there.
  absl::Status wrote = absl::OkStatus();
  if (ctx.rank.load() == 0) {
    TrainState at;
    at.step = target;
    wrote = WriteServerState(ctx, p_.membership->fleet(), at);
  }
  absl::Status s = p_.collectives->AgreeOk(
      wrote.ok(), absl::StrCat("moving the shard servers to step ", target));
  return wrote.ok() ? s : wrote;
}

}  // namespace tessel::internal
