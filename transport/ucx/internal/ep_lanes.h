// Lane parsing: which transports UCX chose for an endpoint, read from the
// text of ucp_ep_print_info (the one public view of an endpoint's lanes in
// UCX 1.13). The UCX transport picks a payload path per endpoint from it:
// descriptors read in place only where a lane maps the peer's memory
// (posix, sysv, xpmem); otherwise UCX's rendezvous, described by
// DescribeCopied. Pure: no UCX calls, any thread.
//
// Example:
//   EpLanes lanes = ParseEpInfo(text_of_ucp_ep_print_info);
//   peer.in_place = lanes.mappable;
//   peer.copied = DescribeCopied(lanes);  // "copied (rendezvous by RMA over cma)"
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_EP_LANES_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_EP_LANES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessel {
namespace ucx_internal {

// The transports UCX chose for an endpoint's lanes: those carrying active
// messages, those carrying RMA and rendezvous data (rma_bw), and whether
// one maps the peer's memory here (posix, sysv, xpmem). Each transport is
// named once, in lane order.
struct EpLanes {
  std::vector<std::string> am;
  std::vector<std::string> rma;
  bool mappable = false;
};

// From ucp_ep_print_info's text; lines that are not lanes are skipped, so
// any text gives a (possibly empty) result.
EpLanes ParseEpInfo(absl::string_view info);

// "copied (rendezvous by RMA over cma)", "copied (active messages over
// sysv)", or "copied" when no lane is known: how payloads to a peer move
// when not in place.
std::string DescribeCopied(const EpLanes& lanes);

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_EP_LANES_H_
