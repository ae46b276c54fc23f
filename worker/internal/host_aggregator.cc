#include "worker/internal/host_aggregator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/reduce.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "runtime/log.h"
#include "worker/internal/host_groups.h"

namespace tessel::internal {

HostAggregator::HostAggregator(JobContext* ctx, DataChannel* channel)
    : ctx_(ctx),
      channel_(channel),
      slots_(PayloadAllocator<float>(channel->transport().payload_memory())),
      partial_(PayloadAllocator<float>(channel->transport().payload_memory())) {}

void HostAggregator::Configure(const std::vector<int>& groups) {
  Leases leases;  // pushes of the old epoch still borrowed: their senders finish
  {
    // A frame of an old epoch may still come in on the transport's thread
    // and look the bookkeeping up.
    absl::MutexLock lock(&mu_);
    for (Owned& o : owned_) TakeLeasesLocked(&o, &leases);
    ConfigureLocked(groups);
  }
  Release(leases);
}

void HostAggregator::ConfigureLocked(const std::vector<int>& groups) {
  const Layout& layout = *ctx_->layout;
  me_ = ctx_->rank.load();
  epoch_ = ctx_->epoch.load();
  members_.clear();
  if (groups.empty()) {
    members_.push_back(me_);
  } else {
    for (size_t r = 0; r < groups.size(); ++r) {
      if (groups[r] == groups[static_cast<size_t>(me_)]) members_.push_back(static_cast<int>(r));
    }
  }
  others_.clear();
  other_index_.assign(std::max<size_t>(groups.size(), static_cast<size_t>(me_) + 1), -1);
  for (int m : members_) {
    if (m == me_) continue;
    other_index_[static_cast<size_t>(m)] = static_cast<int>(others_.size());
    others_.push_back(m);
  }
  const bool shares = members_.size() > 1;
  const int shards = channel_->num_shards();
  int64_t total = 0;
  for (int s = 0; s < shards; ++s) total += layout.num_buckets(s);
  aggregator_.assign(static_cast<size_t>(shards), {});
  owned_index_.assign(static_cast<size_t>(shards), {});
  owned_.clear();
  slot_elems_ = 0;
  int64_t k = 0;
  for (int s = 0; s < shards; ++s) {
    for (int b = 0; b < layout.num_buckets(s); ++b, ++k) {
      const int agg = shares ? BucketAggregator(members_, k, total) : me_;
      aggregator_[s].push_back(agg);
      owned_index_[s].push_back(-1);
      if (agg != me_ || !shares) continue;
      const Range br = layout.bucket_range(s, b);
      Owned o;
      o.shard = s;
      o.bucket = b;
      o.begin = br.begin;
      o.size = br.size();
      o.at = slot_elems_;
      o.landed.assign(others_.size(), -1);
      o.receiving.assign(others_.size(), 0);
      o.borrowed.assign(others_.size(), nullptr);
      o.lease.assign(others_.size(), {0, 0});
      slot_elems_ += o.size;
      owned_index_[s].back() = static_cast<int>(owned_.size());
      owned_.push_back(std::move(o));
    }
  }
  slots_.assign(static_cast<size_t>(slot_elems_) * others_.size(), 0.f);
  partial_.assign(static_cast<size_t>(shares ? slot_elems_ : 0), 0.f);
}

bool HostAggregator::Forwards(int shard, int bucket) const {
  absl::MutexLock lock(&mu_);
  return members_.size() > 1 && AggregatorOfLocked(shard, bucket) == me_;
}

absl::Status HostAggregator::Meet() {
  if (!active()) return absl::OkStatus();
  FrameHeader ready = channel_->Header(FrameType::kReady, ctx_->step, 0, 0);
  for (int m : members()) {
    if (m != me_) channel_->SendToWorker(m, ready, nullptr);
  }
  const int64_t epoch = ready.epoch;
  return AwaitOthers([&](int m) { return channel_->ReadyEpoch(m) >= epoch; },
                     "to take host-aggregation pushes");
}

absl::Status HostAggregator::AwaitOthers(const std::function<bool(int)>& done,
                                         const std::string& what) {
  std::vector<int> others;
  {
    absl::MutexLock lock(&mu_);
    others = others_;
  }
  return channel_->WaitFor([&] { return std::all_of(others.begin(), others.end(), done); },
                           [&] {
                             std::vector<int> missing;
                             for (int m : others) {
                               if (!done(m)) missing.push_back(m);
                             }
                             return absl::StrCat("the other workers of this host (rank",
                                                 missing.size() > 1 ? "s " : " ",
                                                 absl::StrJoin(missing, ", "), ") ", what);
                           });
}

void HostAggregator::PullRange(int shard, int* first, int* count) const {
  absl::MutexLock lock(&mu_);
  const std::vector<int>& aggs = aggregator_[static_cast<size_t>(shard)];
  *first = 0;
  *count = 0;
  for (size_t b = 0; b < aggs.size(); ++b) {
    if (aggs[b] != me_) continue;
    if (*count == 0) *first = static_cast<int>(b);
    ++*count;
  }
}

void HostAggregator::OwnReady(int shard, int bucket, const float* src) {
  const int64_t step = ctx_->step;
  size_t index = 0;
  bool complete = false;
  {
    absl::MutexLock lock(&mu_);
    index = static_cast<size_t>(OwnedIndexLocked(shard, bucket));
    Owned& o = owned_[index];
    o.own = src;
    o.own_step = step;
    complete = CompleteLocked(o, step);
  }
  if (complete) SumAndPush(index);
}

bool HostAggregator::CompleteLocked(const Owned& o, int64_t step) const {
  if (o.own_step != step || o.summed_step == step) return false;
  for (size_t j = 0; j < o.landed.size(); ++j) {
    if (o.landed[j] != step || o.receiving[j]) return false;
  }
  return true;
}

void HostAggregator::SumAndPush(size_t index) {
  std::vector<const float*> srcs;
  float* out = nullptr;
  int64_t size = 0;
  int shard = 0, bucket = 0;
  {
    // The pushes of this step are in and none of the next can land before
    // summed_step moves on: the sources stay where they are.
    absl::MutexLock lock(&mu_);
    const Owned& o = owned_[index];
    srcs.reserve(members_.size());
    for (int m : members_) {
      if (m == me_) {
        srcs.push_back(o.own);
        continue;
      }
      const size_t j = static_cast<size_t>(other_index_[static_cast<size_t>(m)]);
      const float* in_place = o.borrowed[j];
      srcs.push_back(in_place != nullptr ? in_place : SlotLocked(j, o));
    }
    out = partial_.data() + o.at;
    size = o.size;
    shard = o.shard;
    bucket = o.bucket;
  }
  // Ranks of the host in order: the first level of the tree the shard
  // finishes over the hosts (docs/hierarchical.md).
  ReduceSum(srcs.data(), static_cast<int>(srcs.size()), out, static_cast<size_t>(size));
  const int64_t step = ctx_->step;
  Leases leases;
  {
    absl::MutexLock lock(&mu_);
    TakeLeasesLocked(&owned_[index], &leases);
    owned_[index].summed_step = step;  // the slots are free for the next step's pushes
  }
  Release(leases);
  channel_->Send(channel_->Header(FrameType::kPush, step, shard, bucket), out);
}

absl::Status HostAggregator::PushAll() {
  const int64_t step = ctx_->step;
  for (;;) {
    TESSEL_RETURN_IF_ERROR(channel_->WaitFor(
        [&] {
          absl::MutexLock lock(&mu_);
          for (const Owned& o : owned_) {
            if (o.summed_step != step && CompleteLocked(o, step)) return true;
          }
          return std::all_of(owned_.begin(), owned_.end(),
                             [&](const Owned& o) { return o.summed_step == step; });
        },
        [&] {
          std::vector<std::string> waiting;
          absl::MutexLock lock(&mu_);
          for (const Owned& o : owned_) {
            if (o.summed_step == step) continue;
            std::vector<int> ranks;
            for (size_t j = 0; j < others_.size(); ++j) {
              if (o.landed[j] != step || o.receiving[j]) ranks.push_back(others_[j]);
            }
            if (o.own_step != step) ranks.insert(ranks.begin(), me_);
            waiting.push_back(absl::StrCat("bucket ", o.bucket, " of shard ", o.shard, " from rank",
                                           ranks.size() > 1 ? "s " : " ",
                                           absl::StrJoin(ranks, ",")));
          }
          return absl::StrCat("this host's gradients of step ", step, " (waiting for ",
                              absl::StrJoin(waiting, "; "), ")");
        }));
    std::vector<size_t> ready;
    bool all = true;
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < owned_.size(); ++i) {
        all = all && owned_[i].summed_step == step;
        if (CompleteLocked(owned_[i], step)) ready.push_back(i);
      }
    }
    if (all) return absl::OkStatus();
    for (size_t i : ready) SumAndPush(i);
  }
}

void HostAggregator::AnnouncePull(int64_t version) {
  FrameHeader pull = channel_->Header(FrameType::kPull, version, 0, 0);
  for (int m : members()) {
    if (m != me_) channel_->SendToWorker(m, pull, nullptr);
  }
}

absl::Status HostAggregator::AwaitPulls(int64_t version) {
  return AwaitOthers([&](int m) { return channel_->Pulled(m, version); },
                     absl::StrCat("to finish step ", version, "'s backward pass"));
}

void HostAggregator::Forward(const FrameHeader& h, const void* payload) {
  std::vector<int> to;
  {
    absl::MutexLock lock(&mu_);
    if (h.epoch != epoch_ || h.epoch != ctx_->epoch.load()) return;  // a recovery regroups
    to = others_;
  }
  for (int m : to) channel_->SendToWorker(m, h, payload);
}

void HostAggregator::TakeLeasesLocked(Owned* o, Leases* leases) {
  for (size_t j = 0; j < o->borrowed.size(); ++j) {
    if (o->borrowed[j] == nullptr) continue;
    leases->push_back(o->lease[j]);
    o->borrowed[j] = nullptr;
  }
}

void HostAggregator::Release(const Leases& leases) {
  for (const auto& [from, lease] : leases) channel_->transport().Release(from, lease);
}

Accept HostAggregator::OnPush(const FrameHeader& h, const Incoming& in) {
  Accept accept;
  bool complete = false;
  {
    absl::MutexLock lock(&mu_);
    const int i = OwnedIndexLocked(h.shard, h.bucket);
    const int j = h.rank >= 0 && static_cast<size_t>(h.rank) < other_index_.size()
                      ? other_index_[static_cast<size_t>(h.rank)]
                      : -1;
    Owned* o = i >= 0 ? &owned_[static_cast<size_t>(i)] : nullptr;
    const bool current = h.epoch == epoch_ && h.epoch == ctx_->epoch.load();
    if (!current || o == nullptr || j < 0 ||
        h.payload_bytes != DensePayloadBytes(o->size, /*half=*/false) ||
        o->receiving[static_cast<size_t>(j)] ||
        o->landed[static_cast<size_t>(j)] > o->summed_step) {
      TESSEL_LOG(WARNING) << ctx_->WhereAnyThread() << ": dropping "
                          << (o != nullptr && j >= 0 && current ? "a second" : "a stray")
                          << " host-aggregation push " << DescribeHeader(h) << " (epoch "
                          << ctx_->epoch.load() << ")";
      channel_->CountStale();
      return Accept{};
    }
    const int64_t step = h.step;
    const size_t other = static_cast<size_t>(j);
    if (in.in_place != nullptr) {  // summed where the member keeps it
      o->borrowed[other] = static_cast<const float*>(in.in_place);
      o->lease[other] = {in.from, in.lease};
      o->landed[other] = step;
      complete = CompleteLocked(*o, o->own_step);
      accept.borrow = true;
    } else {
      o->receiving[other] = 1;
      const size_t index = static_cast<size_t>(i);
      const int64_t epoch = h.epoch;
      accept = channel_->Receive(
          SlotLocked(other, *o), DensePayloadBytes(o->size, /*half=*/false), epoch,
          [this, epoch, index, other, step] { SlotLanded(epoch, index, other, step); });
    }
  }
  if (complete) channel_->Notify();  // PushAll may sum it now
  return accept;
}

void HostAggregator::SlotLanded(int64_t epoch, size_t index, size_t other, int64_t step) {
  {
    absl::MutexLock lock(&mu_);
    // A recovery may have regrouped since the push was taken: owned_ is new.
    if (epoch != epoch_ || index >= owned_.size() || other >= owned_[index].landed.size()) return;
    Owned& o = owned_[index];
    o.landed[other] = step;
    o.receiving[other] = 0;
    if (!CompleteLocked(o, o.own_step)) return;
  }
  channel_->Notify();  // PushAll may sum it now
}

void HostAggregator::Reset() {
  Leases leases;  // their senders' sends complete once released
  {
    absl::MutexLock lock(&mu_);
    for (Owned& o : owned_) {
      TakeLeasesLocked(&o, &leases);
      o.own = nullptr;
      o.own_step = -1;
      o.summed_step = -1;
      std::fill(o.landed.begin(), o.landed.end(), -1);
      std::fill(o.receiving.begin(), o.receiving.end(), 0);
    }
  }
  Release(leases);
}

void HostAggregator::Retire(bool stuck, std::vector<PayloadVector<float>>* retired) {
  absl::MutexLock lock(&mu_);
  if (!stuck || slots_.empty()) return;
  retired->push_back(std::move(slots_));
  slots_.assign(retired->back().size(), 0.f);
}

}  // namespace tessel::internal
