// UcxOptions: how a UCX endpoint is made. A plain struct with no UCX types,
// so public headers (the worker SDK's options) can carry it.
#ifndef TESSEL_TRANSPORT_UCX_UCX_OPTIONS_H_
#define TESSEL_TRANSPORT_UCX_UCX_OPTIONS_H_

#include <string>

#include "absl/time/time.h"

namespace tessel {

struct UcxOptions {
  // UCX_TLS for this endpoint ("" = UCX's environment or default).
  std::string tls;
  bool peer_error_handling = false;
  // "LO-HI": UCX's tcp transport listens only on ports in this range
  // (UCX_TCP_PORT_RANGE), so a firewall or NetworkPolicy can name them.
  // "" = any port.
  std::string tcp_port_range = {};
  // Keep polling (with sched_yield) this long after the last activity,
  // then sleep on the event fd. The environment variable
  // TESSEL_UCX_SPIN_US, when set, overrides it (a tuning knob).
  absl::Duration spin = absl::Milliseconds(5);
  // Payloads of at least `in_place_min_bytes` that lie in payload memory
  // (payload_memory()) travel as descriptors to peers whose endpoint has a
  // shared-memory lane (chosen at connect time): the peer reads them in
  // place. Other peers (another host, no shared memory in UCX_TLS) get them
  // by UCX's rendezvous, RMA on the endpoint's rma_bw lanes. false: every
  // payload goes through UCX's queues (for comparisons).
  bool zero_copy = true;
  // The environment variable TESSEL_UCX_IN_PLACE_MIN_BYTES, when set,
  // overrides it (tests set 0 to send every payload-memory payload as a
  // descriptor, however small).
  size_t in_place_min_bytes = 16 << 10;
};

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_UCX_OPTIONS_H_
