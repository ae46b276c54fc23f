#include "rpc/caller.h"

#include "absl/algorithm/container.h"
#include "absl/strings/str_join.h"
#include "core/job_name.h"

namespace tessel {

bool Grant::Covers(absl::string_view job) const {
  if (jobs.empty() || job.empty()) return true;
  for (const std::string& scope : jobs) {
    if (JobInScope(scope, job)) return true;
  }
  return false;
}

bool Grant::Names(absl::string_view job) const {
  if (jobs.empty()) return true;
  for (const std::string& scope : jobs) {
    if (scope == job) return true;
  }
  return false;
}

bool Caller::Has(Role role) const {
  for (const Grant& g : grants) {
    if (g.role == role) return true;
  }
  return false;
}

std::string Caller::Identity() const {
  std::vector<absl::string_view> seen;
  for (const Grant& g : grants) {
    if (g.identity.empty() || absl::c_linear_search(seen, g.identity)) continue;
    seen.push_back(g.identity);
  }
  return absl::StrJoin(seen, " + ");
}

bool Caller::GrantReaches(const Grant& g, absl::string_view job, const Creator& creator) const {
  if (!g.Covers(job)) return false;
  if (!creator.has_value() || g.Names(job)) return true;
  // Derived from the scope: only what this credential created. An unknown
  // creator ("") is nobody's: never the caller's.
  return !creator->empty() && *creator == Identity();
}

bool Caller::ReachesOnlyByDerivation(absl::string_view job) const {
  bool derived = false;
  for (const Grant& g : grants) {
    if (g.role == Role::kAdmin) return false;
    if (g.role != Role::kWorker || !g.Covers(job)) continue;
    if (g.Names(job)) return false;
    derived = true;
  }
  return derived;
}

bool Caller::MayActOnJob(absl::string_view job, const Creator& creator) const {
  for (const Grant& g : grants) {
    if (g.role == Role::kAdmin) return true;
    if (g.role == Role::kWorker && GrantReaches(g, job, creator)) return true;
  }
  return false;
}

}  // namespace tessel
