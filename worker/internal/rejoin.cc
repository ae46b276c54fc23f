#include "worker/internal/rejoin.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/internal/elastic_growth.h"

namespace tessel::internal {

bool InPlaceEligible(const WorkerOptions& o, bool host_aggregation) {
  const bool servers_hold_state = o.strategy == Strategy::kZero1 ||
                                  o.strategy == Strategy::kZero2 || o.strategy == Strategy::kFsdp;
  return o.recovery && o.rejoin_in_place && servers_hold_state && !host_aggregation &&
         o.elastic_min_workers == 0 && o.elastic_max_workers == 0;
}

bool InPlaceEligible(const JobContext& ctx) {
  return InPlaceEligible(ctx.options, !ctx.rank_groups.empty());
}

void SetServedVersions(const WorkerOptions& o, v1::JobSpec* spec) {
  spec->set_in_place_update(!InPlaceEligible(o, spec->rank_groups_size() > 0));
}

RejoinPlan PlanRejoin(const std::vector<v1::ShardStats>& stats, int rank,
                      const std::vector<int>& ids, absl::Span<const int> buckets) {
  RejoinPlan plan;
  if (stats.empty() || stats.size() != buckets.size()) {
    plan.why_not = absl::StrCat(stats.size(), " shard(s) answered, the job has ", buckets.size());
    return plan;
  }
  int64_t low = stats[0].step(), high = stats[0].step();
  for (size_t k = 0; k < stats.size(); ++k) {
    const v1::ShardStats& st = stats[k];
    if (!st.initialized()) {
      plan.why_not = absl::StrCat("shard ", k, " holds no parameters yet");
      return plan;
    }
    if (st.epoch() != stats[0].epoch()) {
      plan.why_not = absl::StrCat("shard ", k, " is at epoch ", st.epoch(), ", shard 0 at ",
                                  stats[0].epoch(), " (a recovery under way)");
      return plan;
    }
    if (const std::vector<int> on = WorkerIdsOf(st); on != ids) {
      plan.why_not = absl::StrCat("shard ", k, " serves registry ranks ", absl::StrJoin(on, ","),
                                  ", the job now has ", absl::StrJoin(ids, ","));
      return plan;
    }
    if (st.has_waiting() && st.waiting().host_groups()) {
      plan.why_not = absl::StrCat("shard ", k, " aggregates per host group");
      return plan;
    }
    low = std::min(low, st.step());
    high = std::max(high, st.step());
  }
  if (high - low > 1) {
    plan.why_not = absl::StrCat("the shards are at steps ", low, " to ", high);
    return plan;
  }
  plan.epoch = stats[0].epoch();
  plan.step = low;
  plan.pushed.resize(stats.size());
  for (size_t k = 0; k < stats.size(); ++k) {
    const v1::ShardStats& st = stats[k];
    std::vector<uint8_t>& pushed = plan.pushed[k];
    if (st.step() > low) {  // this rank's pushes of step low + 1 all landed here
      pushed.assign(static_cast<size_t>(buckets[k]), 1);
    } else if (!st.has_waiting() || st.waiting().step() != low) {  // nothing of low + 1 yet
      pushed.assign(static_cast<size_t>(buckets[k]), 0);
    } else {
      if (st.waiting().hold_decided()) plan.held = st.waiting().held() ? 1 : 0;
      // The step in flight lists the ranks that still owe buckets; a rank not
      // listed owes none here.
      pushed.assign(static_cast<size_t>(buckets[k]), 1);
      for (const v1::SlotWaiting& slot : st.waiting().slots()) {
        if (slot.slot() != rank) continue;
        for (int b : slot.not_pushed()) {
          if (b >= 0 && b < buckets[k]) pushed[static_cast<size_t>(b)] = 0;
        }
        for (int b : slot.receiving()) {
          if (b >= 0 && b < buckets[k]) pushed[static_cast<size_t>(b)] = 0;
          plan.receiving = true;
        }
      }
    }
    plan.buckets_pushed += std::count(pushed.begin(), pushed.end(), 1);
  }
  plan.in_place = true;
  return plan;
}

}  // namespace tessel::internal
