// The UCX flags every Abseil-flags binary that makes a UCX transport shares
// (tessel-server, tessel-train, tessel-hybrid-train, tessel-demo,
// tessel-replay, the benchmarks), defined once here: --ucx_tls,
// --ucx_port_range, --ucx_zero_copy, --ucx_peer_errors, --ucx_spin_us,
// --ucx_in_place_min_bytes. UcxOptionsFromFlags turns them into UcxOptions
// and refuses bad values with a message naming the flag, so a binary fails at
// start-up, not at its first transfer.
//
// The environment variable TESSEL_UCX_IN_PLACE_MIN_BYTES still overrides
// --ucx_in_place_min_bytes where a transport is made (ucx_options.h): tests
// set it for processes that take no flags (the Python binding).
//
// Example:
//   absl::ParseCommandLine(argc, argv);
//   absl::StatusOr<UcxOptions> ucx = UcxOptionsFromFlags();
//   if (!ucx.ok()) return Fail(ucx.status());
//   TESSEL_ASSIGN_OR_RETURN(auto transport, UcxTransport::Create(*ucx));
#ifndef TESSEL_TRANSPORT_UCX_UCX_FLAGS_H_
#define TESSEL_TRANSPORT_UCX_UCX_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "transport/ucx/ucx_options.h"

ABSL_DECLARE_FLAG(std::string, ucx_tls);
ABSL_DECLARE_FLAG(std::string, ucx_port_range);
ABSL_DECLARE_FLAG(bool, ucx_zero_copy);
ABSL_DECLARE_FLAG(bool, ucx_peer_errors);
ABSL_DECLARE_FLAG(int64_t, ucx_spin_us);
ABSL_DECLARE_FLAG(std::string, poll_mode);
ABSL_DECLARE_FLAG(int64_t, ucx_in_place_min_bytes);

namespace tessel {

// The flags as UcxOptions; InvalidArgument naming the flag for a negative
// --ucx_spin_us or --ucx_in_place_min_bytes, or a malformed --ucx_port_range.
absl::StatusOr<UcxOptions> UcxOptionsFromFlags();

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_UCX_FLAGS_H_
