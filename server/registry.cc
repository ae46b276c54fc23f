#include "server/registry.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessel {
namespace {
constexpr absl::Duration kMinTtl = absl::Milliseconds(100);
constexpr absl::Duration kMaxTtl = absl::Minutes(10);
}  // namespace

Registry::Registry(absl::Duration default_ttl, std::function<absl::Time()> clock)
    : default_ttl_(default_ttl), clock_(std::move(clock)) {}

absl::StatusOr<Registry::Joined> Registry::Join(const v1::Member& member, absl::Duration ttl) {
  if (member.group().empty()) return absl::InvalidArgumentError("member has no group (job name)");
  if (member.role() != v1::ROLE_WORKER && member.role() != v1::ROLE_SERVER) {
    return absl::InvalidArgumentError("member role must be WORKER or SERVER");
  }
  if (member.rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("member rank must be >= 0, got ", member.rank()));
  }
  if (ttl == absl::ZeroDuration()) ttl = default_ttl_;
  if (ttl < kMinTtl || ttl > kMaxTtl) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl ", absl::FormatDuration(ttl), " is outside [100ms, 10m]"));
  }
  absl::MutexLock lock(&mu_);
  Group& g = groups_[member.group()];
  auto slot = std::make_pair(static_cast<int>(member.role()), member.rank());
  auto it = g.lease_by_slot.find(slot);
  if (it != g.lease_by_slot.end()) {
    const Lease& held = leases_.at(it->second);
    return absl::AlreadyExistsError(
        absl::StrCat("group '", member.group(), "' already has a live ",
                     member.role() == v1::ROLE_WORKER ? "worker" : "server", " of rank ",
                     member.rank(), " (pid ", held.member.pid(), " on ", held.member.host(),
                     "); stop it or wait for its lease to lapse"));
  }
  int64_t id;
  do {
    id = absl::Uniform<int64_t>(lease_ids_, 1, std::numeric_limits<int64_t>::max());
  } while (leases_.contains(id));
  leases_[id] = Lease{member.group(), member, ttl, clock_() + ttl};
  g.lease_by_slot[slot] = id;
  ++g.epoch;
  return Joined{id, ttl, ViewLocked(member.group())};
}

absl::StatusOr<int64_t> Registry::Heartbeat(int64_t lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::NotFoundError(
        absl::StrCat("lease ", lease_id, " is unknown or has lapsed; join again"));
  }
  it->second.expires = clock_() + it->second.ttl;
  return groups_[it->second.group].epoch;
}

absl::Status Registry::Leave(int64_t lease_id) {
  absl::MutexLock lock(&mu_);
  if (!leases_.contains(lease_id)) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " is unknown or has lapsed"));
  }
  RemoveLocked(lease_id);
  return absl::OkStatus();
}

void Registry::RemoveLocked(int64_t lease_id) {
  auto it = leases_.find(lease_id);
  Group& g = groups_[it->second.group];
  g.lease_by_slot.erase(
      std::make_pair(static_cast<int>(it->second.member.role()), it->second.member.rank()));
  ++g.epoch;
  leases_.erase(it);
}

int Registry::ExpireLeases() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  std::vector<int64_t> lapsed;
  for (const auto& [id, lease] : leases_) {
    if (lease.expires < now) lapsed.push_back(id);
  }
  for (int64_t id : lapsed) RemoveLocked(id);
  return static_cast<int>(lapsed.size());
}

v1::View Registry::ViewLocked(const std::string& group) {
  v1::View view;
  view.set_group(group);
  auto it = groups_.find(group);
  if (it == groups_.end()) return view;
  view.set_epoch(it->second.epoch);
  for (const auto& [slot, lease_id] : it->second.lease_by_slot) {
    *view.add_members() = leases_.at(lease_id).member;
  }
  return view;
}

v1::View Registry::GetView(const std::string& group) {
  absl::MutexLock lock(&mu_);
  return ViewLocked(group);
}

std::vector<v1::View> Registry::ListGroups() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::View> views;
  for (const auto& [name, g] : groups_) views.push_back(ViewLocked(name));
  return views;
}

bool Registry::WaitForChange(const std::string& group, int64_t after_epoch, absl::Duration timeout,
                             v1::View* view) {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = groups_.find(group);
    return it != groups_.end() && it->second.epoch > after_epoch;
  };
  // Conditions re-evaluate on every unlock of mu_.
  struct Arg {
    decltype(changed)* f;
  } arg{&changed};
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](Arg* a) { return (*a->f)(); }, &arg),
                       timeout);
  if (!changed()) return false;
  *view = ViewLocked(group);
  return true;
}

}  // namespace tessel
