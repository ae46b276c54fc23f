#include "registry/memory/memory_registry.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {

MemoryRegistry::MemoryRegistry(absl::Duration default_ttl, std::function<absl::Time()> clock)
    : default_ttl_(default_ttl),
      clock_(std::move(clock)),
      epoch_base_(absl::ToUnixMicros(absl::Now())) {}

absl::StatusOr<Registry::Joined> MemoryRegistry::Join(const v1::Member& member,
                                                      absl::Duration ttl) {
  if (ttl == absl::ZeroDuration()) ttl = default_ttl_;
  TESSEL_RETURN_IF_ERROR(ValidateJoin(member, ttl));
  absl::MutexLock lock(&mu_);
  auto [group, created] = groups_.try_emplace(member.group());
  Group& g = group->second;
  if (created) g.epoch = epoch_base_;
  auto slot = std::make_pair(static_cast<int>(member.role()), member.rank());
  auto it = g.lease_by_slot.find(slot);
  if (it != g.lease_by_slot.end()) {
    const Lease& held = leases_.at(it->second);
    return absl::AlreadyExistsError(absl::StrCat("group '", member.group(), "' already has a live ",
                                                 DescribeMember(member), " (pid ",
                                                 held.member.pid(), " on ", held.member.host(),
                                                 "); stop it or wait for its lease to lapse"));
  }
  // Random 63-bit lease ids: the id is what renews or ends a membership, so
  // another client must not be able to guess it.
  int64_t id;
  do {
    id = absl::Uniform<int64_t>(lease_ids_, 1, std::numeric_limits<int64_t>::max());
  } while (leases_.contains(id));
  ++g.epoch;
  v1::Member joined = member;
  joined.set_joined_epoch(g.epoch);
  leases_[id] = Lease{member.group(), std::move(joined), ttl, clock_() + ttl};
  g.lease_by_slot[slot] = id;
  return Joined{id, ttl, ViewLocked(member.group())};
}

absl::StatusOr<int64_t> MemoryRegistry::Heartbeat(int64_t lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::NotFoundError(
        absl::StrCat("lease ", lease_id, " is unknown or has lapsed; join again"));
  }
  it->second.expires = clock_() + it->second.ttl;
  return groups_[it->second.group].epoch;
}

absl::Status MemoryRegistry::Leave(int64_t lease_id) {
  absl::MutexLock lock(&mu_);
  if (!leases_.contains(lease_id)) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " is unknown or has lapsed"));
  }
  RemoveLocked(lease_id);
  return absl::OkStatus();
}

void MemoryRegistry::RemoveLocked(int64_t lease_id) {
  auto it = leases_.find(lease_id);
  Group& g = groups_[it->second.group];
  g.lease_by_slot.erase(
      std::make_pair(static_cast<int>(it->second.member.role()), it->second.member.rank()));
  ++g.epoch;
  leases_.erase(it);
}

int MemoryRegistry::ExpireLeases() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  std::vector<int64_t> lapsed;
  for (const auto& [id, lease] : leases_) {
    if (lease.expires < now) lapsed.push_back(id);
  }
  for (int64_t id : lapsed) RemoveLocked(id);
  return static_cast<int>(lapsed.size());
}

v1::View MemoryRegistry::ViewLocked(const std::string& group) {
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

absl::StatusOr<v1::View> MemoryRegistry::GetView(const std::string& group) {
  absl::MutexLock lock(&mu_);
  return ViewLocked(group);
}

absl::StatusOr<std::vector<v1::View>> MemoryRegistry::ListGroups() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::View> views;
  for (const auto& [name, g] : groups_) views.push_back(ViewLocked(name));
  return views;
}

absl::StatusOr<std::vector<Registry::Leased>> MemoryRegistry::ListMembers() {
  absl::MutexLock lock(&mu_);
  std::vector<Leased> members;
  for (const auto& [name, g] : groups_) {
    for (const auto& [slot, lease_id] : g.lease_by_slot) {
      members.push_back(Leased{lease_id, leases_.at(lease_id).member});
    }
  }
  return members;
}

absl::StatusOr<v1::View> MemoryRegistry::WaitForChange(const std::string& group,
                                                       int64_t after_epoch,
                                                       absl::Duration timeout) {
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
  if (!changed()) {
    return absl::DeadlineExceededError(absl::StrCat("group '", group, "' stayed at or below epoch ",
                                                    after_epoch, " for ",
                                                    absl::FormatDuration(timeout)));
  }
  return ViewLocked(group);
}

}  // namespace tessel
