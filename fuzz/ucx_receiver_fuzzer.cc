// Fuzz target: the UCX transport's zero-copy bookkeeping as its DESCRIPTOR
// and RELEASE handlers (transport/ucx/ucx_zero_copy.cc OnDescriptor,
// OnRelease) drive it, without UCX: DecodeDescriptor, then RemoteKeyCache
// (transport/ucx/internal/remote_key_cache.h, over a fake RemoteKeyOps that
// maps each region as a buffer of exactly its first-described size), the
// in-place payload read at mapped + offset, borrows and their ends; and
// DecodeRelease into SendLeases::TakeFrom for the leases of this side's own
// sends. The handlers themselves call UCX (ucp_am_*, reply endpoints) and
// offer no seam: their glue here mirrors OnDescriptor/OnRelease line by
// line, and what they add (the peer table, HELLO) is not covered.
//
// Input (fuzz/frame_input.h frames; the header bytes are the AM header): a
// frame's target bits pick the operation (bits 0-1) and the endpoint it
// comes from (bits 2-3):
//   0 DESCRIPTOR (header = the descriptor), kInPlace: the handler borrows it
//   1 RELEASE from that endpoint (header = the release; with kSeal its lease
//     field indexes the leases this side opened, which are random numbers)
//   2 this side sends to that endpoint in place (SendLeases::Open)
//   3 the handler ends its oldest borrow (Release), or with kSeal the
//     endpoint's worker is reset (RetireWorker) ; time moves 10 s (key idling)
//
// Invariants besides "no crash, no sanitizer report":
//   - a payload read lies inside its region as first described (ASan: the
//     fake mapping is exactly that size), and a borrowed payload stays
//     readable until its borrow ends (it is read again after every step);
//   - a region described again with another base or size is refused
//     (InvalidArgument) and nothing of it is read;
//   - at most kKeysPerEndpoint unborrowed keys per endpoint;
//   - a RELEASE ends a lease only from the peer it was sent to, once; its
//     `done` runs once; a misdirected one is counted and leaves it held;
//   - EndBorrow ends exactly the borrows that were made (see the note on
//     duplicate borrows in the DESCRIPTOR step).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fuzz/frame_input.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/quiet_logs.h"
#include "transport/ucx/internal/descriptor_codec.h"
#include "transport/ucx/internal/remote_key_cache.h"
#include "transport/ucx/internal/send_leases.h"

namespace tessel::fuzz {
namespace {

using ucx_internal::DescriptorView;
using ucx_internal::RemoteKey;
using ucx_internal::RemoteKeyCache;
using ucx_internal::RemoteKeyOps;
using ucx_internal::SendLeases;

// Regions larger than this are "not mappable here" (the resend path).
constexpr uint64_t kMaxMappedBytes = uint64_t{1} << 16;

// Unpacks a key to a handle, maps it as a buffer of the size the descriptor
// being handled describes (set_described), frees it on Destroy.
class FakeKeyOps : public RemoteKeyOps {
 public:
  explicit FakeKeyOps(std::set<void*>* live) : live_(live) {}
  void set_described(uint64_t region_bytes) { described_ = region_bytes; }
  absl::StatusOr<void*> Unpack(void*, absl::Span<const uint8_t> packed) override {
    if (packed[0] == 0xff) return absl::UnavailableError("fake: an rkey of another pod");
    auto* mapping = new std::vector<char>();
    if (described_ <= kMaxMappedBytes && packed[0] != 0xfe) {
      mapping->assign(static_cast<size_t>(described_), 'r');
    }
    live_->insert(mapping);
    return static_cast<void*>(mapping);
  }
  char* Map(void* rkey, uint64_t) override {
    auto* mapping = static_cast<std::vector<char>*>(rkey);
    // An empty region maps to a valid, zero-length allocation.
    return described_ <= kMaxMappedBytes && !mapping->empty() ? mapping->data()
           : described_ == 0 && mapping->empty()              ? reinterpret_cast<char*>(mapping)
                                                              : nullptr;
  }
  void Destroy(void* rkey) override {
    FUZZ_CHECK(live_->erase(rkey) == 1, "a remote key destroyed twice or never made");
    delete static_cast<std::vector<char>*>(rkey);
  }
  void DestroyWorker(void* worker) override { destroyed_workers_.push_back(worker); }

 private:
  std::set<void*>* const live_;
  uint64_t described_ = 0;
  std::vector<void*> destroyed_workers_;
};

struct Borrowed {
  PeerId from;
  uint64_t lease;
  const char* data;
  uint64_t bytes;
};

uint64_t Checksum(const char* p, uint64_t n) {
  uint64_t h = 0;
  for (uint64_t i = 0; i < n; ++i) h = h * 31 + static_cast<unsigned char>(p[i]);
  return h;
}

}  // namespace
}  // namespace tessel::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) { return tessel::fuzz::QuietLogs(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  using namespace tessel::fuzz;
  constexpr int kEndpoints = 4;
  // The configuration byte (ConfigByte): none yet.

  std::set<void*> live;  // fake mappings alive
  auto owned_ops = std::make_unique<FakeKeyOps>(&live);
  FakeKeyOps& ops = *owned_ops;
  std::deque<Borrowed> borrows;
  uint64_t sink = 0;  // what was read, so the reads are not optimized away
  {
    RemoteKeyCache keys(std::move(owned_ops));
    SendLeases leases;
    std::vector<uint64_t> opened;        // lease numbers, in order
    std::map<uint64_t, PeerId> sent_to;  // lease -> peer, while held
    std::map<uint64_t, int> done_runs;   // lease -> times its done ran
    // Endpoints and workers are opaque handles: distinct addresses.
    char endpoints[kEndpoints] = {};
    char workers[2] = {};
    int worker = 0;
    absl::Time now = absl::UnixEpoch();

    ForEachFrame(data, size, [&](const FuzzFrame& f) {
      const int op = f.target_bits() & 3;
      const int e = (f.target_bits() >> 2) & 3;
      const PeerId from = static_cast<PeerId>(e + 1);
      void* ep = &endpoints[e];
      const absl::Span<const uint8_t> am_header = absl::MakeConstSpan(f.header);
      if (op == 0) {  // DESCRIPTOR, as OnDescriptor
        absl::StatusOr<DescriptorView> d = ucx_internal::DecodeDescriptor(am_header);
        if (!d.ok()) return;
        const ucx_internal::DescriptorFields& head = d->fields;
        FUZZ_CHECK(head.offset + head.bytes <= head.region_bytes &&
                       head.offset + head.bytes >= head.offset,
                   "a descriptor outside its region was decoded");
        ops.set_described(head.region_bytes);
        absl::StatusOr<RemoteKey*> key = keys.Get(ep, &workers[worker], head.region, d->rkey,
                                                  head.remote_base, head.region_bytes, now);
        if (!key.ok()) return;  // re-described (InvalidArgument) or not unpackable: not read
        FUZZ_CHECK(
            (*key)->remote_base == head.remote_base && (*key)->region_bytes == head.region_bytes,
            absl::StrCat("region ", head.region, " was taken as described otherwise"));
        if ((*key)->mapped == nullptr) return;  // not mappable: resend, nothing read
        // OnDescriptor drops, unread, a descriptor whose (peer, lease) is
        // still borrowed (a replay: a second borrow would lose the first;
        // found by this target: fuzz/crashes/ucx_receiver/duplicate_borrow_lost).
        if (keys.IsBorrowed(from, head.lease)) return;
        const char* payload = (*key)->mapped + head.offset;
        sink += Checksum(payload, head.bytes);  // the copy into the receiver's buffer
        const bool again = std::any_of(borrows.begin(), borrows.end(), [&](const Borrowed& b) {
          return b.from == from && b.lease == head.lease;
        });
        FUZZ_CHECK(!again, "a lease still borrowed was borrowed again");
        if (f.in_place()) {
          keys.Borrow(from, head.lease, *key);
          borrows.push_back({from, head.lease, payload, head.bytes});
        }
      } else if (op == 1) {  // RELEASE, as OnRelease
        std::vector<uint8_t> wire = f.header;
        if (f.seal() && !opened.empty() && wire.size() >= 8) {
          uint64_t index = 0;
          std::memcpy(&index, wire.data(), 8);
          const uint64_t lease = opened[index % opened.size()];
          std::memcpy(wire.data(), &lease, 8);
        }
        absl::StatusOr<ucx_internal::Release> m =
            ucx_internal::DecodeRelease(absl::MakeConstSpan(wire));
        if (!m.ok()) return;
        const uint64_t misdirected = leases.misdirected();
        const size_t held = leases.size();
        std::optional<SendLeases::Lease> l = leases.TakeFrom(m->lease, from);
        auto it = sent_to.find(m->lease);
        if (it != sent_to.end() && it->second == from) {
          FUZZ_CHECK(l.has_value() && l->peer == from, "a RELEASE from its peer did not end it");
          sent_to.erase(it);
          if (l->done) l->done(absl::OkStatus());
        } else {
          FUZZ_CHECK(!l.has_value() && leases.size() == held,
                     "a RELEASE ended a lease that was not its sender's");
          FUZZ_CHECK(leases.misdirected() == misdirected + (it != sent_to.end() ? 1 : 0),
                     "a misdirected RELEASE was not counted");
        }
      } else if (op == 2) {  // this side sends in place to the endpoint
        auto lease_of = std::make_shared<uint64_t>(0);
        const uint64_t lease =
            leases.Open({from,
                         [&done_runs, lease_of](absl::Status) { ++done_runs[*lease_of]; },
                         {},
                         nullptr,
                         0});
        *lease_of = lease;
        FUZZ_CHECK(lease != 0 && sent_to.count(lease) == 0, "a lease number 0 or held twice");
        opened.push_back(lease);
        sent_to[lease] = from;
      } else if (f.seal()) {                  // the endpoint's worker is reset
        keys.RetireWorker(&workers[worker]);  // false: the caller destroys it (a fake: nothing)
        worker ^= 1;
      } else if (!borrows.empty()) {  // the handler ends its oldest borrow
        const Borrowed b = borrows.front();
        borrows.pop_front();
        bool tell_sender = false;
        FUZZ_CHECK(keys.EndBorrow(b.from, b.lease, &tell_sender),
                   absl::StrCat("the borrow of (", b.from, ", ", b.lease,
                                ") was lost: EndBorrow does not know it"));
      } else {
        now += absl::Seconds(10);
      }
      // Borrowed payloads stay readable until their borrow ends.
      for (const Borrowed& b : borrows) sink += Checksum(b.data, b.bytes);
      FUZZ_CHECK(keys.size() <= static_cast<size_t>(kEndpoints) *
                                    (ucx_internal::kKeysPerEndpoint + borrows.size()),
                 absl::StrCat(keys.size(), " keys cached"));
    });
    for (const auto& [lease, runs] : done_runs) {
      FUZZ_CHECK(runs == 1, absl::StrCat("lease ", lease, "'s done ran ", runs, " times"));
    }
    borrows.clear();
    keys.Clear();
  }
  FUZZ_CHECK(live.empty(), absl::StrCat(live.size(), " remote keys never destroyed"));
  if (sink == 42) std::fputc('\0', stderr);  // keeps the reads
  return 0;
}
