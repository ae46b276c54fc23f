#include "registry/backend_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
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
  if (absl::Status available = Available(backend); !available.ok()) return available;
  if (backend == "memory") return std::make_unique<MemoryRegistry>(options.default_ttl);
  if (etcd_ == nullptr) {
    auto started = EtcdProcess::Start(dir_);
    if (!started.ok()) return started.status();
    etcd_ = std::move(*started);
  }
  auto etcd = EtcdRegistry::Connect({.endpoints = {etcd_->endpoint()},
                                     .prefix = options.etcd_prefix,
                                     .default_ttl = options.default_ttl});
  if (!etcd.ok()) return etcd.status();
  return std::unique_ptr<Registry>(std::move(*etcd));
}

}  // namespace tessel
