#include "worker/internal/host_groups.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel::internal {

std::vector<int> GroupsOfHosts(const std::vector<std::string>& host_of_rank) {
  std::map<std::string, int> number;
  std::vector<int> groups;
  groups.reserve(host_of_rank.size());
  for (const std::string& host : host_of_rank) {
    auto [it, added] = number.emplace(host, static_cast<int>(number.size()));
    groups.push_back(it->second);
  }
  return groups;
}

namespace {

// "ranks 0-1, 2-3" or "ranks 0,2 and 1,3".
std::string DescribeGroups(const std::vector<int>& groups) {
  const int n = groups.empty() ? 0 : *std::max_element(groups.begin(), groups.end()) + 1;
  std::vector<std::string> parts;
  for (int g = 0; g < n; ++g) {
    std::vector<int> ranks;
    for (size_t r = 0; r < groups.size(); ++r) {
      if (groups[r] == g) ranks.push_back(static_cast<int>(r));
    }
    const bool run = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    parts.push_back(run && ranks.size() > 1 ? absl::StrCat(ranks.front(), "-", ranks.back())
                                            : absl::StrJoin(ranks, ","));
  }
  return absl::StrCat(n, n == 1 ? " host" : " hosts", " (ranks ", absl::StrJoin(parts, "; "), ")");
}

}  // namespace

AggregationPlan PlanAggregation(Aggregation mode, absl::string_view unsupported,
                                const std::vector<std::string>& worker_hosts,
                                const std::vector<std::string>& server_hosts) {
  AggregationPlan plan;
  if (mode == Aggregation::kFlat) {
    plan.why = "flat (--aggregation=flat)";
    return plan;
  }
  const std::vector<int> groups = GroupsOfHosts(worker_hosts);
  std::map<int, int> sizes;
  for (int g : groups) ++sizes[g];
  bool shared = false;
  for (const auto& [g, n] : sizes) shared = shared || n > 1;
  if (!shared) {
    plan.why = "flat (one worker per host)";
    return plan;
  }
  if (!unsupported.empty()) {
    plan.why = absl::StrCat("flat (", unsupported, ")");
    return plan;
  }
  if (mode == Aggregation::kAuto) {
    // Worth it when the workers of a shared host reach some shard over a link.
    bool remote = false;
    for (size_t r = 0; r < groups.size(); ++r) {
      if (sizes[groups[r]] < 2) continue;
      for (const std::string& s : server_hosts)
        remote = remote || (!s.empty() && s != worker_hosts[r]);
    }
    if (!remote) {
      plan.why = "flat (the shard servers share the workers' host)";
      return plan;
    }
  }
  plan.groups = groups;
  plan.why = absl::StrCat("host aggregation: ", DescribeGroups(groups));
  return plan;
}

int BucketAggregator(const std::vector<int>& members, int64_t k, int64_t total) {
  const int64_t l = static_cast<int64_t>(members.size());
  return members[static_cast<size_t>(k * l / std::max<int64_t>(total, 1))];
}

}  // namespace tessel::internal
