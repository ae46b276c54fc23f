#include "server/data_plane.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/log.h"

namespace tessel {

DataPlane::DataPlane(Transport* transport, JobTable* jobs, Checkpointer* checkpointer,
                     ServerMetrics* metrics, Timeline* timeline, int update_threads,
                     absl::Duration spin, SpinMode poll_mode, int64_t inline_update_max_bytes,
                     FrameKeys* frame_keys)
    : transport_(transport),
      jobs_(jobs),
      frame_keys_(frame_keys),
      checkpointer_(checkpointer),
      metrics_(metrics),
      timeline_(timeline),
      spin_(poll_mode, spin, update_threads, "update threads"),
      inline_update_max_bytes_(inline_update_max_bytes),
      pool_(update_threads),
      releaser_(std::make_shared<Releaser>()) {
  {
    absl::MutexLock lock(&releaser_->mu);
    releaser_->transport = transport;
  }
  transport_->SetHandler([this](const Incoming& in) { return OnFrame(in); });
  jobs_->SetReplacedListener([this](ShardJob& old, const std::vector<ShardJob::Puller>& waiting) {
    RefuseReplacedPulls(old, waiting);
  });
  for (int i = 0; i < std::max(1, update_threads); ++i) {
    compute_.emplace_back([this] { ComputeLoop(); });
  }
}

DataPlane::~DataPlane() {
  jobs_->SetReplacedListener(nullptr);
  Stop();
}

void DataPlane::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : compute_) {
    if (t.joinable()) t.join();
  }
  absl::MutexLock lock(&releaser_->mu);
  releaser_->transport = nullptr;
}

std::shared_ptr<void> DataPlane::MakeLease(PeerId from, uint64_t lease) {
  std::weak_ptr<Releaser> weak = releaser_;
  return std::shared_ptr<void>(nullptr, [weak, from, lease](void*) {
    std::shared_ptr<Releaser> r = weak.lock();
    if (r == nullptr) return;
    absl::MutexLock lock(&r->mu);
    if (r->transport != nullptr) r->transport->Release(from, lease);
  });
}

int64_t DataPlane::update_queue_depth() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(updates_.size());
}

void DataPlane::CountUnanswered(absl::string_view reason) {
  const int64_t n = ++unanswered_;
  if (metrics_ != nullptr) metrics_->FrameRefused(std::string(reason));
  TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
      << "dropping a data-path frame without an answer (" << reason
      << "): data-path authentication is on and the frame names no job this server serves (" << n
      << " dropped so far)";
}

int64_t DataPlane::rejected_unrouted() {
  absl::MutexLock lock(&mu_);
  return rejected_unrouted_;
}

Accept DataPlane::OnFrame(const Incoming& in) {
  // With data-path authentication on, a frame that cannot be authenticated
  // (malformed, or of a job this server does not serve: it has no key) gets
  // no answer at all: an ERROR would tell a prober which job ids exist.
  const bool silent = frame_keys_ != nullptr && frame_keys_->enabled();
  auto h = DecodeWireHeader(in.header);
  if (!h.ok()) {
    {
      absl::MutexLock lock(&mu_);
      ++rejected_unrouted_;
    }
    if (silent) {
      CountUnanswered("malformed");
      return Accept{};
    }
    FrameHeader unknown;
    SendError(in.from, unknown, h.status(), "malformed");
    return Accept{};
  }
  if (metrics_ != nullptr) metrics_->FrameReceived(h->type, in.payload_bytes);
  if (h->type == FrameType::kError) {
    TESSEL_LOG(WARNING) << "ignoring ERROR frame sent to a server: " << DescribeHeader(*h);
    return Accept{};
  }
  std::shared_ptr<ShardJob> job = jobs_->FindById(h->job_id);
  if (job == nullptr) {
    {
      absl::MutexLock lock(&mu_);
      ++rejected_unrouted_;
    }
    if (silent) {
      CountUnanswered("unknown_job");
      return Accept{};
    }
    SendError(
        in.from, *h,
        absl::NotFoundError(absl::StrCat("no such job on this shard server (job id ", h->job_id,
                                         "); create it first (CreateJob) or check the job name")),
        "unknown_job");
    return Accept{};
  }
  if (frame_keys_ != nullptr) {
    std::shared_ptr<JobFrameKeys> keys = frame_keys_->For(job->job_id(), job->shard());
    int32_t generation = 0;  // of the rank's keys the frame verified under
    // A rank outside the job has no key: nothing is derived for it.
    if (keys != nullptr && (h->rank < 0 || h->rank >= job->spec().world_size() ||
                            !keys->VerifyFromWorker(in.header, *h, &generation))) {
      // No answer: an ERROR would tell a forger what it got right.
      ++unauthenticated_;
      job->CountRejected();
      if (metrics_ != nullptr) metrics_->FrameRefused("unauthenticated");
      TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
          << "dropping an unauthenticated data-path frame ("
          << (in.header.size() == kSealedHeaderBytes ? "wrong tag" : "no tag")
          << "): " << DescribeHeader(*h) << " for job '" << job->spec().job()
          << "'; its sender does not hold rank " << h->rank
          << "'s key of the job for that epoch, so it is not that rank's worker ("
          << unauthenticated_.load() << " dropped so far)";
      return Accept{};
    }
    if (keys != nullptr && !endpoints_.Admit(job, *h, in.from, generation)) {
      // A replay (captured bytes re-sent from another endpoint): no answer,
      // and nothing is sent to the replayer.
      ++replayed_;
      job->CountRejected();
      if (metrics_ != nullptr) metrics_->FrameRefused("replayed");
      TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
          << "dropping " << DescribeHeader(*h) << " for job '" << job->spec().job() << "': rank "
          << h->rank << "'s frames of epoch " << h->epoch
          << " come from another endpoint, so this is a replay of captured bytes ("
          << replayed_.load() << " dropped so far)";
      return Accept{};
    }
  }
  if (h->payload_bytes != in.payload_bytes) {
    job->CountRejected();
    SendError(in.from, *h,
              absl::InvalidArgumentError(absl::StrCat("frame header announces ", h->payload_bytes,
                                                      " payload bytes but ", in.payload_bytes,
                                                      " arrived (truncated or padded frame)")),
              "size_mismatch");
    return Accept{};
  }
  switch (h->type) {
    case FrameType::kPush:
    case FrameType::kInit: {
      // A push the worker keeps in shared memory is reduced where it lies.
      const bool borrow =
          h->type == FrameType::kPush && in.in_place != nullptr && !job->compressed();
      JobFrameKeys* const payload_keys = PayloadKeysOf(job->job_id());
      if (borrow && payload_keys != nullptr &&
          !payload_keys->VerifyPayloadFromWorker(in.header, *h, in.in_place)) {
        DropBadPayload(*job, *h);  // nothing borrowed: the transport releases it
        return Accept{};
      }
      uint64_t ticket = 0;  // the slot's reservation, which the completion names
      auto dst = job->AcceptData(*h, borrow, &ticket);
      if (!dst.ok()) {
        SendError(in.from, *h, dst.status());
        return Accept{};
      }
      FrameHeader header = *h;
      PeerId from = in.from;
      // The job may copy a push it could borrow (one added to micro-batch parts).
      if (borrow && *dst == nullptr) {
        PushCompleted(
            job, header, from, absl::OkStatus(),
            job->CompleteBorrowed(header, in.in_place, MakeLease(from, in.lease), ticket));
        Accept a;
        a.borrow = true;
        return a;
      }
      // The bucket's size, checked against the header (AcceptData) and what
      // arrived (above): the room the transport may fill.
      if (payload_keys != nullptr) {
        // Payload tags: the bytes are checked where they landed before the
        // job counts them; a mismatch frees the slot (as a failed receive
        // does) with no answer, so nothing is summed or applied.
        WireHeader sealed;
        std::memcpy(sealed.bytes.data(), in.header.data(), in.header.size());
        sealed.size = in.header.size();
        void* const at = *dst;
        return Accept{
            *dst, static_cast<size_t>(header.payload_bytes),
            [this, job, header, from, sealed, at, payload_keys, ticket](absl::Status s) {
              if (s.ok() && !payload_keys->VerifyPayloadFromWorker(sealed.span(), header, at)) {
                DropBadPayload(*job, header);
                job->CompleteReceive(header, absl::DataLossError("payload tag mismatch"),
                                     ticket);  // slot freed
                return;
              }
              PushCompleted(job, header, from, s, job->CompleteReceive(header, s, ticket));
            }};
      }
      return Accept{*dst, static_cast<size_t>(header.payload_bytes),
                    [this, job, header, from, ticket](absl::Status s) {
                      PushCompleted(job, header, from, s, job->CompleteReceive(header, s, ticket));
                    }};
    }
    case FrameType::kNormAsk: {  // a held step's share of the norm (server/step_hold.h)
      absl::StatusOr<std::optional<ShardJob::NormReply>> norm = job->AcceptNormAsk(*h, in.from);
      if (!norm.ok()) {
        SendError(in.from, *h, norm.status());
      } else if (norm->has_value()) {
        SendNorms(job, {**norm});
      }
      return Accept{};
    }
    case FrameType::kRelease: {
      absl::StatusOr<std::vector<int>> apply = job->AcceptRelease(*h);
      if (!apply.ok()) {
        TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
            << "refusing " << DescribeHeader(*h) << ": " << apply.status().message();
        SendError(in.from, *h, apply.status());
      } else {
        QueueUpdates(job, *apply);
      }
      return Accept{};
    }
    case FrameType::kPull: {
      auto serve = job->AcceptPull(*h, in.from);
      if (!serve.ok()) {
        SendError(in.from, *h, serve.status());
      } else if (!serve->pullers.empty()) {
        ServeParams(job, *serve);
      }
      return Accept{};
    }
    default:
      job->CountRejected();
      SendError(in.from, *h,
                absl::InvalidArgumentError(absl::StrCat("shard servers do not accept ",
                                                        FrameTypeName(h->type), " frames")),
                "bad_type");
      return Accept{};
  }
}

void DataPlane::PushCompleted(const std::shared_ptr<ShardJob>& job, const FrameHeader& header,
                              PeerId from, const absl::Status& s, ShardJob::Completion c) {
  // A receive abandoned when its sender's process was replaced (logged and
  // counted by the job): nothing to answer, to its dead or fenced sender.
  if (c.abandoned) return;
  if (s.ok() && !c.error.ok()) {  // counted by the job
    SendError(from, header, c.error, "bad_sparse");
  } else if (!s.ok()) {
    TESSEL_LOG(WARNING) << "receive of " << DescribeHeader(header) << " failed: " << s;
    SendError(from, header, s);
  } else if (timeline_ != nullptr && header.type == FrameType::kPush) {
    timeline_->Instant("push received", "data path", Timeline::NowUs(),
                       {.job = job->spec().job(),
                        .step = header.step + 1,
                        .rank = static_cast<int>(header.rank),
                        .shard = job->shard(),
                        .bucket = static_cast<int>(header.bucket)});
  }
  if (c.serve.snapshot.has_value()) {  // step 0 (CheckpointPolicy.initial)
    // The transport's thread: never wait here.
    absl::Status w = checkpointer_->Submit(std::move(*c.serve.snapshot), /*wait=*/false);
    if (!w.ok()) TESSEL_LOG(ERROR) << "checkpoint not taken: " << w;
  }
  if (c.update.has_value() && inline_update_max_bytes_ > 0 &&
      job->bucket_elements(*c.update) * int64_t{4} <= inline_update_max_bytes_ &&
      !job->CheckpointDueNext()) {
    UpdateAndServe(job, *c.update, /*inline_update=*/true);
  } else if (c.update.has_value() || c.fold.has_value()) {
    absl::MutexLock lock(&mu_);
    updates_.push_back(Work{job, c.update.value_or(c.fold.value_or(0)), !c.update.has_value()});
    queued_.fetch_add(1, std::memory_order_release);
  }
  if (!c.serve.pullers.empty()) ServeParams(job, c.serve);
}

void DataPlane::QueueUpdates(const std::shared_ptr<ShardJob>& job,
                             const std::vector<int>& buckets) {
  if (buckets.empty()) return;
  absl::MutexLock lock(&mu_);
  for (int b : buckets) {
    updates_.push_back(Work{job, b, false});
    queued_.fetch_add(1, std::memory_order_release);
  }
}

void DataPlane::SendNorms(const std::shared_ptr<ShardJob>& job,
                          const std::vector<ShardJob::NormReply>& norms) {
  JobFrameKeys* const auth =
      frame_keys_ != nullptr ? frame_keys_->For(job->job_id(), job->shard()).get() : nullptr;
  const int64_t epoch = job->epoch();
  for (const ShardJob::NormReply& n : norms) {
    FrameHeader h =
        MakeHeader(FrameType::kNorm, job->job_id(), epoch, n.step, n.rank, job->shard(), 0);
    if (!n.status.ok()) {
      h.type = FrameType::kNormAsk;  // the refusal names the ask
      SendError(n.reply_to, h, n.status);
      continue;
    }
    auto payload = std::make_shared<std::array<double, 3>>(
        std::array<double, 3>{n.stats.sum_sq, n.stats.sum_abs, n.stats.max_abs});
    h.payload_bytes = kNormPayloadBytes;
    const WireHeader wire = ToWorker(auth, h, payload->data());
    if (metrics_ != nullptr) metrics_->FrameSent(FrameType::kNorm, kNormPayloadBytes);
    transport_->Send(n.reply_to, wire.span(), payload->data(), kNormPayloadBytes,
                     [payload](absl::Status s) {
                       if (!s.ok()) TESSEL_LOG(WARNING) << "sending a NORM failed: " << s;
                     });
  }
}

void DataPlane::SendError(PeerId to, const FrameHeader& about, const absl::Status& s,
                          absl::string_view reason) {
  TESSEL_LOG(DEBUG) << "refusing " << DescribeHeader(about) << ": " << s;
  if (metrics_ != nullptr) {
    metrics_->FrameRefused(reason.empty() ? RefusalReason(static_cast<int>(s.code()))
                                          : std::string(reason));
    metrics_->FrameSent(FrameType::kError, s.message().size());
  }
  FrameHeader h = about;
  h.type = FrameType::kError;
  h.flags = 0;  // a PUSH's kFrameHoldUpdate is the PUSH's alone: an ERROR carries none
  h.code = static_cast<int32_t>(s.code());
  // Workers take no longer text (core/wire.h): cut here, not dropped there.
  auto message =
      std::make_shared<std::string>(s.message().substr(0, static_cast<size_t>(kMaxErrorTextBytes)));
  h.payload_bytes = message->size();
  const WireHeader wire = ToWorker(AuthOf(h.job_id), h, message->data());
  transport_->Send(to, wire.span(), message->data(), message->size(), [message](absl::Status) {});
}

void DataPlane::RefuseReplacedPulls(ShardJob& old, const std::vector<ShardJob::Puller>& waiting) {
  // Stamped with the old epoch, as if refusing the PULL itself: the worker
  // takes an ERROR of its own epoch as recoverable and recovers again, now
  // to the restore that replaced this job.
  const int64_t epoch = old.epoch();
  const absl::Status refused = absl::AbortedError(absl::StrCat(
      "the job was restored by a newer recovery while this pull waited (it was at epoch ", epoch,
      "); recover again"));
  for (const ShardJob::Puller& p : waiting) {
    FrameHeader h = MakeHeader(FrameType::kPull, old.job_id(), epoch, p.version, p.rank,
                               old.shard(), p.first_bucket);
    h.bucket_count = static_cast<uint32_t>(p.bucket_count);
    SendError(p.reply_to, h, refused);
  }
  TESSEL_LOG(INFO) << "job '" << old.spec().job() << "' shard " << old.shard() << ": told "
                   << waiting.size() << " pull(s) of epoch " << epoch
                   << " that a newer recovery replaced the job";
}

JobFrameKeys* DataPlane::AuthOf(uint64_t job_id) {
  return frame_keys_ != nullptr ? frame_keys_->Find(job_id).get() : nullptr;
}

JobFrameKeys* DataPlane::PayloadKeysOf(uint64_t job_id) {
  JobFrameKeys* keys = AuthOf(job_id);
  return keys != nullptr && keys->payload() ? keys : nullptr;
}

void DataPlane::DropBadPayload(ShardJob& job, const FrameHeader& h) {
  const int64_t n = ++bad_payload_;
  job.CountRejected();
  if (metrics_ != nullptr) metrics_->FrameRefused("bad_payload");
  TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
      << "dropping " << DescribeHeader(h) << " for job '" << job.spec().job()
      << "': its payload does not match the payload tag its authenticated header carries "
         "(changed in flight); nothing of it is used and no answer is sent ("
      << n << " dropped so far)";
}

WireHeader DataPlane::ToWorker(JobFrameKeys* keys, const FrameHeader& h, const void* payload) {
  if (keys == nullptr) return ToWire(nullptr, h);
  return keys->SealFrameToWorker(h, payload);
}

bool DataPlane::RankEndpoints::Admit(const std::shared_ptr<ShardJob>& job, const FrameHeader& h,
                                     PeerId from, int32_t generation) {
  // Only frames of the job's epoch bind (the others are refused as stale
  // after this), and only ranks of the job (checked by the caller).
  if (h.epoch != job->epoch()) return true;
  absl::MutexLock lock(&mu_);
  Bound& b = bound_[job->job_id()];
  if (b.job.lock() != job || b.epoch != h.epoch) {
    b.job = job;
    b.epoch = h.epoch;
    b.from.clear();
  }
  auto [it, first] = b.from.try_emplace(h.rank, Endpoint{from, generation});
  if (first) return true;
  if (generation > it->second.generation) {  // handed to a replacement: its endpoint now
    it->second = Endpoint{from, generation};
    return true;
  }
  return generation == it->second.generation && it->second.peer == from;
}

void DataPlane::ServeParams(const std::shared_ptr<ShardJob>& job, const ShardJob::Serve& serve) {
  const int64_t epoch = job->epoch();
  // Kept by FrameKeys for the server's life.
  JobFrameKeys* const auth =
      frame_keys_ != nullptr ? frame_keys_->For(job->job_id(), job->shard()).get() : nullptr;
  for (const ShardJob::Puller& p : serve.pullers) {
    if (p.bucket_count == 0) {  // notify only: the shard reached the step
      const FrameHeader h = MakeHeader(FrameType::kParams, job->job_id(), epoch, p.version, p.rank,
                                       job->shard(), p.first_bucket);
      const WireHeader wire = ToWorker(auth, h, nullptr);
      transport_->Send(p.reply_to, wire.span(), nullptr, 0, nullptr);
      continue;
    }
    for (int b : p.buckets) {
      FrameHeader h =
          MakeHeader(FrameType::kParams, job->job_id(), epoch, p.version, p.rank, job->shard(), b);
      h.bucket_count = static_cast<uint32_t>(p.bucket_count);
      h.payload_bytes = job->served_bytes(b);
      const WireHeader wire = ToWorker(auth, h, job->served_bucket(b, p.version));
      job->CountPulled(p.rank, p.version, h.payload_bytes);
      if (metrics_ != nullptr) metrics_->FrameSent(FrameType::kParams, h.payload_bytes);
      if (timeline_ != nullptr) {
        timeline_->Instant("params sent", "data path", Timeline::NowUs(),
                           {.job = job->spec().job(),
                            .step = p.version,
                            .rank = static_cast<int>(p.rank),
                            .shard = job->shard(),
                            .bucket = b});
      }
      transport_->Send(p.reply_to, wire.span(), job->served_bucket(b, p.version), h.payload_bytes,
                       [job](absl::Status s) {
                         if (!s.ok()) TESSEL_LOG(WARNING) << "sending parameters failed: " << s;
                       });
    }
  }
}

void DataPlane::ComputeLoop() {
  const UpdatePool::Scope scope(&pool_);  // UpdateRule splits large buckets over it
  absl::Time last_work = absl::Now();
  for (;;) {
    Work work;
    // Out of work: poll a while before sleeping (the next bucket of the
    // step is usually a fraction of a millisecond away).
    while (queued_.load(std::memory_order_acquire) == 0 && !stop_.load(std::memory_order_relaxed) &&
           absl::Now() - last_work < spin_.Window()) {
      sched_yield();
    }
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DataPlane* d)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) { return d->stop_ || !d->updates_.empty(); },
          this));
      if (stop_) return;
      work = std::move(updates_.front());
      updates_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    last_work = absl::Now();
    if (work.fold) {
      const int64_t fold_us = timeline_ != nullptr ? Timeline::NowUs() : 0;
      work.job->FoldPrefix(work.bucket);
      if (timeline_ != nullptr) {
        timeline_->Span("fold ranks in order", "optimizer", fold_us, Timeline::NowUs(),
                        {.job = work.job->spec().job(),
                         .step = work.job->version() + 1,
                         .shard = work.job->shard(),
                         .bucket = work.bucket});
      }
      continue;
    }
    UpdateAndServe(work.job, work.bucket, /*inline_update=*/false);
  }
}

void DataPlane::UpdateAndServe(const std::shared_ptr<ShardJob>& job, int bucket,
                               bool inline_update) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t start_us = timeline_ != nullptr ? Timeline::NowUs() : 0;
  const int64_t step = timeline_ != nullptr ? job->version() + 1 : 0;
  ShardJob::Serve serve = job->UpdateBucket(bucket);
  serve.released.clear();  // back to the workers before their parameters go out
  if (timeline_ != nullptr) {
    // One name on either thread: tools and tests follow a bucket by it (the
    // trace's thread says where it ran).
    timeline_->Span(
        "reduce + update", "optimizer", start_us, Timeline::NowUs(),
        {.job = job->spec().job(), .step = step, .shard = job->shard(), .bucket = bucket});
  }
  if (metrics_ != nullptr) {
    metrics_->BucketUpdated(job->spec().job(), job->bucket_elements(bucket),
                            metrics::SecondsSince(start));
  }
  if (serve.snapshot.has_value()) {  // inline: only a checkpoint asked for since the check
    absl::Status s = checkpointer_->Submit(std::move(*serve.snapshot), /*wait=*/!inline_update);
    if (!s.ok()) TESSEL_LOG(ERROR) << "checkpoint not taken: " << s;
  }
  if (!serve.norms.empty()) SendNorms(job, serve.norms);
  if (!serve.pullers.empty()) ServeParams(job, serve);
}

}  // namespace tessel
