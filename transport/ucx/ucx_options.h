// UcxOptions: how a UCX endpoint is made. A plain struct with no UCX types,
// so public headers (the worker SDK's options) can carry it. Binaries fill
// it from their --ucx_* flags (transport/ucx/ucx_flags.h); UcxTransport
// validates it (ValidateUcxOptions) and applies the environment's test knob
// (WithUcxEnvironment) when it starts.
//
// Example:
//   UcxOptions o;
//   o.tls = "posix,sysv,self";
//   TESSEL_RETURN_IF_ERROR(ValidateUcxOptions(o));
#ifndef TESSEL_TRANSPORT_UCX_UCX_OPTIONS_H_
#define TESSEL_TRANSPORT_UCX_UCX_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/spin_mode.h"

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
  // then sleep on the event fd (--ucx_spin_us). Not negative.
  absl::Duration spin = absl::Milliseconds(5);
  // Whether that polling happens (--poll_mode, runtime/spin_budget.h): kAuto
  // polls while this host's polling threads fit its cores, else sleeps on
  // the event fd at once; kSpin always polls; kEvent never does.
  SpinMode poll_mode = SpinMode::kAuto;
  // Payloads of at least `in_place_min_bytes` that lie in payload memory
  // (payload_memory()) travel as descriptors to peers whose endpoint has a
  // shared-memory lane (chosen at connect time): the peer reads them in
  // place. Other peers (another host, no shared memory in UCX_TLS) get them
  // by UCX's rendezvous, RMA on the endpoint's rma_bw lanes. false: every
  // payload goes through UCX's queues (for comparisons).
  bool zero_copy = true;
  // (--ucx_in_place_min_bytes.) The environment variable
  // TESSEL_UCX_IN_PLACE_MIN_BYTES, when set, overrides it in every process
  // that makes a transport, including those without flags (tests set 0 to
  // send every payload-memory payload as a descriptor, however small).
  size_t in_place_min_bytes = 16 << 10;
};

// InvalidArgument, saying what is wrong, if tcp_port_range is not "" or
// "LO-HI" with 1 <= LO <= HI <= 65535, or spin is negative.
absl::Status ValidateUcxOptions(const UcxOptions& options);

// `options` with TESSEL_UCX_IN_PLACE_MIN_BYTES applied when it is set;
// InvalidArgument naming the variable unless it is a non-negative integer.
absl::StatusOr<UcxOptions> WithUcxEnvironment(UcxOptions options);

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_UCX_OPTIONS_H_
