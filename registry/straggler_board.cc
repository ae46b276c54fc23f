#include "registry/straggler_board.h"

#include <cmath>
#include <tuple>
#include <utility>

namespace tessel {
namespace {

bool Valid(const v1::Straggler& s) {
  return !s.job().empty() && s.job().size() <= StragglerBoard::kMaxJobNameBytes && s.rank() >= 0 &&
         s.registry_rank() >= 0 && s.shard() >= 0 && std::isfinite(s.score()) && s.score() >= 0 &&
         std::isfinite(s.lateness_seconds()) && s.lateness_seconds() >= 0;
}

}  // namespace

void StragglerBoard::ServerJoined(int64_t lease) {
  absl::MutexLock lock(&mu_);
  servers_.insert(lease);
}

bool StragglerBoard::Report(int64_t lease, const std::vector<v1::Straggler>& list) {
  absl::MutexLock lock(&mu_);
  if (servers_.count(lease) == 0) return false;
  std::vector<v1::Straggler> kept;
  for (const v1::Straggler& s : list) {
    if (kept.size() == kMaxPerServer) break;
    if (Valid(s)) kept.push_back(s);
  }
  const bool all = kept.size() == list.size();
  if (kept.empty()) {
    by_server_.erase(lease);
  } else {
    by_server_[lease] = std::move(kept);
  }
  return all;
}

std::vector<v1::Straggler> StragglerBoard::Merged(const std::string* job) {
  std::map<std::pair<std::string, int>, v1::Straggler> best;
  for (const auto& [lease, list] : by_server_) {
    for (const v1::Straggler& s : list) {
      if (job != nullptr && s.job() != *job) continue;
      auto [it, fresh] = best.emplace(std::make_pair(s.job(), s.rank()), s);
      if (!fresh && s.score() > it->second.score()) it->second = s;
    }
  }
  std::vector<v1::Straggler> out;
  for (auto& [key, s] : best) out.push_back(std::move(s));
  return out;
}

std::vector<v1::Straggler> StragglerBoard::ForJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  return Merged(&job);
}

std::vector<v1::Straggler> StragglerBoard::All() {
  absl::MutexLock lock(&mu_);
  return Merged(nullptr);
}

void StragglerBoard::Retain(const std::set<int64_t>& live) {
  absl::MutexLock lock(&mu_);
  for (auto it = servers_.begin(); it != servers_.end();) {
    it = live.count(*it) ? std::next(it) : servers_.erase(it);
  }
  for (auto it = by_server_.begin(); it != by_server_.end();) {
    it = live.count(it->first) ? std::next(it) : by_server_.erase(it);
  }
}

void StragglerBoard::Forget(int64_t lease) {
  absl::MutexLock lock(&mu_);
  servers_.erase(lease);
  by_server_.erase(lease);
}

}  // namespace tessel
