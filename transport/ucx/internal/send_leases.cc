#include "transport/ucx/internal/send_leases.h"

#include <utility>

namespace tessel {
namespace ucx_internal {

uint64_t SendLeases::Open(Lease lease) {
  const uint64_t id = next_++;
  held_.emplace(id, std::move(lease));
  return id;
}

std::optional<SendLeases::Lease> SendLeases::Take(uint64_t lease) {
  auto it = held_.find(lease);
  if (it == held_.end()) return std::nullopt;
  Lease out = std::move(it->second);
  held_.erase(it);
  return out;
}

void SendLeases::End(uint64_t lease, const absl::Status& status) {
  std::optional<Lease> l = Take(lease);
  if (l.has_value() && l->done) l->done(status);
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
