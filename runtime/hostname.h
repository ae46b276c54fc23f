// Identity from the host name, for processes run by Kubernetes controllers.
//
// Example (tessel-server --shard_from_hostname):
//   absl::StatusOr<int> shard = OrdinalFromHostname();  // "tessel-server-3" -> 3
//   if (!shard.ok()) return Fail(shard.status());
#ifndef TESSEL_RUNTIME_HOSTNAME_H_
#define TESSEL_RUNTIME_HOSTNAME_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

// $HOSTNAME when set (containers have it), else gethostname().
std::string HostName();

// The trailing "-N" of `name` (a StatefulSet pod's ordinal: "tessel-server-3"
// is 3). InvalidArgument naming the name when it has none.
absl::StatusOr<int> OrdinalOf(absl::string_view name);

// OrdinalOf(HostName()).
absl::StatusOr<int> OrdinalFromHostname();

}  // namespace tessel

#endif  // TESSEL_RUNTIME_HOSTNAME_H_
