#include "transport/inproc/inproc_transport.h"

#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tessel {

// Heap blocks by address; a send takes a reference, so a block freed while
// a message from it is queued or borrowed lives until that ends.
class InProcMemory : public PayloadMemory {
 public:
  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    std::shared_ptr<uint8_t[]> block(new uint8_t[bytes]());
    absl::MutexLock lock(&mu_);
    blocks_[reinterpret_cast<uintptr_t>(block.get())] = {bytes, block};
    return block.get();
  }
  bool Free(void* p) override {
    absl::MutexLock lock(&mu_);
    return blocks_.erase(reinterpret_cast<uintptr_t>(p)) > 0;
  }
  // The block holding [p, p + bytes), or null.
  std::shared_ptr<const void> Find(const void* p, size_t bytes) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    absl::MutexLock lock(&mu_);
    auto it = blocks_.upper_bound(at);
    if (it == blocks_.begin()) return nullptr;
    --it;
    if (at + bytes > it->first + it->second.first) return nullptr;
    return it->second.second;
  }

 private:
  absl::Mutex mu_;
  std::map<uintptr_t, std::pair<size_t, std::shared_ptr<uint8_t[]>>> blocks_ ABSL_GUARDED_BY(mu_);
};

std::string InProcFabric::Register(InProcTransport* t) {
  absl::MutexLock lock(&mu_);
  std::string address = absl::StrCat("inproc:", next_++);
  endpoints_[address] = t;
  return address;
}

void InProcFabric::Unregister(const std::string& address) {
  absl::MutexLock lock(&mu_);
  endpoints_.erase(address);
}

InProcTransport* InProcFabric::Find(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(address);
  return it == endpoints_.end() ? nullptr : it->second;
}

bool InProcFabric::PostTo(const std::string& address, InProcTransport* expected,
                          std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(address);
  if (it == endpoints_.end() || it->second != expected) return false;
  it->second->Post(std::move(task));
  return true;
}

std::unique_ptr<InProcTransport> InProcTransport::Create(std::shared_ptr<InProcFabric> fabric) {
  return std::unique_ptr<InProcTransport>(new InProcTransport(std::move(fabric)));
}

InProcTransport::InProcTransport(std::shared_ptr<InProcFabric> fabric)
    : fabric_(std::move(fabric)), memory_(std::make_shared<InProcMemory>()) {
  address_ = fabric_->Register(this);
  thread_ = std::thread([this] { Loop(); });
}

InProcTransport::~InProcTransport() { Shutdown(); }

void InProcTransport::SetHandler(Handler handler) { handler_ = std::move(handler); }

absl::StatusOr<PeerId> InProcTransport::Connect(absl::string_view address) {
  InProcTransport* t = fabric_->Find(std::string(address));
  if (t == nullptr) {
    return absl::UnavailableError(absl::StrCat("no in-process endpoint at '", address, "'"));
  }
  return PeerFor(t, std::string(address));
}

PeerId InProcTransport::PeerFor(InProcTransport* t, const std::string& address) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].first == t && peers_[i].second == address) return i;
  }
  peers_.emplace_back(t, address);
  return peers_.size() - 1;
}

void InProcTransport::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  tasks_.push_back(std::move(task));
}

void InProcTransport::Send(PeerId to, absl::Span<const uint8_t> header, const void* payload,
                           size_t payload_bytes, SendDone done) {
  InProcTransport* target = nullptr;
  std::string target_address;
  {
    absl::MutexLock lock(&mu_);
    if (to < peers_.size()) std::tie(target, target_address) = peers_[to];
  }
  std::vector<uint8_t> h(header.begin(), header.end());
  // A payload in payload memory travels by reference (the block stays alive
  // with it); any other is copied now: the sender's buffer is not read once
  // Send returns, so an endpoint torn down with sends queued leaves nothing
  // dangling.
  std::shared_ptr<const void> block =
      payload_bytes > 0 ? memory_->Find(payload, payload_bytes) : nullptr;
  std::shared_ptr<const std::vector<uint8_t>> copy;
  if (block != nullptr) {
    MarkInPlace(to);
  } else {
    const uint8_t* bytes = static_cast<const uint8_t*>(payload);
    copy = std::make_shared<const std::vector<uint8_t>>(
        payload_bytes > 0 ? bytes : nullptr, payload_bytes > 0 ? bytes + payload_bytes : nullptr);
  }
  auto shared_done = std::make_shared<SendDone>(std::move(done));
  const bool queued =
      target != nullptr &&
      fabric_->PostTo(target_address, target,
                      [target, sender = this, sender_address = address_, h = std::move(h), copy,
                       block, payload, payload_bytes, shared_done]() mutable {
                        // Runs on the target's thread: the target is alive.
                        target->Deliver(sender, sender_address, std::move(h), copy, block, payload,
                                        payload_bytes, std::move(*shared_done));
                      });
  if (!queued) {
    Post([shared_done, to] {
      if (*shared_done) {
        (*shared_done)(
            absl::UnavailableError(absl::StrCat("in-process peer ", to, " is not connected")));
      }
    });
  }
}

void InProcTransport::Deliver(InProcTransport* sender, const std::string& sender_address,
                              std::vector<uint8_t> header,
                              std::shared_ptr<const std::vector<uint8_t>> copy,
                              std::shared_ptr<const void> block, const void* in_place, size_t bytes,
                              SendDone done) {
  Incoming in;
  in.from = PeerFor(sender, sender_address);
  in.header = absl::MakeConstSpan(header);
  in.payload_bytes = bytes;
  const void* data = copy != nullptr ? static_cast<const void*>(copy->data()) : in_place;
  if (block != nullptr) {
    in.in_place = in_place;
    in.lease = next_lease_++;
  }
  Accept accept = handler_ ? handler_(in) : Accept{};
  if (block != nullptr && (accept.borrow || accept.dst != nullptr)) MarkInPlace(in.from);
  if (accept.borrow && in.in_place != nullptr) {
    borrowed_[in.lease] =
        Borrow{std::move(block), sender, sender_address, std::move(done), in.from};
    return;
  }
  if (accept.borrow) accept.dst = nullptr;  // borrowing a copy: refused
  if (bytes > 0 && accept.dst != nullptr && bytes > accept.capacity) {
    // Never written past the room its receiver gave (transport.h).
    if (accept.done) accept.done(PayloadTooLarge(bytes, accept.capacity));
    accept.dst = nullptr;
    accept.done = nullptr;
  }
  if (bytes > 0 && accept.dst != nullptr) std::memcpy(accept.dst, data, bytes);
  if ((bytes == 0 || accept.dst != nullptr) && accept.done) accept.done(absl::OkStatus());
  // Complete on the sender's thread, if it is still there.
  fabric_->PostTo(sender_address, sender, [done = std::move(done)] {
    if (done) done(absl::OkStatus());
  });
}

std::shared_ptr<PayloadMemory> InProcTransport::payload_memory() { return memory_; }

void InProcTransport::Release(PeerId from, uint64_t lease) {
  Post([this, from, lease] {
    auto it = borrowed_.find(lease);
    // A lease ends only through the peer it came from.
    if (it == borrowed_.end() || it->second.from != from) return;
    Borrow b = std::move(it->second);
    borrowed_.erase(it);
    fabric_->PostTo(b.sender_address, b.sender, [done = std::move(b.done)] {
      if (done) done(absl::OkStatus());
    });
  });
}

void InProcTransport::MarkInPlace(PeerId peer) {
  absl::MutexLock lock(&mu_);
  if (in_place_peers_.size() <= peer) in_place_peers_.resize(peer + 1, 0);
  in_place_peers_[peer] = 1;
}

std::string InProcTransport::PayloadPath(PeerId peer) {
  absl::MutexLock lock(&mu_);
  return peer < in_place_peers_.size() && in_place_peers_[peer] ? "in place" : "copied";
}

void InProcTransport::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](InProcTransport* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || !t->tasks_.empty(); },
          this));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void InProcTransport::Shutdown() {
  if (!thread_.joinable()) return;
  fabric_->Unregister(address_);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  // Borrows still open end with the endpoint: their senders hear so.
  for (auto& [lease, b] : borrowed_) {
    fabric_->PostTo(b.sender_address, b.sender, [done = std::move(b.done)] {
      if (done) done(absl::CancelledError("in-process receiver shut down while borrowing"));
    });
  }
  borrowed_.clear();
}

}  // namespace tessel
