// FakeTransport: a Transport for the frame-handler fuzz targets. It calls
// the installed handler with Incoming frames the target makes (as a hostile
// peer's would arrive) and honours the Accept exactly as the real transports
// do (transport/transport.h, inproc_transport.cc): a payload larger than
// Accept::capacity is dropped, nothing written, `done` runs with
// PayloadTooLarge; otherwise payload_bytes bytes are written at `dst`, so a
// handler whose capacity overstates its buffer is an AddressSanitizer report;
// borrowing needs in_place, which lives in a buffer of exactly payload_bytes
// until Release (or the end of the input). Sends are recorded (their payload
// read in full at once: a bad pointer or size is a report too) and their
// `done` runs after the handler returned, as on a progress thread.
//
// Threads: Send from any thread (a handler's own threads may send); the
// rest from the target's thread, which plays the progress thread.
//
// Invariants it checks (FUZZ_CHECK): every Release names a lease it lent,
// once.
//
// Example:
//   FakeTransport t;
//   DataChannel channel(&ctx, ...);  // installs its handler on t
//   FakeTransport::Outcome o = t.Deliver(7, header, payload_bytes, content, /*in_place=*/false);
#ifndef TESSEL_FUZZ_FAKE_TRANSPORT_H_
#define TESSEL_FUZZ_FAKE_TRANSPORT_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fuzz/frame_input.h"
#include "fuzz/fuzz_check.h"
#include "transport/transport.h"

namespace tessel::fuzz {

// The largest payload offered in place: the UCX transport offers one only
// inside a mapped region of the peer's payload memory (descriptor checks).
inline constexpr uint64_t kMaxInPlaceBytes = uint64_t{1} << 20;
// By default, far more than any buffer of the small jobs the targets make:
// a handler that gives more room has trusted a size its sender wrote.
inline constexpr uint64_t kMaxPlausibleCapacity = uint64_t{64} << 20;

class FakeTransport : public Transport {
 public:
  struct Sent {
    PeerId to = 0;
    std::vector<uint8_t> header;
    std::vector<uint8_t> payload;
  };
  // What became of one delivered frame.
  struct Outcome {
    bool refused = true;     // no room given (dst null, not borrowed), or a 0-byte frame
    bool written = false;    // payload bytes written at dst
    bool borrowed = false;   // read in place until Release
    bool too_large = false;  // dropped: larger than the capacity given
  };

  // `max_capacity`: the most room a handler may give one payload.
  explicit FakeTransport(uint64_t max_capacity = kMaxPlausibleCapacity)
      : max_capacity_(max_capacity) {}
  ~FakeTransport() override { Shutdown(); }

  std::string address() const override { return "fuzz"; }
  void SetHandler(Handler handler) override { handler_ = std::move(handler); }
  absl::StatusOr<PeerId> Connect(absl::string_view) override { return next_peer_++; }
  void Send(PeerId to, absl::Span<const uint8_t> header, const void* payload, size_t payload_bytes,
            SendDone done) override {
    Sent s{to, std::vector<uint8_t>(header.begin(), header.end()), {}};
    if (payload_bytes > 0) {
      FUZZ_CHECK(payload != nullptr, absl::StrCat("a send of ", payload_bytes, " bytes from null"));
      const auto* p = static_cast<const uint8_t*>(payload);
      s.payload.assign(p, p + payload_bytes);
    }
    absl::MutexLock lock(&mu_);
    sent_.push_back(std::move(s));
    if (done) pending_.push_back(std::move(done));
  }
  void Shutdown() override {
    while (SendDone d = TakePending()) d(absl::CancelledError("fuzz transport shut down"));
  }
  std::string name() const override { return "fuzz"; }
  void Release(PeerId from, uint64_t lease) override {
    FUZZ_CHECK(lent_.erase({from, lease}) == 1,
               absl::StrCat("Release(", from, ", ", lease, ") of a lease not lent or released"));
  }

  // Calls the handler with one frame from `from` and does what the Accept
  // says. `content` is repeated up to payload_bytes where bytes are needed.
  Outcome Deliver(PeerId from, const std::vector<uint8_t>& header, uint64_t payload_bytes,
                  const std::vector<uint8_t>& content, bool in_place) {
    Outcome out;
    Incoming in;
    in.from = from;
    in.header = absl::MakeConstSpan(header);
    in.payload_bytes = static_cast<size_t>(payload_bytes);
    if (in_place && payload_bytes > 0 && payload_bytes <= kMaxInPlaceBytes) {
      // A buffer of exactly the payload: reading past it is a report.
      in_place_.push_back(std::make_unique<std::vector<uint8_t>>(
          Materialize(content, static_cast<size_t>(payload_bytes))));
      in.in_place = in_place_.back()->data();
      in.lease = ++next_lease_;
    }
    // Lent before the handler runs: it may finish with the payload (and
    // Release it) before it returns.
    if (in.in_place != nullptr) lent_.insert({from, in.lease});
    Accept a = handler_ ? handler_(in) : Accept{};
    if (in.in_place != nullptr && !(a.borrow)) {
      FUZZ_CHECK(lent_.erase({from, in.lease}) == 1,
                 absl::StrCat("a handler released lease ", in.lease, " without borrowing it"));
    }
    if (a.borrow && in.in_place != nullptr) {
      out.borrowed = true;
      out.refused = false;
    } else {
      if (a.borrow) a.dst = nullptr;  // borrowing a copy: refused
      if (payload_bytes > 0 && a.dst != nullptr) {
        FUZZ_CHECK(a.capacity <= max_capacity_,
                   absl::StrCat("a handler gave room for ", a.capacity, " bytes to a frame of ",
                                payload_bytes));
        if (payload_bytes > a.capacity) {
          out.too_large = true;
          if (a.done) a.done(PayloadTooLarge(payload_bytes, a.capacity));
        } else {
          const std::vector<uint8_t> bytes =
              Materialize(content, static_cast<size_t>(payload_bytes));
          std::memcpy(a.dst, bytes.data(), bytes.size());
          out.written = true;
          out.refused = false;
          if (a.done) a.done(absl::OkStatus());
        }
      } else if (payload_bytes == 0 && a.done) {
        a.done(absl::OkStatus());
      }
    }
    RunCompletions();
    return out;
  }

  // Completes the sends queued so far (OK), as the progress thread would.
  void RunCompletions() {
    while (SendDone d = TakePending()) d(absl::OkStatus());
  }

  // The frames sent so far (a handler's other threads may send too).
  std::vector<Sent> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  size_t sent_count() {
    absl::MutexLock lock(&mu_);
    return sent_.size();
  }

 private:
  SendDone TakePending() {
    absl::MutexLock lock(&mu_);
    if (pending_.empty()) return nullptr;
    SendDone d = std::move(pending_.front());
    pending_.pop_front();
    return d;
  }

  const uint64_t max_capacity_;
  Handler handler_;
  PeerId next_peer_ = 1;
  uint64_t next_lease_ = 0;
  absl::Mutex mu_;
  std::vector<Sent> sent_ ABSL_GUARDED_BY(mu_);
  std::deque<SendDone> pending_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<PeerId, uint64_t>> lent_;
  // Payloads offered in place; kept until the transport goes (after the
  // handler's owner, which may still hold borrows).
  std::vector<std::unique_ptr<std::vector<uint8_t>>> in_place_;
};

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_FAKE_TRANSPORT_H_
