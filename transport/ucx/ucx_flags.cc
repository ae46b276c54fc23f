#include "transport/ucx/ucx_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, ucx_tls, "",
          "UCX transports (UCX_TLS), e.g. posix,sysv,self (shared memory) or tcp. Empty: UCX's "
          "default for a process started by hand; posix,sysv,self for the local clusters "
          "tessel-demo and tessel-replay start");
ABSL_FLAG(std::string, ucx_port_range, "",
          "LO-HI: UCX's tcp transport listens only on ports in this range (UCX_TCP_PORT_RANGE), "
          "so a firewall or NetworkPolicy can name them; empty = any port");
ABSL_FLAG(bool, ucx_zero_copy, true,
          "payloads in UCX payload memory travel as descriptors that a peer on this host reads "
          "in place through shared memory (gradients are reduced straight from the workers' "
          "memory, parameters copied once from the servers'); false = every payload is copied "
          "through UCX's queues, as before (for comparisons)");
ABSL_FLAG(bool, ucx_peer_errors, false,
          "use UCX peer error handling (tcp only on one host; detects dead peers in UCX)");
ABSL_FLAG(int64_t, ucx_spin_us, 5000,
          "the UCX progress thread keeps polling (yielding the CPU) this many microseconds "
          "after the last activity before it sleeps on the event fd; 0: sleep at once");
ABSL_FLAG(std::string, poll_mode, "auto",
          "whether Tessel's threads poll after their last work (the UCX progress thread for "
          "--ucx_spin_us, a shard server's update threads for --update_spin_us): auto polls "
          "while the polling threads of every Tessel process on this host fit its cores (counted "
          "in /dev/shm/tessel-spin) and otherwise polls at most 200 us before it sleeps on the "
          "wake-up fd; spin always polls; event never does");
ABSL_FLAG(int64_t, ucx_in_place_min_bytes, 16 << 10,
          "payloads of at least this many bytes in payload memory travel as descriptors to "
          "peers that can map them (smaller ones are copied through UCX's queues); the "
          "environment variable TESSEL_UCX_IN_PLACE_MIN_BYTES overrides it");

namespace tessel {

absl::StatusOr<UcxOptions> UcxOptionsFromFlags() {
  UcxOptions o;
  o.tls = absl::GetFlag(FLAGS_ucx_tls);
  o.tcp_port_range = absl::GetFlag(FLAGS_ucx_port_range);
  o.zero_copy = absl::GetFlag(FLAGS_ucx_zero_copy);
  o.peer_error_handling = absl::GetFlag(FLAGS_ucx_peer_errors);
  const int64_t spin_us = absl::GetFlag(FLAGS_ucx_spin_us);
  if (spin_us < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ucx_spin_us=", spin_us, " must be 0 or more microseconds"));
  }
  o.spin = absl::Microseconds(spin_us);
  absl::StatusOr<SpinMode> mode = ParseSpinMode(absl::GetFlag(FLAGS_poll_mode));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--poll_mode: ", mode.status().message()));
  }
  o.poll_mode = *mode;
  const int64_t min_bytes = absl::GetFlag(FLAGS_ucx_in_place_min_bytes);
  if (min_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ucx_in_place_min_bytes=", min_bytes, " must be 0 or more bytes"));
  }
  o.in_place_min_bytes = static_cast<size_t>(min_bytes);
  absl::Status valid = ValidateUcxOptions(o);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--ucx_port_range: ", valid.message()));
  }
  return o;
}

}  // namespace tessel
