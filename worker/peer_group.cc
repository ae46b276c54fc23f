#include "worker/peer_group.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "runtime/frame_auth.h"
#include "runtime/log.h"
#include "runtime/metrics.h"
#include "worker/peer_message.h"

namespace tessel {
namespace {

// `s` with `context` appended to its message, payloads kept (they carry,
// e.g., that a failure is recoverable).
absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  absl::Status out(s.code(), absl::StrCat(s.message(), context));
  s.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

// FNV-1a: a stable hash of the group name, the same in every process.
uint64_t GroupId(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

PeerGroup::PeerGroup(std::unique_ptr<Transport> transport, int rank, int size,
                     PeerGroupOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      group_id_(GroupId(options_.name)),
      transport_(std::move(transport)),
      unauthenticated_metric_(
          metrics::Default()
              .AddCounter("tessel_peer_messages_unauthenticated_total",
                          "worker-to-worker (hybrid mesh) messages dropped for a missing or wrong "
                          "tag",
                          {"group", "rank"})
              .GetCounter({options_.name, absl::StrCat(rank)})) {
  {
    absl::MutexLock lock(&mu_);
    peers_.assign(static_cast<size_t>(std::max(size_, 0)), -1);
  }
  transport_->SetHandler([this](const Incoming& in) { return OnMessage(in); });
}

PeerGroup::~PeerGroup() { Shutdown(); }

void PeerGroup::Shutdown() { transport_->Shutdown(); }

std::string PeerGroup::Describe(int rank) const {
  if (options_.describe) return options_.describe(rank);
  return absl::StrCat("rank ", rank);
}

std::string PeerGroup::Where() const {
  return absl::StrCat("group '", options_.name, "' ", Describe(rank_));
}

absl::Status PeerGroup::Connect(const std::vector<std::string>& addresses) {
  if (static_cast<int>(addresses.size()) != size_) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": Connect got ", addresses.size(),
                                                   " addresses for a group of ", size_));
  }
  absl::MutexLock lock(&mu_);
  addresses_ = addresses;
  return absl::OkStatus();
}

absl::StatusOr<PeerId> PeerGroup::PeerFor(int rank) {
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    if (peers_[rank] >= 0) return static_cast<PeerId>(peers_[rank]);
    if (addresses_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(), ": send to ", Describe(rank), " before Connect()"));
    }
    address = addresses_[rank];
  }
  // Not under mu_: the transport's progress thread may need mu_ (OnMessage)
  // before it gets to the connect.
  absl::StatusOr<PeerId> id = transport_->Connect(address);
  if (!id.ok()) {
    return absl::UnavailableError(
        absl::StrCat(Where(), ": cannot reach ", Describe(rank), ": ", id.status().message()));
  }
  absl::MutexLock lock(&mu_);
  if (peers_[rank] < 0) peers_[rank] = static_cast<int64_t>(*id);
  return static_cast<PeerId>(peers_[rank]);
}

void PeerGroup::SetAuth(std::shared_ptr<FrameAuth> auth) {
  absl::MutexLock lock(&mu_);
  auth_ = std::move(auth);
}

bool PeerGroup::authenticated() {
  absl::MutexLock lock(&mu_);
  return auth_ != nullptr;
}

int64_t PeerGroup::refused_oversized() {
  absl::MutexLock lock(&mu_);
  return refused_oversized_;
}

int64_t PeerGroup::refused_unauthenticated() {
  absl::MutexLock lock(&mu_);
  return refused_unauthenticated_;
}

Accept PeerGroup::OnMessage(const Incoming& in) {
  // A tagged header is the 40 header bytes and their tag.
  const bool tagged = in.header.size() == kPeerHeaderBytes + kFrameTagBytes;
  const absl::Span<const uint8_t> header =
      tagged ? in.header.subspan(0, kPeerHeaderBytes) : in.header;
  absl::StatusOr<PeerMessageHeader> h = DecodePeerHeader(header);
  if (!h.ok()) {
    TESSEL_LOG(WARNING) << Where() << ": refused a message: " << h.status().message();
    return Accept{};
  }
  std::shared_ptr<FrameAuth> auth;
  {
    absl::MutexLock lock(&mu_);
    auth = auth_;
  }
  if (auth != nullptr && (!tagged || !auth->VerifyTag(header, in.header.subspan(kPeerHeaderBytes),
                                                      static_cast<int64_t>(h->generation.epoch)))) {
    int64_t refused = 0;
    {
      absl::MutexLock lock(&mu_);
      refused = ++refused_unauthenticated_;
    }
    unauthenticated_metric_->Add();
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << Where() << ": dropping an unauthenticated message (" << (tagged ? "wrong" : "no")
        << " tag; says it is from rank " << h->from << ", generation " << h->generation.ToString()
        << ", tag " << h->tag << "; " << refused << " dropped so far)";
    return Accept{};
  }
  if (h->group_id != group_id_) {
    TESSEL_LOG(WARNING) << Where() << ": refused a message of another group (id " << h->group_id
                        << ")";
    return Accept{};
  }
  if (h->from < 0 || h->from >= size_ || h->from == rank_) {
    TESSEL_LOG(WARNING) << Where() << ": refused a message from rank " << h->from << " (group of "
                        << size_ << ")";
    return Accept{};
  }
  if (h->payload_bytes != in.payload_bytes) {
    TESSEL_LOG(WARNING) << Where() << ": refused a message from " << Describe(h->from)
                        << ": header says " << h->payload_bytes << " payload bytes, got "
                        << in.payload_bytes;
    return Accept{};
  }
  const Key key{h->from, h->generation, h->tag};
  absl::MutexLock lock(&mu_);
  if (h->generation < generation_) return Accept{};  // sent before a Reset: dropped
  uint64_t unclaimed = 0;
  for (const auto& [k, slot] : inbox_) unclaimed += slot.data.size();
  if (h->payload_bytes > options_.max_message_bytes ||
      h->payload_bytes > options_.max_inbox_bytes - std::min(unclaimed, options_.max_inbox_bytes)) {
    const int64_t refused = ++refused_oversized_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << Where() << ": refused a message of " << h->payload_bytes << " bytes from "
        << Describe(h->from) << " (tag " << h->tag << "; at most " << options_.max_message_bytes
        << " per message and " << options_.max_inbox_bytes << " unclaimed, " << unclaimed
        << " held now; " << refused << " refused so far)";
    return Accept{};
  }
  if (inbox_.contains(key)) {
    if (error_.ok()) {
      error_ = absl::InternalError(
          absl::StrCat(Where(), ": a second message with tag ", h->tag, " from ", Describe(h->from),
                       " arrived before the first was received (tags must be unique per step)"));
    }
    return Accept{};
  }
  Slot& slot = inbox_[key];
  slot.data.resize(h->payload_bytes);
  // The vector's buffer stays put while the map rehashes (a move keeps it),
  // and nobody takes the slot before it is complete.
  return Accept{slot.data.data(), slot.data.size(), [this, key](absl::Status s) {
                  absl::MutexLock lock(&mu_);
                  auto it = inbox_.find(key);
                  if (it == inbox_.end()) return;
                  if (key.generation < generation_) {  // Reset while it was landing
                    inbox_.erase(it);
                    return;
                  }
                  if (!s.ok()) {
                    inbox_.erase(it);
                    if (error_.ok()) {
                      error_ = absl::Status(
                          s.code(), absl::StrCat(Where(), ": receiving tag ", key.tag, " from ",
                                                 Describe(key.from), ": ", s.message()));
                    }
                    return;
                  }
                  it->second.complete = true;
                }};
}

absl::Status PeerGroup::Send(int peer, uint64_t tag, std::vector<float> data) {
  auto buffer = std::make_shared<std::vector<float>>(std::move(data));
  const void* at = buffer->data();
  const size_t bytes = buffer->size() * sizeof(float);
  return SendPayload(peer, tag, std::move(buffer), at, bytes);
}

absl::Status PeerGroup::SendBytes(int peer, uint64_t tag, std::string bytes) {
  auto buffer = std::make_shared<std::string>(std::move(bytes));
  const void* at = buffer->data();
  const size_t size = buffer->size();
  return SendPayload(peer, tag, std::move(buffer), at, size);
}

absl::Status PeerGroup::SendPayload(int peer, uint64_t tag, std::shared_ptr<const void> owner,
                                    const void* data, size_t bytes) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": cannot send to rank ", peer, " (group of ", size_, ")"));
  }
  {
    absl::MutexLock lock(&mu_);
    TESSEL_RETURN_IF_ERROR(error_);
  }
  TESSEL_ASSIGN_OR_RETURN(PeerId to, PeerFor(peer));
  PeerMessageHeader h;
  h.group_id = group_id_;
  h.from = rank_;
  h.tag = tag;
  h.payload_bytes = bytes;
  std::shared_ptr<FrameAuth> auth;
  {
    absl::MutexLock lock(&mu_);
    h.generation = generation_;
    auth = auth_;
    ++outstanding_sends_;
  }
  std::vector<uint8_t> header = EncodePeerHeader(h);
  if (auth != nullptr) {
    const std::array<uint8_t, kFrameTagBytes> tag =
        auth->TagOf(header, static_cast<int64_t>(h.generation.epoch));
    header.insert(header.end(), tag.begin(), tag.end());
  }
  // A send of an older generation (abandoned by a Reset: perhaps to an
  // endpoint its peer renewed, which may never answer) neither counts for
  // Flush nor fails the current generation when it ends.
  transport_->Send(
      to, absl::MakeConstSpan(header), data, bytes,
      [this, owner = std::move(owner), peer, tag, generation = h.generation](absl::Status s) {
        absl::MutexLock lock(&mu_);
        if (generation != generation_) return;
        --outstanding_sends_;
        if (!s.ok() && error_.ok()) {
          error_ = absl::Status(s.code(), absl::StrCat(Where(), ": sending tag ", tag, " to ",
                                                       Describe(peer), ": ", s.message()));
        }
      });
  return absl::OkStatus();
}

bool PeerGroup::AwaitOrFail(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (;;) {
    std::shared_ptr<const std::function<absl::Status()>> health;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, &done]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !error_.ok() || done(); };
      const absl::Time slice = std::min(deadline, absl::Now() + options_.health_period);
      if (mu_.AwaitWithDeadline(absl::Condition(&ready), slice)) return done();
      if (absl::Now() >= deadline) return false;
      health = health_;
    }
    if (health != nullptr && *health) {
      absl::Status s = (*health)();
      if (!s.ok()) Abort(std::move(s));
    }
  }
}

absl::StatusOr<std::vector<uint8_t>> PeerGroup::RecvPayload(int peer, uint64_t tag,
                                                            absl::string_view what) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": cannot receive from rank ", peer, " (group of ", size_, ")"));
  }
  Key key{peer, PeerGeneration{}, tag};
  {
    absl::MutexLock lock(&mu_);
    key.generation = generation_;
  }
  AwaitOrFail([this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = inbox_.find(key);
    return it != inbox_.end() && it->second.complete;
  });
  absl::MutexLock lock(&mu_);
  auto it = inbox_.find(key);
  if (it != inbox_.end() && it->second.complete) {
    std::vector<uint8_t> data = std::move(it->second.data);
    inbox_.erase(it);
    return data;
  }
  if (!error_.ok()) {
    return WithContext(error_,
                       absl::StrCat(" (while waiting for ", what, " from ", Describe(peer), ")"));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(Where(), ": timed out after ", absl::FormatDuration(options_.timeout),
                   " waiting for ", what, " from ", Describe(peer), " (tag ", tag,
                   "); is that process alive and at the "
                   "same step?"));
}

absl::StatusOr<std::string> PeerGroup::RecvBytes(int peer, uint64_t tag, absl::string_view what) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<uint8_t> data, RecvPayload(peer, tag, what));
  return std::string(data.begin(), data.end());
}

absl::StatusOr<std::vector<float>> PeerGroup::Recv(int peer, uint64_t tag, absl::string_view what,
                                                   int64_t expected) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<uint8_t> data, RecvPayload(peer, tag, what));
  if (data.size() % sizeof(float) != 0 ||
      (expected >= 0 && static_cast<int64_t>(data.size() / sizeof(float)) != expected)) {
    return absl::InternalError(absl::StrCat(
        Where(), ": ", what, " from ", Describe(peer), " has ", data.size(), " bytes, expected ",
        expected >= 0 ? absl::StrCat(expected) : "whole", " floats"));
  }
  std::vector<float> out(data.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), data.data(), data.size());  // never memcpy(nullptr)
  return out;
}

absl::Status PeerGroup::Flush() {
  const bool done =
      AwaitOrFail([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outstanding_sends_ == 0; });
  absl::MutexLock lock(&mu_);
  if (!done && error_.ok()) {
    return absl::DeadlineExceededError(absl::StrCat(Where(), ": ", outstanding_sends_,
                                                    " send(s) still in flight after ",
                                                    absl::FormatDuration(options_.timeout)));
  }
  return error_;
}

void PeerGroup::Reset(PeerGeneration generation) {
  absl::MutexLock lock(&mu_);
  if (generation <= generation_) return;
  generation_ = generation;
  error_ = absl::OkStatus();
  outstanding_sends_ = 0;  // those in flight belong to the older generation
  // Messages of older generations are never received now. Those still
  // landing keep their buffers until they complete (then they are dropped).
  for (auto it = inbox_.begin(); it != inbox_.end();) {
    auto here = it++;
    if (here->first.generation < generation && here->second.complete) inbox_.erase(here);
  }
}

std::vector<std::string> PeerGroup::addresses() {
  absl::MutexLock lock(&mu_);
  return addresses_;
}

void PeerGroup::UpdateAddresses(const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  if (addresses.size() != addresses_.size()) return;
  for (size_t r = 0; r < addresses.size(); ++r) {
    if (addresses[r] == addresses_[r]) continue;
    // The old endpoint is abandoned, not closed: its peer is gone.
    addresses_[r] = addresses[r];
    peers_[r] = -1;
  }
}

absl::StatusOr<PeerGroup::Message> PeerGroup::RecvAny(uint64_t tag, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, tag]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, slot] : inbox_) {
      if (key.tag == tag && key.generation >= generation_ && slot.complete) return true;
    }
    return false;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(Where(), ": no message with tag ", tag,
                                                    " within ", absl::FormatDuration(timeout)));
  }
  auto newest = inbox_.end();
  for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
    if (it->first.tag == tag && it->first.generation >= generation_ && it->second.complete &&
        (newest == inbox_.end() || it->first.generation > newest->first.generation)) {
      newest = it;
    }
  }
  if (newest == inbox_.end()) {
    return absl::InternalError(absl::StrCat(Where(), ": RecvAny lost its message"));
  }
  Message m{newest->first.from, newest->first.generation,
            std::string(newest->second.data.begin(), newest->second.data.end())};
  inbox_.erase(newest);
  return m;
}

absl::Status PeerGroup::RenewEndpoint() {
  // Not under mu_: the transport's progress thread may need mu_ (the
  // completions of operations the reset cancels) before the reset returns.
  if (absl::Status s = transport_->Reset(); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat(Where(), ": cannot renew its endpoint: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  std::fill(peers_.begin(), peers_.end(), -1);
  if (!addresses_.empty()) addresses_[rank_] = transport_->address();
  return absl::OkStatus();
}

PeerGeneration PeerGroup::generation() {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void PeerGroup::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = std::move(status);
}

void PeerGroup::SetHealthCheck(std::function<absl::Status()> check) {
  auto shared =
      check ? std::make_shared<const std::function<absl::Status()>>(std::move(check)) : nullptr;
  absl::MutexLock lock(&mu_);
  health_ = std::move(shared);
}

}  // namespace tessel
