#include "registry/lease_holders.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessel {

void LeaseHolders::Bind(int64_t lease_id, std::string identity) {
  absl::MutexLock lock(&mu_);
  holders_[lease_id] = std::move(identity);
}

absl::Status LeaseHolders::Check(int64_t lease_id, const std::string& identity,
                                 absl::string_view rpc) {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(lease_id);
  if (it == holders_.end() || it->second == identity) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "this registry refuses ", rpc, " of lease ", lease_id,
      ": the lease was granted to another credential at Join, and only the credential that "
      "joined with a lease may renew or end it (present the same token or certificate as the "
      "Join did)"));
}

void LeaseHolders::BindIfUnknown(int64_t lease_id, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  holders_.try_emplace(lease_id, identity);
}

void LeaseHolders::Forget(int64_t lease_id) {
  absl::MutexLock lock(&mu_);
  holders_.erase(lease_id);
}

void LeaseHolders::Retain(const std::set<int64_t>& live) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(holders_, [&](const auto& entry) { return live.count(entry.first) == 0; });
}

size_t LeaseHolders::size() {
  absl::MutexLock lock(&mu_);
  return holders_.size();
}

}  // namespace tessel
