#include "rpc/caller.h"

#include "core/job_name.h"

namespace tessel {

bool Grant::Covers(absl::string_view job) const {
  if (jobs.empty() || job.empty()) return true;
  for (const std::string& scope : jobs) {
    if (JobInScope(scope, job)) return true;
  }
  return false;
}

bool Caller::Has(Role role) const {
  for (const Grant& g : grants) {
    if (g.role == role) return true;
  }
  return false;
}

bool Caller::MayActOnJob(absl::string_view job) const {
  for (const Grant& g : grants) {
    if (g.role == Role::kAdmin) return true;
    if (g.role == Role::kWorker && g.Covers(job)) return true;
  }
  return false;
}

}  // namespace tessel
