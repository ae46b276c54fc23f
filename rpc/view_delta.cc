#include "rpc/view_delta.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

using Key = std::pair<int, int>;  // (role, rank)

Key KeyOf(const v1::Member& m) { return {static_cast<int>(m.role()), m.rank()}; }

}  // namespace

v1::View ViewDelta(const v1::View& from, const v1::View& to) {
  v1::View d;
  d.set_group(to.group());
  d.set_epoch(to.epoch());
  d.set_delta(true);
  d.set_base_epoch(from.epoch());
  std::map<Key, const v1::Member*> before;
  for (const v1::Member& m : from.members()) before[KeyOf(m)] = &m;
  for (const v1::Member& m : to.members()) {
    auto it = before.find(KeyOf(m));
    if (it == before.end() || it->second->SerializeAsString() != m.SerializeAsString()) {
      *d.add_members() = m;
    }
    if (it != before.end()) before.erase(it);
  }
  for (const auto& [key, m] : before) {
    v1::MemberKey* k = d.add_removed();
    k->set_role(m->role());
    k->set_rank(m->rank());
  }
  return d;
}

absl::Status ApplyViewDelta(const v1::View& delta, v1::View* view) {
  if (!delta.delta()) {
    *view = delta;
    return absl::OkStatus();
  }
  if (delta.base_epoch() != view->epoch()) {
    return absl::FailedPreconditionError(absl::StrCat("registry view delta from epoch ",
                                                      delta.base_epoch(),
                                                      " does not apply to epoch ", view->epoch()));
  }
  std::map<Key, v1::Member> members;
  for (const v1::Member& m : view->members()) members[KeyOf(m)] = m;
  for (const v1::MemberKey& k : delta.removed()) {
    members.erase({static_cast<int>(k.role()), k.rank()});
  }
  for (const v1::Member& m : delta.members()) members[KeyOf(m)] = m;
  v1::View out;
  out.set_group(delta.group());
  out.set_epoch(delta.epoch());
  for (auto& [key, m] : members) *out.add_members() = std::move(m);
  *view = std::move(out);
  return absl::OkStatus();
}

}  // namespace tessel
