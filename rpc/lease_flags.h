// --lease_ttl_ms, defined once for every binary that holds or grants a
// registry lease (tessel-server, tessel-train, tessel-hybrid-train,
// tessel-registry, the examples): its default is kDefaultLeaseTtl
// (core/lease.h). LeaseTtlFromFlags refuses a value that is not positive,
// naming the flag, so a binary fails at start-up.
//
// Example:
//   absl::StatusOr<absl::Duration> ttl = LeaseTtlFromFlags();
//   if (!ttl.ok()) return Fail(ttl.status());
//   options.lease_ttl = *ttl;
#ifndef TESSEL_RPC_LEASE_FLAGS_H_
#define TESSEL_RPC_LEASE_FLAGS_H_

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

ABSL_DECLARE_FLAG(int, lease_ttl_ms);

namespace tessel {

// --lease_ttl_ms as a duration; InvalidArgument unless it is > 0.
absl::StatusOr<absl::Duration> LeaseTtlFromFlags();

}  // namespace tessel

#endif  // TESSEL_RPC_LEASE_FLAGS_H_
