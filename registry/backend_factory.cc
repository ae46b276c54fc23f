#include "registry/backend_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "registry/etcd/etcd_registry.h"
#include "registry/memory/memory_registry.h"

namespace tessel {

std::vector<std::string> RegistryBackends::Names() { return {"memory", "etcd"}; }

absl::Status RegistryBackends::Available(absl::string_view backend) {
  if (backend == "memory") return absl::OkStatus();
  if (backend == "etcd") {
    return EtcdProcess::Available() ? absl::OkStatus()
                                    : absl::FailedPreconditionError(EtcdProcess::kMissing);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no registry backend '", backend, "' (there are 'memory' and 'etcd')"));
}

RegistryBackends::RegistryBackends(std::string dir) : dir_(std::move(dir)) {}

absl::StatusOr<std::unique_ptr<Registry>> RegistryBackends::Make(
    absl::string_view backend, const RegistryBackendOptions& options) {
  TESSEL_RETURN_IF_ERROR(Available(backend));
  if (backend == "memory") return std::make_unique<MemoryRegistry>(options.default_ttl);
  if (etcd_ == nullptr) {
    TESSEL_ASSIGN_OR_RETURN(etcd_, EtcdProcess::Start(dir_));
  }
  TESSEL_ASSIGN_OR_RETURN(auto etcd, EtcdRegistry::Connect({.endpoints = {etcd_->endpoint()},
                                                            .prefix = options.etcd_prefix,
                                                            .default_ttl = options.default_ttl}));
  return std::unique_ptr<Registry>(std::move(etcd));
}

}  // namespace tessel
