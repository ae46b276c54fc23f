// --registry, the membership registry's host:port, defined once for every
// binary that joins a registry (tessel-server, tessel-train,
// tessel-hybrid-train, the examples). RegistryAddressFromFlags refuses an
// empty value with a message naming the flag. Linking this library also
// brings --lease_ttl_ms (rpc/lease_flags.h): whoever joins holds a lease.
//
// Example:
//   absl::StatusOr<std::string> registry = RegistryAddressFromFlags();
//   if (!registry.ok()) return Fail(registry.status());
#ifndef TESSEL_RPC_REGISTRY_FLAGS_H_
#define TESSEL_RPC_REGISTRY_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "rpc/lease_flags.h"

ABSL_DECLARE_FLAG(std::string, registry);

namespace tessel {

// --registry; InvalidArgument when it is empty.
absl::StatusOr<std::string> RegistryAddressFromFlags();

}  // namespace tessel

#endif  // TESSEL_RPC_REGISTRY_FLAGS_H_
