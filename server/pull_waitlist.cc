#include "server/pull_waitlist.h"

#include <algorithm>
#include <utility>

namespace tessel {

std::optional<Puller> PullWaitlist::Add(Puller p) {
  Waiting w{p, std::vector<uint8_t>(static_cast<size_t>(p.bucket_count), 0)};
  Puller now = p;
  for (int i = 0; i < p.bucket_count; ++i) {
    if (!updated_[p.first_bucket + i]) continue;
    w.sent[i] = 1;
    now.buckets.push_back(p.first_bucket + i);
  }
  waiting_.push_back(std::move(w));
  if (now.buckets.empty()) return std::nullopt;
  return now;
}

void PullWaitlist::BucketUpdated(int64_t version, int bucket, std::vector<Puller>* serve) {
  updated_[bucket] = 1;
  for (Waiting& w : waiting_) {
    const Puller& p = w.puller;
    const int at = bucket - p.first_bucket;
    if (p.version != version || at < 0 || at >= p.bucket_count || w.sent[at]) continue;
    w.sent[at] = 1;
    Puller now = p;
    now.buckets.assign(1, bucket);
    serve->push_back(std::move(now));
  }
}

void PullWaitlist::Reached(int64_t version, std::vector<Puller>* serve) {
  std::fill(updated_.begin(), updated_.end(), 0);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->puller.version != version) {
      ++it;
      continue;
    }
    Puller p = std::move(it->puller);
    for (int i = 0; i < p.bucket_count; ++i) {
      if (!it->sent[i]) p.buckets.push_back(p.first_bucket + i);
    }
    serve->push_back(std::move(p));
    it = waiting_.erase(it);
  }
}

std::vector<Puller> PullWaitlist::TakeAll() {
  std::vector<Puller> out;
  for (Waiting& w : waiting_) out.push_back(std::move(w.puller));
  waiting_.clear();
  return out;
}

std::vector<int> PullWaitlist::RanksWaitingFor(int64_t version) const {
  std::vector<int> ranks;
  for (const Waiting& w : waiting_) {
    if (w.puller.version == version) ranks.push_back(w.puller.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace tessel
