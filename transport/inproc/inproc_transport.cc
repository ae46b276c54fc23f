#include "transport/inproc/inproc_transport.h"

#include <cstring>
#include <tuple>

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
  // Copied now: the sender's buffer is not read once Send returns, so an
  // endpoint torn down with sends queued leaves nothing dangling.
  const uint8_t* bytes = static_cast<const uint8_t*>(payload);
  auto copy = std::make_shared<const std::vector<uint8_t>>(
      payload_bytes > 0 ? bytes : nullptr, payload_bytes > 0 ? bytes + payload_bytes : nullptr);
  auto shared_done = std::make_shared<SendDone>(std::move(done));
  const bool queued =
      target != nullptr && fabric_->PostTo(target_address, target,
                                           [target, sender = this, sender_address = address_,
                                            h = std::move(h), copy, shared_done]() mutable {
                                             // Runs on the target's thread: the target is alive.
                                             target->Deliver(sender, sender_address, std::move(h),
                                                             copy, std::move(*shared_done));
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
                              std::shared_ptr<const std::vector<uint8_t>> payload, SendDone done) {
  const size_t bytes = payload->size();
  Incoming in;
  in.from = PeerFor(sender, sender_address);
  in.header = absl::MakeConstSpan(header);
  in.payload_bytes = bytes;
  Accept accept = handler_ ? handler_(in) : Accept{};
  if (bytes > 0 && accept.dst != nullptr) std::memcpy(accept.dst, payload->data(), bytes);
  if ((bytes == 0 || accept.dst != nullptr) && accept.done) accept.done(absl::OkStatus());
  // Complete on the sender's thread, if it is still there.
  fabric_->PostTo(sender_address, sender, [done = std::move(done)] {
    if (done) done(absl::OkStatus());
  });
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
