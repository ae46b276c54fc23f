// JoinMesh (worker/peer_group.h): peer discovery through the registry. In a
// file of its own so that peer_group.cc, the message handling, does not
// need the gRPC registry client (fuzz/peer_group_fuzzer.cc builds it alone).
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "rpc/registry_client.h"
#include "worker/peer_group.h"

namespace tessel {

namespace {

v1::Member MeshMember(const std::string& group, int rank, const std::string& address) {
  v1::Member me;
  me.set_group(group);
  me.set_role(v1::ROLE_WORKER);
  me.set_rank(rank);
  me.set_ucx_address(address);
  me.set_pid(getpid());
  return me;
}

// Joins as `me`, and while the registry still holds the rank (AlreadyExists:
// a predecessor's membership not lapsed yet) tries again every 100 ms until
// `deadline` (InfinitePast: once only).
absl::StatusOr<v1::View> JoinRetrying(RegistryClient* registry, const v1::Member& me,
                                      absl::Time deadline) {
  absl::StatusOr<v1::View> joined = registry->Join(me);
  while (!joined.ok() && absl::IsAlreadyExists(joined.status()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    joined = registry->Join(me);
  }
  return joined;
}

}  // namespace

absl::Status RejoinMesh(RegistryClient* registry, const std::string& group, int rank,
                        const std::string& address, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // A failed Leave leaves the old membership to lapse: the join below waits.
  (void)registry->Leave();
  absl::StatusOr<v1::View> joined =
      JoinRetrying(registry, MeshMember(group, rank, address), deadline);
  if (!joined.ok()) {
    return absl::Status(joined.status().code(),
                        absl::StrCat("rank ", rank, " could not join group '", group,
                                     "' again under its new address: ", joined.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<MeshView> JoinMesh(RegistryClient* registry, const std::string& group, int rank,
                                  int size, const std::string& address, absl::Duration timeout,
                                  bool wait_for_rank) {
  absl::StatusOr<v1::View> joined =
      JoinRetrying(registry, MeshMember(group, rank, address),
                   wait_for_rank ? absl::Now() + timeout : absl::InfinitePast());
  if (!joined.ok()) {
    return absl::Status(joined.status().code(),
                        absl::StrCat("rank ", rank, " could not join group '", group,
                                     "': ", joined.status().message()));
  }
  int stray = -1;
  absl::StatusOr<v1::View> view = registry->WaitForView(
      group,
      [&](const v1::View& v) {
        int present = 0;
        for (const v1::Member& m : v.members()) {
          if (m.role() != v1::ROLE_WORKER) continue;
          if (m.rank() >= size) {
            stray = m.rank();
            return true;
          }
          ++present;
        }
        return present == size;
      },
      timeout);
  if (!view.ok()) {
    std::vector<int> missing;
    absl::StatusOr<v1::View> last = registry->GetView(group);
    for (int r = 0; r < size && last.ok(); ++r) {
      bool found = false;
      for (const v1::Member& m : last->members()) found |= m.rank() == r;
      if (!found) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank, ": not all ", size, " ranks joined group '", group, "' within ",
        absl::FormatDuration(timeout), "; missing rank(s) {", absl::StrJoin(missing, ", "),
        "}: start them, or check that every process got the same world size (",
        view.status().message(), ")"));
  }
  if (stray >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, ": group '", group, "' has a member of rank ", stray,
                     " but this process expects ", size,
                     " ranks: every process must be started with the "
                     "same world size (dp*tp*pp)"));
  }
  MeshView out;
  out.addresses.resize(size);
  out.incarnations.resize(size);
  out.epoch = view->epoch();
  for (const v1::Member& m : view->members()) {
    if (m.role() != v1::ROLE_WORKER) continue;
    out.addresses[m.rank()] = m.ucx_address();
    out.incarnations[m.rank()] = m.incarnation();
  }
  return out;
}

}  // namespace tessel
