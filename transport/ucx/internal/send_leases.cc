#include "transport/ucx/internal/send_leases.h"

#include <sys/random.h>

#include <random>
#include <utility>

namespace tessel {
namespace ucx_internal {

namespace {

// 64 random bits from the kernel; std::random_device where getrandom fails.
uint64_t RandomLease() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) == static_cast<ssize_t>(sizeof(v))) return v;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

uint64_t SendLeases::Open(Lease lease) {
  uint64_t id = RandomLease();
  while (id == 0 || held_.contains(id)) id = RandomLease();
  held_.emplace(id, std::move(lease));
  return id;
}

std::optional<SendLeases::Lease> SendLeases::TakeFrom(uint64_t lease, PeerId peer) {
  auto it = held_.find(lease);
  if (it == held_.end()) return std::nullopt;
  if (it->second.peer != peer) {
    ++misdirected_;
    return std::nullopt;
  }
  Lease out = std::move(it->second);
  held_.erase(it);
  return out;
}

void SendLeases::End(uint64_t lease, const absl::Status& status) {
  auto it = held_.find(lease);
  if (it == held_.end()) return;
  Lease l = std::move(it->second);
  held_.erase(it);
  if (l.done) l.done(status);
}

std::vector<SendLeases::Lease> SendLeases::TakeAll() {
  std::vector<Lease> all;
  all.reserve(held_.size());
  for (auto& [id, lease] : held_) all.push_back(std::move(lease));
  held_.clear();
  return all;
}

}  // namespace ucx_internal
}  // namespace tessel
