#include "worker/internal/aggregation_planner.h"

#include "absl/strings/str_cat.h"
#include "runtime/log.h"

namespace tessel::internal {

std::string HostAggregationUnsupported(const JobContext& ctx) {
  if (ctx.options.precision != Precision::kFp32) {
    return "mixed precision: a host's partial sum would need fp32 on the wire";
  }
  if (ctx.options.topk_ratio > 0) return "top-k compression";
  if (ctx.unit_grads()) return ctx.fsdp() ? "fsdp gathers unit by unit" : "zero2 with units";
  return "";
}

AggregationPlanner::AggregationPlanner(JobContext* ctx, DataChannel* channel)
    : ctx_(ctx), channel_(channel) {}

void AggregationPlanner::SetWorkers(const v1::View& job) {
  hosts_.clear();
  addresses_.clear();
  for (const auto& m : job.members()) {
    if (m.role() != v1::ROLE_WORKER) continue;
    hosts_[m.rank()] = m.host_id();
    addresses_[m.rank()] = m.ucx_address();
  }
}

AggregationPlan AggregationPlanner::Plan(const std::vector<int>& ids) const {
  std::vector<std::string> hosts;
  for (int id : ids) {
    auto it = hosts_.find(id);
    // Unknown: a host of its own (never grouped with anyone).
    hosts.push_back(it != hosts_.end() && !it->second.empty()
                        ? it->second
                        : absl::StrCat("unknown host of registry rank ", id));
  }
  return PlanAggregation(ctx_->options.aggregation, HostAggregationUnsupported(*ctx_), hosts,
                         server_hosts_);
}

absl::Status AggregationPlanner::Use(const AggregationPlan& plan, const std::vector<int>& ids) {
  std::vector<PeerId> peers(ids.size(), DataChannel::kNoPeer);
  const int me = ctx_->rank.load();
  for (size_t r = 0; r < plan.groups.size(); ++r) {
    if (static_cast<int>(r) == me || plan.groups[r] != plan.groups[static_cast<size_t>(me)]) {
      continue;
    }
    auto address = addresses_.find(ids[r]);
    if (address == addresses_.end()) {
      return ctx_->Recoverable(absl::UnavailableError(
          absl::StrCat(ctx_->Where(), ": rank ", r, " (registry rank ", ids[r],
                       ") of this host is not in the registry view; cannot aggregate with it")));
    }
    auto known = endpoints_.find(address->second);
    if (known != endpoints_.end()) {
      peers[r] = known->second;
      continue;
    }
    auto peer = channel_->transport().Connect(address->second);
    if (!peer.ok()) {
      return ctx_->Recoverable(absl::UnavailableError(absl::StrCat(
          ctx_->Where(), ": cannot reach rank ", r, " of this host over UCX for host aggregation: ",
          peer.status().message(), " (--aggregation=flat does without)")));
    }
    endpoints_[address->second] = *peer;
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

}  // namespace tessel::internal
