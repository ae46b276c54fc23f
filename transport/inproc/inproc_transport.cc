#include "transport/inproc/inproc_transport.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessel {

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

std::unique_ptr<InProcTransport> InProcTransport::Create(std::shared_ptr<InProcFabric> fabric) {
  return std::unique_ptr<InProcTransport>(new InProcTransport(std::move(fabric)));
}

InProcTransport::InProcTransport(std::shared_ptr<InProcFabric> fabric)
    : fabric_(std::move(fabric)) {
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
  return PeerFor(t);
}

PeerId InProcTransport::PeerFor(InProcTransport* t) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i] == t) return i;
  }
  peers_.push_back(t);
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
  {
    absl::MutexLock lock(&mu_);
    if (to < peers_.size()) target = peers_[to];
  }
  std::vector<uint8_t> h(header.begin(), header.end());
  if (target == nullptr || fabric_->Find(target->address_) != target) {
    Post([done = std::move(done), to] {
      done(absl::UnavailableError(absl::StrCat("in-process peer ", to, " is not connected")));
    });
    return;
  }
  target->Post([target, sender = this, h = std::move(h), payload, payload_bytes,
                done = std::move(done)]() mutable {
    target->Deliver(sender, std::move(h), payload, payload_bytes, std::move(done));
  });
}

void InProcTransport::Deliver(InProcTransport* sender, std::vector<uint8_t> header,
                              const void* payload, size_t bytes, SendDone done) {
  Incoming in;
  in.from = PeerFor(sender);
  in.header = absl::MakeConstSpan(header);
  in.payload_bytes = bytes;
  Accept accept = handler_ ? handler_(in) : Accept{};
  if (bytes > 0 && accept.dst != nullptr) std::memcpy(accept.dst, payload, bytes);
  if ((bytes == 0 || accept.dst != nullptr) && accept.done) accept.done(absl::OkStatus());
  // The sender's payload is no longer referenced: complete on its thread.
  if (fabric_->Find(sender->address_) == sender) {
    sender->Post([done = std::move(done)] {
      if (done) done(absl::OkStatus());
    });
  }
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
}

}  // namespace tessel
