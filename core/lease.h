// The default registry lease: how long after a process stops renewing its
// lease (it died, stalled or was cut off) the registry drops it and the
// others hear of it. Every role's default and flag (--lease_ttl_ms,
// rpc/lease_flags.h), the registry backends' default, and the test clusters
// take it from here.
//
// Example:
//   absl::Duration ttl = kDefaultLeaseTtl;   // 3 s
//   absl::Duration renew_every = ttl / 3;    // rpc/registry_client.cc
#ifndef TESSEL_CORE_LEASE_H_
#define TESSEL_CORE_LEASE_H_

#include "absl/time/time.h"

namespace tessel {

inline constexpr absl::Duration kDefaultLeaseTtl = absl::Seconds(3);

}  // namespace tessel

#endif  // TESSEL_CORE_LEASE_H_
