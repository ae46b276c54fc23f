#include "worker/collectives.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessel {
namespace {

// The caller's index in `members`, after checking they are ascending ranks
// of the group that include it.
absl::StatusOr<int> SelfIn(const PeerGroup& group, absl::Span<const int> members,
                           absl::string_view collective) {
  int self = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= group.size() || (i > 0 && members[i] <= members[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(group.Describe(group.rank()), ": ", collective,
                                                     " members must be ascending ranks in [0, ",
                                                     group.size(), "), got {",
                                                     absl::StrJoin(members, ", "), "}"));
    }
    if (members[i] == group.rank()) self = static_cast<int>(i);
  }
  if (self < 0) {
    return absl::InvalidArgumentError(absl::StrCat(group.Describe(group.rank()), ": ", collective,
                                                   " over {", absl::StrJoin(members, ", "),
                                                   "} without this rank"));
  }
  return self;
}

}  // namespace

absl::Status AllReduceSum(PeerGroup& group, absl::Span<const int> members, uint64_t tag,
                          absl::Span<float> data, absl::string_view what) {
  TESSEL_ASSIGN_OR_RETURN(int self, SelfIn(group, members, "AllReduceSum"));
  if (members.size() == 1) return absl::OkStatus();
  for (int m : members) {
    if (m == group.rank()) continue;
    TESSEL_RETURN_IF_ERROR(group.Send(m, tag, std::vector<float>(data.begin(), data.end())));
  }
  std::vector<std::vector<float>> got(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == self) continue;
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> v,
                            group.Recv(members[i], tag, what, static_cast<int64_t>(data.size())));
    got[i] = std::move(v);
  }
  got[self].assign(data.begin(), data.end());
  // Left to right in member order: the same bits on every member.
  std::vector<float>& acc = got[0];
  for (size_t i = 1; i < got.size(); ++i) {
    const float* add = got[i].data();
    for (size_t e = 0; e < acc.size(); ++e) acc[e] += add[e];
  }
  std::copy(acc.begin(), acc.end(), data.begin());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> AllGather(PeerGroup& group, absl::Span<const int> members,
                                                   uint64_t tag, absl::string_view mine,
                                                   absl::string_view what) {
  TESSEL_ASSIGN_OR_RETURN(int self, SelfIn(group, members, "AllGather"));
  for (int m : members) {
    if (m == group.rank()) continue;
    TESSEL_RETURN_IF_ERROR(group.SendBytes(m, tag, std::string(mine)));
  }
  std::vector<std::string> all(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == self) {
      all[i] = std::string(mine);
      continue;
    }
    TESSEL_ASSIGN_OR_RETURN(std::string theirs, group.RecvBytes(members[i], tag, what));
    all[i] = std::move(theirs);
  }
  return all;
}

absl::Status Broadcast(PeerGroup& group, absl::Span<const int> members, int root, uint64_t tag,
                       std::string* bytes, absl::string_view what) {
  TESSEL_RETURN_IF_ERROR(SelfIn(group, members, "Broadcast"));
  if (std::find(members.begin(), members.end(), root) == members.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        group.Describe(group.rank()), ": Broadcast from rank ", root, ", which is not a member"));
  }
  if (group.rank() != root) {
    TESSEL_ASSIGN_OR_RETURN(std::string got, group.RecvBytes(root, tag, what));
    *bytes = std::move(got);
    return absl::OkStatus();
  }
  for (int m : members) {
    if (m == root) continue;
    TESSEL_RETURN_IF_ERROR(group.SendBytes(m, tag, *bytes));
  }
  return absl::OkStatus();
}

absl::Status Barrier(PeerGroup& group, absl::Span<const int> members, uint64_t tag,
                     absl::string_view what) {
  return AllReduceSum(group, members, tag, absl::Span<float>(), what);
}

}  // namespace tessel
