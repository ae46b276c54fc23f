#include "worker/internal/data_channel.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/topk.h"
#include "runtime/log.h"

namespace tessel::internal {

namespace {
// The payload check of the frame whose sink is choosing its destination
// (set by OnFrame around the sink's call, taken by Receive on the same
// thread): with payload tags, the bytes that land are checked against it
// before the sink hears of them.
thread_local DataChannel::PayloadCheck* t_payload_check = nullptr;

// A status of this channel's own with `s`'s code and message (transport
// statuses carry no payloads). Statuses share their message by reference
// count, and Debian's Abseil drops the last reference in code ThreadSanitizer
// does not see: a status the transport's thread made and then destroys is
// not kept by reference for the worker's thread to read.
absl::Status Own(const absl::Status& s) { return absl::Status(s.code(), s.message()); }
}  // namespace

DataChannel::DataChannel(JobContext* ctx, std::unique_ptr<Transport> transport)
    : ctx_(ctx), transport_(std::move(transport)) {
  transport_->SetHandler([this](const Incoming& in) { return OnFrame(in); });
}

DataChannel::~DataChannel() { transport_->Shutdown(); }

FrameHeader DataChannel::Header(FrameType type, int64_t step, int shard, int bucket) const {
  FrameHeader h =
      MakeHeader(type, ctx_->job_id, ctx_->epoch, step, ctx_->rank.load(), shard, bucket);
  if (type == FrameType::kPush && ctx_->hold_update.load(std::memory_order_relaxed)) {
    h.flags = kFrameHoldUpdate;  // the step's update waits for its RELEASE
  }
  if (type == FrameType::kPush || type == FrameType::kInit) {
    const int64_t n = ctx_->layout->bucket_range(shard, bucket).size();
    // INIT carries fp32 masters.
    h.payload_bytes = DensePayloadBytes(n, type == FrameType::kPush && ctx_->half.has_value());
    if (type == FrameType::kPush && ctx_->options.topk_ratio > 0) {
      h.payload_bytes = SparseBytes(TopkCount(ctx_->options.topk_ratio, n));
    }
  }
  return h;
}

void DataChannel::Send(const FrameHeader& h, const void* payload,
                       std::shared_ptr<const void> keep) {
  if (h.type == FrameType::kPush && ctx_->timeline != nullptr &&
      ctx_->timeline->Records(h.step + 1)) {
    const int64_t now = Timeline::NowUs();
    int64_t none = -1;
    first_push_us_.compare_exchange_strong(none, now);
    ctx_->timeline->Instant("push", "exchange", now,
                            {.job = ctx_->options.job,
                             .step = h.step + 1,
                             .rank = static_cast<int>(h.rank),
                             .shard = static_cast<int>(h.shard),
                             .bucket = static_cast<int>(h.bucket)});
  }
  if (peers_[static_cast<size_t>(h.shard)] == kNoPeer) {
    // Never connected (the UCX connection failed when the server was
    // found): say so, instead of the transport's "unknown peer".
    FailSend(h,
             absl::UnavailableError(absl::StrCat(
                 ctx_->Where(), ": shard ", h.shard, " (", addresses_[static_cast<size_t>(h.shard)],
                 ") is not connected over UCX: this worker could not reach its UCX address. "
                 "Check that --ucx_tls (e.g. tcp across hosts) and UCX_NET_DEVICES reach that "
                 "host, and that no firewall or NetworkPolicy blocks the server's "
                 "--ucx_port_range")));
    return;
  }
  SendTo(peers_[static_cast<size_t>(h.shard)], h, payload, std::move(keep), false);
}

void DataChannel::SendToWorker(int rank, const FrameHeader& h, const void* payload) {
  PeerId peer = kNoPeer;
  {
    absl::MutexLock lock(&mu_);
    if (rank >= 0 && static_cast<size_t>(rank) < worker_peers_.size()) {
      peer = worker_peers_[static_cast<size_t>(rank)];
    }
  }
  if (peer == kNoPeer) {
    FailSend(h, absl::UnavailableError(absl::StrCat(
                    ctx_->Where(), ": rank ", rank,
                    " of this host is not connected over UCX (host aggregation); run with "
                    "--aggregation=flat if the workers of one --host_id cannot reach each other")));
    return;
  }
  SendTo(peer, h, payload, nullptr, true);
}

void DataChannel::FailSend(const FrameHeader& h, absl::Status s) {
  absl::MutexLock lock(&mu_);
  if (send_error_.ok() && h.epoch == ctx_->epoch.load()) {
    send_error_ = ctx_->Recoverable(s);
    ++events_;
  }
}

int64_t DataChannel::ReadyEpoch(int rank) {
  absl::MutexLock lock(&mu_);
  auto it = ready_.find(rank);
  return it == ready_.end() ? -1 : it->second;
}

bool DataChannel::Pulled(int rank, int64_t version) {
  absl::MutexLock lock(&mu_);
  auto it = pulled_.find(rank);
  return it != pulled_.end() && it->second.first == ctx_->epoch.load() &&
         it->second.second >= version;
}

std::shared_ptr<const RankFrameKeys> DataChannel::AuthOf(int shard, int64_t epoch, bool* on) {
  absl::MutexLock lock(&mu_);
  if (on != nullptr) *on = false;
  if (shard < 0 || static_cast<size_t>(shard) >= auth_.size()) return nullptr;
  const auto& keys = auth_[static_cast<size_t>(shard)];
  if (on != nullptr) *on = !keys.empty();
  for (const auto& k : keys) {
    if (k->epoch() == epoch) return k;
  }
  return nullptr;
}

bool DataChannel::authenticated() {
  absl::MutexLock lock(&mu_);
  return std::any_of(auth_.begin(), auth_.end(), [](const auto& a) { return !a.empty(); });
}

absl::Status DataChannel::SetFrameKeys(const std::vector<FrameKeyGrant>& grants) {
  constexpr size_t kKeepEpochs = 4;
  if (grants.size() != peers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": ", grants.size(),
                                                   " frame keys for ", peers_.size(), " shards"));
  }
  const int32_t rank = ctx_->rank.load();
  const int64_t epoch = ctx_->epoch.load();
  std::vector<std::shared_ptr<const RankFrameKeys>> fresh(grants.size());
  for (size_t s = 0; s < grants.size(); ++s) {
    if (grants[s].rank_secret.empty()) continue;
    auto k = RankFrameKeys::Create(grants[s], ctx_->job_id, static_cast<int32_t>(s), rank, epoch);
    if (!k.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx_->Where(), ": shard ", s, "'s frame key: ", k.status().message()));
    }
    fresh[s] = *std::move(k);
  }
  std::vector<std::string> on;
  bool payload_tags = false;
  for (size_t s = 0; s < fresh.size(); ++s) {
    if (fresh[s] != nullptr) on.push_back(absl::StrCat(s));
    payload_tags = payload_tags || (fresh[s] != nullptr && fresh[s]->payload());
  }
  if (!on.empty()) {
    TESSEL_LOG(INFO) << ctx_->Where() << ": data-path frames authenticated with shard(s) "
                     << absl::StrJoin(on, ", ") << " (rank " << rank << "'s keys of epoch " << epoch
                     << (payload_tags ? "; payloads tagged" : "") << ")";
  }
  absl::MutexLock lock(&mu_);
  auth_.resize(fresh.size());
  for (size_t s = 0; s < fresh.size(); ++s) {
    auto& keys = auth_[s];
    if (fresh[s] == nullptr) {  // this server does not authenticate (now)
      keys.clear();
      continue;
    }
    keys.erase(std::remove_if(keys.begin(), keys.end(),
                              [&](const auto& k) { return k->epoch() == epoch; }),
               keys.end());
    keys.push_front(std::move(fresh[s]));
    if (keys.size() > kKeepEpochs) keys.pop_back();
  }
  return absl::OkStatus();
}

void DataChannel::SendTo(PeerId peer, const FrameHeader& h, const void* payload,
                         std::shared_ptr<const void> keep, bool to_worker) {
  WireHeader wire = ToWire(nullptr, h);
  if (std::shared_ptr<const RankFrameKeys> keys = AuthOf(h.shard, h.epoch)) {
    // With payload tags, over the bytes at `payload` now: the caller keeps
    // them unchanged until the send completes.
    wire = keys->SealFrame(h, to_worker, payload);
  }
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_sends_;
    // A send to a worker that died may never complete: only the current
    // epoch's are waited for (SetEpoch forgets the others).
    to_worker = to_worker && h.epoch == ctx_->epoch.load();
    outstanding_worker_sends_ += to_worker ? 1 : 0;
  }
  transport_->Send(
      peer, wire.span(), payload, h.payload_bytes,
      [this, keep = std::move(keep), epoch = h.epoch, to_worker](absl::Status s) {
        absl::MutexLock lock(&mu_);
        --outstanding_sends_;
        if (to_worker && epoch == ctx_->epoch.load() && --outstanding_worker_sends_ == 0) {
          ++events_;
        }
        if (!s.ok() && send_error_.ok() && epoch == ctx_->epoch.load()) {
          send_error_ = Own(s);
          ++events_;
        }
      });
}

std::string DataChannel::DescribePaths() {
  std::vector<std::string> paths;
  for (PeerId p : peers_)
    paths.push_back(p == kNoPeer ? "not connected" : transport_->PayloadPath(p));
  if (paths.empty()) return "not connected";
  if (std::all_of(paths.begin(), paths.end(),
                  [&](const std::string& x) { return x == paths[0]; })) {
    return paths[0];
  }
  std::string out;
  for (size_t s = 0; s < paths.size(); ++s) {
    absl::StrAppend(&out, s == 0 ? "" : ", ", "shard ", s, ": ", paths[s]);
  }
  return out;
}

void DataChannel::WaitForSends() {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](int64_t* n) { return *n == 0; }, &outstanding_sends_),
                       ctx_->options.step_timeout);
}

absl::Status DataChannel::WaitForWorkerSends() {
  return WaitFor(
      [this] {
        absl::MutexLock lock(&mu_);
        return outstanding_worker_sends_ == 0;
      },
      [] { return std::string("the parameters passed on to the other workers of this host"); });
}

void DataChannel::Notify() {
  absl::MutexLock lock(&mu_);
  ++events_;
}

absl::Status DataChannel::WaitFor(const std::function<bool()>& done,
                                  const std::function<std::string()>& what) {
  // Look at `done` whenever something changed, and at least every 250 ms so
  // a membership change (a worker left or its lease lapsed, a server
  // restarted) ends the wait within about a heartbeat, with the reason,
  // instead of at the step deadline.
  constexpr absl::Duration kSlice = absl::Milliseconds(250);
  const absl::Duration timeout = ctx_->options.step_timeout;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time next_check = absl::Now() + kSlice;
  bool finished = false;
  for (;;) {
    int64_t seen = 0;
    {
      absl::MutexLock lock(&mu_);
      if (FailedLocked()) break;
      seen = events_;
    }
    if (done()) {
      finished = true;
      break;
    }
    absl::Time now = absl::Now();
    if (now >= deadline) break;
    if (now >= next_check) {
      if (check_) TESSEL_RETURN_IF_ERROR(check_());
      next_check = absl::Now() + kSlice;
      continue;
    }
    struct Seen {
      DataChannel* channel;
      int64_t events;
    } arg{this, seen};
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Seen* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                               return a->channel->events_ != a->events ||
                                      a->channel->FailedLocked();
                             },
                             &arg),
                         std::min(next_check, deadline) - now);
  }
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return ctx_->Recoverable(error_);
    if (!send_error_.ok()) {
      return ctx_->Recoverable(absl::UnavailableError(absl::StrCat(
          ctx_->Where(), ": sending to a shard server failed: ", send_error_.message())));
    }
  }
  if (!finished) {
    return absl::DeadlineExceededError(absl::StrCat(
        ctx_->Where(), ": ", what(), " did not complete within ", absl::FormatDuration(timeout),
        ". A worker or server may have died: check the registry (tesselctl members)"));
  }
  return absl::OkStatus();
}

Accept DataChannel::Receive(void* dst, size_t capacity, int64_t epoch,
                            std::function<void()> landed) {
  {
    absl::MutexLock lock(&mu_);
    ++inflight_receives_;
  }
  // The frame's payload check, if its bytes are tagged (taken: one receive
  // per frame).
  std::shared_ptr<PayloadCheck> check;
  if (t_payload_check != nullptr) {
    check = std::make_shared<PayloadCheck>(std::move(*t_payload_check));
    t_payload_check = nullptr;
  }
  return Accept{dst, capacity,
                [this, epoch, dst, check, landed = std::move(landed)](absl::Status s) {
                  bool current = false;
                  {
                    absl::MutexLock lock(&mu_);
                    current = epoch == ctx_->epoch.load();  // else a recovery started meanwhile
                    if (current && !s.ok() && error_.ok()) {
                      error_ = Own(s);
                      ++events_;
                    }
                  }
                  // Changed in flight: the sink never hears of these bytes
                  // (its bucket stays missing, as if the frame were lost).
                  const bool intact = !s.ok() || check == nullptr || Intact(*check, dst);
                  if (current && s.ok() && intact) landed();
                  absl::MutexLock lock(&mu_);
                  --inflight_receives_;
                }};
}

Accept DataChannel::OnFrame(const Incoming& in) {
  auto h = DecodeWireHeader(in.header);
  if (!h.ok()) {
    TESSEL_LOG(WARNING) << "dropping malformed frame: " << h.status();
    return Accept{};
  }
  if (authenticated()) {
    // A shard that authenticates: the frame must be authentic under this
    // rank's keys of its epoch (held for the last few epochs); one that
    // does not: any frame about it, as before.
    bool on = false;
    std::shared_ptr<const RankFrameKeys> keys = AuthOf(h->shard, h->epoch, &on);
    if (on ? keys == nullptr || !keys->Verify(in.header, *h)
           : (h->shard < 0 || h->shard >= num_shards())) {
      ++unauthenticated_;
      TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
          << ctx_->WhereAnyThread() << ": dropping an unauthenticated data-path frame ("
          << (in.header.size() == kHeaderBytes ? "no tag" : "wrong tag")
          << "): " << DescribeHeader(*h) << " (" << unauthenticated_.load() << " dropped so far)";
      return Accept{};
    }
    if (keys != nullptr && keys->payload() && in.payload_bytes == h->payload_bytes) {
      PayloadCheck check{keys, {}, *h};
      std::memcpy(check.header.data(), in.header.data(), kPayloadSealedHeaderBytes);
      // Bytes readable now (none, or in place) are checked now; the others
      // where they land (Receive).
      if (in.payload_bytes == 0 || in.in_place != nullptr) {
        if (!Intact(check, in.in_place)) return Accept{};
      } else {
        PayloadCheck* const before = t_payload_check;
        t_payload_check = &check;
        Accept a = Dispatch(*h, in);
        t_payload_check = before;
        return a;
      }
    }
  }
  return Dispatch(*h, in);
}

bool DataChannel::Intact(const PayloadCheck& check, const void* payload) {
  if (check.keys->VerifyPayload(absl::MakeConstSpan(check.header), check.h, payload)) return true;
  const int64_t n = ++bad_payload_;
  ++unauthenticated_;  // a wrong tag: the worker's unauthenticated-frames metric counts it
  TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
      << ctx_->WhereAnyThread() << ": dropping " << DescribeHeader(check.h)
      << ": its payload does not match the payload tag its authenticated header carries "
         "(changed in flight); nothing of it is used ("
      << n << " dropped so far)";
  return false;
}

Accept DataChannel::Dispatch(const FrameHeader& header, const Incoming& in) {
  const FrameHeader* const h = &header;
  // Sizes before anything is allocated or a destination chosen: the bytes
  // that arrived must be those the header announces (the sinks check the
  // header against the job), and an ERROR's text is short.
  if (in.payload_bytes != h->payload_bytes) {
    return Refuse(*h, in, "its payload is not the size its header announces");
  }
  if (h->type == FrameType::kError && in.payload_bytes > kMaxErrorTextBytes) {
    return Refuse(*h, in, "an ERROR text is at most kMaxErrorTextBytes");
  }
  if (h->type == FrameType::kError) {
    auto message = std::make_shared<std::string>(in.payload_bytes, '\0');
    FrameHeader about = *h;
    auto record = [this, message, about](absl::Status) {
      absl::MutexLock lock(&mu_);
      if (about.epoch != ctx_->epoch.load()) {  // about a frame of an epoch recovery left behind
        ++stale_dropped_;
        return;
      }
      if (!error_.ok()) return;
      error_ = absl::Status(static_cast<absl::StatusCode>(about.code),
                            absl::StrCat(ctx_->WhereAnyThread(), ": shard ", about.shard,
                                         " refused ", DescribeHeader(about), ": ", *message));
      ++events_;
    };
    if (in.payload_bytes == 0) {
      record(absl::OkStatus());
      return Accept{};
    }
    if (t_payload_check != nullptr) {  // the text is checked before it counts
      auto check = std::make_shared<PayloadCheck>(std::move(*t_payload_check));
      t_payload_check = nullptr;
      return Accept{message->data(), message->size(),
                    [this, message, check, record](absl::Status s) {
                      if (s.ok() && !Intact(*check, message->data())) return;
                      record(s);
                    }};
    }
    return Accept{message->data(), message->size(), record};
  }
  if (h->type == FrameType::kParams && h->job_id == ctx_->job_id && ctx_->layout != nullptr &&
      sink_ != nullptr && h->shard >= 0 && h->shard < num_shards() && h->bucket >= 0 &&
      h->bucket < ctx_->layout->num_buckets(h->shard)) {
    return sink_->OnParams(*h);
  }
  if (h->type == FrameType::kNorm && h->job_id == ctx_->job_id && h->shard >= 0 &&
      h->shard < num_shards() && h->rank == ctx_->rank.load()) {
    if (in.payload_bytes != kNormPayloadBytes) {
      return Refuse(*h, in, "a NORM carries kNormPayloadBytes");
    }
    auto stats = std::make_shared<std::array<double, 3>>();
    std::shared_ptr<PayloadCheck> check;
    if (t_payload_check != nullptr) {  // checked where it lands, before it counts
      check = std::make_shared<PayloadCheck>(std::move(*t_payload_check));
      t_payload_check = nullptr;
    }
    const FrameHeader about = *h;
    // Counted as an event: a WaitFor looking for it wakes.
    auto record = [this, stats, check, about](absl::Status s) {
      if (!s.ok() || (check != nullptr && !Intact(*check, stats->data()))) return;
      absl::MutexLock lock(&mu_);
      if (about.epoch != ctx_->epoch.load()) {
        ++stale_dropped_;
        return;
      }
      NormAnswer& a = norms_[about.shard];
      a.epoch = about.epoch;
      a.step = about.step;
      a.stats = GradNormStats{(*stats)[0], (*stats)[1], (*stats)[2]};
      ++events_;
    };
    if (in.in_place != nullptr) {  // read where it lies (checked by OnFrame already)
      std::memcpy(stats->data(), in.in_place, kNormPayloadBytes);
      check.reset();
      record(absl::OkStatus());
      return Accept{};
    }
    return Accept{stats->data(), static_cast<size_t>(kNormPayloadBytes), record};
  }
  if (h->type == FrameType::kReady && h->job_id == ctx_->job_id && in.payload_bytes == 0) {
    // Kept whatever this worker is doing: it may not have its groups yet.
    absl::MutexLock lock(&mu_);
    int64_t& epoch = ready_[h->rank];
    epoch = std::max(epoch, h->epoch);
    ++events_;
    return Accept{};
  }
  if (h->type == FrameType::kPull && h->job_id == ctx_->job_id && in.payload_bytes == 0) {
    // From a worker of this host entering its exchange (host aggregation).
    absl::MutexLock lock(&mu_);
    std::pair<int64_t, int64_t>& at = pulled_[h->rank];
    at = std::max(at, std::make_pair(h->epoch, h->step));
    ++events_;
    return Accept{};
  }
  if (h->type == FrameType::kPush && h->job_id == ctx_->job_id && ctx_->layout != nullptr &&
      sink_ != nullptr && h->shard >= 0 && h->shard < num_shards() && h->bucket >= 0 &&
      h->bucket < ctx_->layout->num_buckets(h->shard)) {
    return sink_->OnPush(*h, in);  // from a worker of this host (host aggregation)
  }
  TESSEL_LOG(WARNING) << "dropping unexpected frame " << DescribeHeader(*h);
  return Accept{};
}

Accept DataChannel::Refuse(const FrameHeader& h, const Incoming& in, absl::string_view why) {
  const int64_t n = ++refused_;
  TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
      << ctx_->WhereAnyThread() << ": dropping " << DescribeHeader(h) << " with "
      << in.payload_bytes << " payload bytes: " << why << " (" << n << " dropped so far)";
  return Accept{};
}

std::optional<GradNormStats> DataChannel::TakeNorm(int shard, int64_t step) {
  absl::MutexLock lock(&mu_);
  auto it = norms_.find(shard);
  if (it == norms_.end() || it->second.step != step || it->second.epoch != ctx_->epoch.load()) {
    return std::nullopt;
  }
  const GradNormStats stats = it->second.stats;
  norms_.erase(it);
  return stats;
}

void DataChannel::ClearErrors() {
  absl::MutexLock lock(&mu_);
  error_ = absl::OkStatus();
  send_error_ = absl::OkStatus();
}

void DataChannel::ClearReceiveError() {
  absl::MutexLock lock(&mu_);
  error_ = absl::OkStatus();
}

void DataChannel::SetEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  ctx_->epoch = epoch;
  outstanding_worker_sends_ = 0;  // the old epoch's are never waited for
  error_ = absl::OkStatus();
  send_error_ = absl::OkStatus();
}

bool DataChannel::SettleReceives(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](int64_t* n) { return *n == 0; }, &inflight_receives_),
                       limit);
  return inflight_receives_ > 0;
}

int64_t DataChannel::inflight_receives() {
  absl::MutexLock lock(&mu_);
  return inflight_receives_;
}

bool DataChannel::RenewIfWedged() {
  // A server killed while writing into this worker's shared-memory receive
  // queue wedges it for good (transport/transport.h): nothing any server
  // sends would arrive again. The cure is a fresh endpoint.
  absl::Status queue = transport_->CheckReceiveQueue(kReceiveQueueProbeTimeout);
  if (queue.ok()) return false;
  TESSEL_LOG(WARNING) << ctx_->Where() << ": " << queue.message()
                      << "; re-creating this worker's UCX endpoint";
  absl::Status reset = transport_->Reset();
  if (!reset.ok()) {
    TESSEL_LOG(ERROR) << ctx_->Where()
                      << ": cannot re-create the UCX endpoint: " << reset.message();
    return false;
  }
  ++endpoint_renewals_;
  std::fill(peers_.begin(), peers_.end(), kNoPeer);
  return true;
}

}  // namespace tessel::internal
