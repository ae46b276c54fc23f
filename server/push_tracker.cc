#include "server/push_tracker.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel {

PushTracker::PushTracker(int num_buckets, int world)
    : num_buckets_(num_buckets),
      world_(world),
      slots_(num_buckets, std::vector<Slot>(world, Slot::kEmpty)),
      received_(num_buckets, 0),
      reservations_(num_buckets, std::vector<Reservation>(world)),
      flight_(world) {}

bool PushTracker::AnyPushed() const {
  for (const auto& bucket : slots_) {
    for (Slot s : bucket) {
      if (s != Slot::kEmpty) return true;
    }
  }
  return false;
}

uint64_t PushTracker::Reserve(int bucket, int rank, absl::Time now, int sender, int part) {
  Slot& s = slots_[bucket][rank];
  assert(s == Slot::kEmpty);
  s = Slot::kReceiving;
  const uint64_t ticket = next_ticket_++;
  reservations_[bucket][rank] = Reservation{ticket, sender < 0 ? rank : sender, part};
  if (!started_) started_ = now;
  flight_.Pushed(rank, absl::ToUnixMicros(now));
  return ticket;
}

bool PushTracker::Holds(int bucket, int rank, uint64_t ticket) const {
  return slots_[bucket][rank] == Slot::kReceiving &&
         (ticket == 0 || reservations_[bucket][rank].ticket == ticket);
}

std::vector<PushTracker::Abandoned> PushTracker::Abandon(int sender) {
  std::vector<Abandoned> out;
  for (int b = 0; b < num_buckets_; ++b) {
    for (int r = 0; r < world_; ++r) {
      Reservation& res = reservations_[b][r];
      if (slots_[b][r] != Slot::kReceiving || res.sender != sender) continue;
      out.push_back(Abandoned{b, r, res.part});
      slots_[b][r] = Slot::kEmpty;
      res = Reservation{};
    }
  }
  return out;
}

void PushTracker::Release(int bucket, int rank) {
  Slot& s = slots_[bucket][rank];
  assert(s == Slot::kReceiving);
  s = Slot::kEmpty;
  reservations_[bucket][rank] = Reservation{};
}

bool PushTracker::Receive(int bucket, int rank) {
  Slot& s = slots_[bucket][rank];
  assert(s == Slot::kReceiving);
  s = Slot::kReceived;
  reservations_[bucket][rank] = Reservation{};
  return ++received_[bucket] == world_;
}

void PushTracker::NextStep(int64_t step, absl::Time now) {
  parts_.NextStep();
  for (auto& bucket : slots_) std::fill(bucket.begin(), bucket.end(), Slot::kEmpty);
  for (auto& bucket : reservations_) std::fill(bucket.begin(), bucket.end(), Reservation{});
  std::fill(received_.begin(), received_.end(), 0);
  flight_.EndStep(step, absl::ToUnixMicros(now));
  StopClock();
}

void PushTracker::StopClock() {
  flight_.Discard();
  started_.reset();
  reported_.reset();
}

std::optional<absl::Duration> PushTracker::StallDue(absl::Time now, absl::Duration after) {
  if (!started_ || now - *started_ <= after) return std::nullopt;
  if (reported_ && now - *reported_ < after) return std::nullopt;
  reported_ = now;
  return now - *started_;
}

PushTracker::Waiting PushTracker::DescribeWaiting(const std::vector<int>& worker_ids) const {
  return DescribeWaitingAs([&](int rank) {
    if (static_cast<size_t>(rank) < worker_ids.size()) {
      return absl::StrCat("rank ", rank, " (registry rank ", worker_ids[rank], "; ");
    }
    return absl::StrCat("rank ", rank, " (");
  });
}

PushTracker::Waiting PushTracker::DescribeGroupsWaiting(
    const std::vector<int>& group_of_rank) const {
  return DescribeWaitingAs([&](int g) {
    std::vector<int> ranks;
    for (size_t r = 0; r < group_of_rank.size(); ++r) {
      if (group_of_rank[r] == g) ranks.push_back(static_cast<int>(r));
    }
    return absl::StrCat("group ", g, " (ranks ", absl::StrJoin(ranks, ","), "; ");
  });
}

PushTracker::Waiting PushTracker::DescribeWaitingAs(
    const std::function<std::string(int slot)>& who) const {
  Waiting out;
  for (int r = 0; r < world_; ++r) {
    std::vector<int> not_pushed, in_flight;
    for (int b = 0; b < num_buckets_; ++b) {
      if (slots_[b][r] == Slot::kEmpty) not_pushed.push_back(b);
      if (slots_[b][r] == Slot::kReceiving) in_flight.push_back(b);
    }
    if (!not_pushed.empty()) {
      out.pushes.push_back(absl::StrCat(who(r), DescribeBuckets(not_pushed, num_buckets_), ")"));
    }
    if (!in_flight.empty()) {
      out.receives.push_back(absl::StrCat(who(r), DescribeBuckets(in_flight, num_buckets_), ")"));
    }
  }
  return out;
}

std::vector<PushTracker::SlotWaiting> PushTracker::WaitingSlots() const {
  std::vector<SlotWaiting> out;
  for (int r = 0; r < world_; ++r) {
    SlotWaiting w;
    w.slot = r;
    for (int b = 0; b < num_buckets_; ++b) {
      if (slots_[b][r] == Slot::kEmpty) w.not_pushed.push_back(b);
      if (slots_[b][r] == Slot::kReceiving) w.receiving.push_back(b);
    }
    if (!w.not_pushed.empty() || !w.receiving.empty()) out.push_back(std::move(w));
  }
  return out;
}

std::string PushTracker::Waiting::ToString() const {
  std::string out;
  if (!pushes.empty())
    absl::StrAppend(&out, "waiting for pushes from ", absl::StrJoin(pushes, ", "));
  if (!receives.empty()) {
    absl::StrAppend(&out, pushes.empty() ? "" : "; ", "receives not finished from ",
                    absl::StrJoin(receives, ", "));
  }
  return out;
}

std::string DescribeBuckets(const std::vector<int>& buckets, int total) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < buckets.size();) {
    size_t j = i;
    while (j + 1 < buckets.size() && buckets[j + 1] == buckets[j] + 1) ++j;
    runs.push_back(j == i ? absl::StrCat(buckets[i]) : absl::StrCat(buckets[i], "-", buckets[j]));
    i = j + 1;
  }
  return absl::StrCat(buckets.size() == 1 ? "bucket " : "buckets ", absl::StrJoin(runs, ", "),
                      " of ", total);
}

}  // namespace tessel
