#include "rpc/lease_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/lease.h"

ABSL_FLAG(int, lease_ttl_ms, static_cast<int>(absl::ToInt64Milliseconds(tessel::kDefaultLeaseTtl)),
          "registry lease time-to-live, in milliseconds: a process that dies, stalls or is cut "
          "off is noticed about this long after (tessel-registry: the lease of members that do "
          "not ask for one; etcd rounds up to seconds)");

namespace tessel {

absl::StatusOr<absl::Duration> LeaseTtlFromFlags() {
  const int ms = absl::GetFlag(FLAGS_lease_ttl_ms);
  if (ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lease_ttl_ms must be > 0 (milliseconds); got ", ms));
  }
  return absl::Milliseconds(ms);
}

}  // namespace tessel
