// //tests:attacker's transport attacks (Tessel issue 42): UCX messages below
// the frames, written by hand over a raw UCP worker as any process on the
// host could, at one peer of a running job (docs/security.md, "Sizes,
// descriptors and transport messages"):
//   out_of_region   zero-copy DESCRIPTORs whose payload lies outside the
//                   region they describe (1 MiB into a 64 KiB region), and
//                   DESCRIPTORs re-describing the region as 1 GiB so the
//                   same offset would pass; each carries a frame header of
//                   the job. Read, they would copy what lies past the
//                   attacker's mapping.
//   forged_release  RELEASEs of guessed lease ids (random 64-bit numbers):
//                   ending another endpoint's zero-copy send early would let
//                   its sender reuse memory its receiver still reads.
//   hello_flood     HELLOs from more endpoints than the peer dials for
//                   (UcxTransport::kMaxSpareEndpoints), each naming an
//                   address to dial (a third party's or the attacker's
//                   own), and each repeated.
//
// Example:
//   std::map<std::string, int64_t> sent;
//   absl::Status s = AttackTransport(to, "posix,sysv,self", {"hello_flood"},
//                                    header, third_party, &sent);
#ifndef TESSEL_TESTS_ATTACK_TRANSPORT_H_
#define TESSEL_TESTS_ATTACK_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"

namespace tessel {

// Whether `kind` is one of the kinds above.
bool IsTransportKind(const std::string& kind);

// Sends the `kinds` above to the UCX address `to` (raw bytes) over `tls`
// (UCX_TLS; "" = UCX's default). `header`: the 64-byte frame header the
// descriptors carry; `third_party`: the address HELLOs name besides the
// attacker's own. Adds the messages sent per kind to `sent`.
absl::Status AttackTransport(const std::string& to, const std::string& tls,
                             const std::set<std::string>& kinds, const std::string& header,
                             const std::string& third_party, std::map<std::string, int64_t>* sent);

}  // namespace tessel

#endif  // TESSEL_TESTS_ATTACK_TRANSPORT_H_
