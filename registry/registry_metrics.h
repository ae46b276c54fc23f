// The registry's Prometheus metrics (served at tessel-registry
// --metrics_address; control-RPC latency comes from rpc/grpc_metrics.h):
//   tessel_registry_members{group,role}        live members (role: server, worker)
//   tessel_registry_leases                     live leases
//   tessel_registry_groups                     groups known, emptied ones included
//   tessel_registry_group_epoch{group}         each group's membership epoch
//   tessel_registry_evictions_total{cause}     lease_expired, health_check
//   tessel_registry_watch_streams              open Watch streams
#ifndef TESSEL_REGISTRY_REGISTRY_METRICS_H_
#define TESSEL_REGISTRY_REGISTRY_METRICS_H_

#include "runtime/metrics.h"

namespace tessel {

struct RegistryFamilies {
  metrics::Family& members;
  metrics::Family& leases;
  metrics::Family& groups;
  metrics::Family& epoch;
  metrics::Family& evictions;
  metrics::Family& watch_streams;
};

RegistryFamilies& RegistryMetrics();

}  // namespace tessel

#endif  // TESSEL_REGISTRY_REGISTRY_METRICS_H_
