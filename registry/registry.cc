#include "registry/registry.h"

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {
constexpr absl::Duration kMinTtl = absl::Milliseconds(100);
constexpr absl::Duration kMaxTtl = absl::Minutes(10);
}  // namespace

absl::Status ValidateJoin(const v1::Member& member, absl::Duration ttl) {
  if (member.group().empty()) return absl::InvalidArgumentError("member has no group (job name)");
  if (member.role() != v1::ROLE_WORKER && member.role() != v1::ROLE_SERVER) {
    return absl::InvalidArgumentError("member role must be WORKER or SERVER");
  }
  if (member.rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("member rank must be >= 0, got ", member.rank()));
  }
  if (ttl < kMinTtl || ttl > kMaxTtl) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl ", absl::FormatDuration(ttl), " is outside [100ms, 10m]"));
  }
  return absl::OkStatus();
}

std::string DescribeMember(const v1::Member& member) {
  return absl::StrCat(member.role() == v1::ROLE_SERVER ? "server " : "worker ", member.rank());
}

}  // namespace tessel
