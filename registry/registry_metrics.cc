#include "registry/registry_metrics.h"

namespace tessel {

RegistryFamilies& RegistryMetrics() {
  static RegistryFamilies* f = [] {
    metrics::Registry& r = metrics::Default();
    auto* families = new RegistryFamilies{
        r.AddGauge("tessel_registry_members", "live members, by group and role", {"group", "role"}),
        r.AddGauge("tessel_registry_leases", "live leases", {}),
        r.AddGauge("tessel_registry_groups", "groups the registry knows (emptied ones too)", {}),
        r.AddGauge("tessel_registry_group_epoch", "each group's membership epoch", {"group"}),
        r.AddCounter("tessel_registry_evictions_total",
                     "members removed without leaving: lease_expired, health_check", {"cause"}),
        r.AddGauge("tessel_registry_watch_streams", "open Watch streams", {}),
    };
    // Present from the start, so a rate() or an alert has a series at 0.
    families->evictions.GetCounter({"lease_expired"});
    families->evictions.GetCounter({"health_check"});
    families->watch_streams.GetGauge({});
    return families;
  }();
  return *f;
}

}  // namespace tessel
