#include "server/shard_job.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "rpc/job_spec.h"
#include "runtime/log.h"
#include "server/job_admission.h"

namespace tessel {
namespace {

// The reducer's view of a shard: its buckets as offsets into the range.
BucketReducer::Options ReducerOptions(const Layout& layout, int shard, const v1::JobSpec& spec) {
  BucketReducer::Options o;
  o.world = NumRankGroups(spec);  // one push per group and bucket
  const Range range = layout.shard_range(shard);
  for (int b = 0; b < layout.num_buckets(shard); ++b) {
    const Range br = layout.bucket_range(shard, b);
    o.buckets.push_back({br.begin - range.begin, br.end - range.begin});
  }
  o.shard_elements = range.size();
  o.half = JobHalfType(spec);
  o.topk_ratio = spec.compression().topk_ratio();
  return o;
}

// What the frame checks know of the shard.
FrameChecks::Shape Shape(std::string where, uint64_t job_id, const Layout& layout, int shard,
                         const v1::JobSpec& spec, const BucketReducer& reducer, bool holds_params) {
  FrameChecks::Shape s;
  s.where = std::move(where);
  s.job_id = job_id;
  s.shard = shard;
  s.world = spec.world_size();
  for (int b = 0; b < layout.num_buckets(shard); ++b) {
    s.bucket_elements.push_back(layout.bucket_range(shard, b).size());
    s.push_bytes.push_back(reducer.push_bytes(b));
  }
  s.half = JobHalfType(spec).has_value();
  s.topk_ratio = spec.compression().topk_ratio();
  s.holds_params = holds_params;
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardJob>> ShardJob::Create(const v1::JobSpec& spec, int shard_index,
                                                           int64_t epoch,
                                                           std::shared_ptr<PayloadMemory> memory) {
  TESSEL_ASSIGN_OR_RETURN(Layout layout, ValidateJobSpec(spec));
  if (shard_index < 0 || shard_index >= spec.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat("job '", spec.job(), "': shard_index ",
                                                   shard_index, " is outside [0, ",
                                                   spec.num_shards(), ")"));
  }
  if (epoch < 0) return absl::InvalidArgumentError("epoch must be >= 0");
  TESSEL_ASSIGN_OR_RETURN(OptimizerParams optimizer, OptimizerFromProto(spec.optimizer()));
  TESSEL_RETURN_IF_ERROR(
      CheckShardFits(spec, shard_index, layout, optimizer, PhysicalMemoryBytes()));
  // Checkpoints keep the spec as JSON: one that cannot be written would make
  // every checkpoint of the job unreadable, so the job is refused now.
  TESSEL_ASSIGN_OR_RETURN(std::string spec_json, JobSpecToJson(spec));
  return std::unique_ptr<ShardJob>(new ShardJob(spec, std::move(spec_json), std::move(layout),
                                                shard_index, epoch, optimizer, std::move(memory)));
}

absl::StatusOr<std::unique_ptr<ShardJob>> ShardJob::Restore(const v1::JobSpec& spec,
                                                            int shard_index, int64_t epoch,
                                                            const Manifest& manifest,
                                                            Checkpointer* checkpointer,
                                                            std::shared_ptr<PayloadMemory> memory) {
  TESSEL_RETURN_IF_ERROR(CheckRestorable(spec, manifest));
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<ShardJob> job,
                          Create(spec, shard_index, epoch, std::move(memory)));
  std::vector<float*> state;
  for (auto& slot : job->rule_->state()) state.push_back(slot.data());
  TESSEL_RETURN_IF_ERROR(
      checkpointer->Load(manifest, job->range_, job->served_.values(manifest.step), state));
  absl::MutexLock lock(&job->mu_);
  job->settings_.ResetSkips(manifest.tensor_skips);
  job->version_ = manifest.step;
  job->hold_.Reset(manifest.step);
  job->initialized_ = true;
  job->RefreshHalf(manifest.step, 0, job->served_.size());
  job->restored_from_ = manifest.step;
  return job;
}

ShardJob::ShardJob(const v1::JobSpec& spec, std::string spec_json, Layout layout, int shard,
                   int64_t epoch, OptimizerParams optimizer, std::shared_ptr<PayloadMemory> memory)
    : spec_(spec),
      spec_json_(std::move(spec_json)),
      layout_(std::move(layout)),
      shard_(shard),
      range_(layout_.shard_range(shard)),
      job_id_(JobId(spec.job())),
      world_(spec.world_size()),
      group_(RankGroups(spec)),
      contributors_(NumRankGroups(spec)),
      num_buckets_(layout_.num_buckets(shard)),
      half_(JobHalfType(spec)),
      topk_ratio_(spec.compression().topk_ratio()),
      rule_(
          MakeUpdateRule(spec.strategy() == v1::STRATEGY_DDP, layout_, range_, world_, optimizer)),
      reducer_(ReducerOptions(layout_, shard, spec)),
      checks_(Shape(Where(), job_id_, layout_, shard, spec, reducer_, rule_->holds_params())),
      settings_(Where(), layout_, shard, optimizer),
      epoch_(epoch),
      pushes_(num_buckets_, contributors_),
      pulls_(num_buckets_),
      hold_(Where(), num_buckets_),
      checkpoints_(spec.checkpoint().every_steps()),
      transfer_(Where(), range_.size(), static_cast<int>(rule_->state().size()),
                static_cast<int>(layout_.tensors().size()), rule_->holds_params()) {
  served_ = ServedVersions(ServedVersions::Kept(rule_->holds_params(), spec.in_place_update()),
                           half_, static_cast<size_t>(range_.size()), std::move(memory));
  init_seen_.assign(num_buckets_, 0);
  initialized_ = !rule_->holds_params() || num_buckets_ == 0;
}

std::string ShardJob::Where() const {
  return absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
}

FrameChecks::State ShardJob::FrameStateLocked() const {
  // Version v-1 stays whole in its buffer until the step in flight updates
  // a bucket (served_versions.h).
  const bool previous_whole =
      served_.kept() == 2 && version_ >= 1 && buckets_updated_ == 0 && updates_running_ == 0;
  return FrameChecks::State{epoch_, version_, initialized_, previous_whole ? version_ - 1 : -1};
}

absl::Status ShardJob::RefusedLocked(absl::Status refusal, bool stale) {
  counters_.stale_epoch += stale ? 1 : 0;
  ++counters_.rejected;
  return refusal;
}

absl::StatusOr<void*> ShardJob::AcceptData(const FrameHeader& h, bool borrow, uint64_t* ticket) {
  absl::MutexLock lock(&mu_);
  if (ticket != nullptr) *ticket = 0;
  // The slot's state, where the frame names one (else the checks refuse it
  // before they read these).
  const bool slot = h.bucket >= 0 && h.bucket < num_buckets_ && h.rank >= 0 && h.rank < world_;
  const int g = slot ? group_[h.rank] : 0;
  bool stale = false;
  absl::Status s =
      checks_.CheckData(h, FrameStateLocked(), slot && init_seen_[h.bucket],
                        slot && pushes_.slot(h.bucket, g) == PushTracker::Slot::kEmpty, &stale);
  if (!s.ok() && contributors_ != world_ && absl::IsAlreadyExists(s)) {
    s = absl::AlreadyExistsError(absl::StrCat(Where(), "group ", g, " (rank ", h.rank,
                                              "'s) already pushed bucket ", h.bucket, " of step ",
                                              h.step, ": one push per group and bucket"));
  }
  if (!s.ok()) return RefusedLocked(s, stale);
  if (h.type == FrameType::kInit) {
    init_seen_[h.bucket] = 1;
    return served_.values(version_) + (layout_.bucket_range(shard_, h.bucket).begin - range_.begin);
  }
  if (IsPushPart(h)) {
    absl::Status taken = pushes_.parts().Take(h.bucket, h.rank, PushPartIndex(h), h.step);
    if (!taken.ok()) {
      return RefusedLocked(absl::Status(taken.code(), absl::StrCat(Where(), taken.message())),
                           /*stale=*/false);
    }
  }
  const bool held = (h.flags & kFrameHoldUpdate) != 0;
  if (held && !rule_->holds_params()) {
    return RefusedLocked(absl::FailedPreconditionError(absl::StrCat(
                             Where(),
                             "DDP's workers apply the update and clip it themselves; "
                             "a held step (kFrameHoldUpdate) is for zero1, zero2 and fsdp")),
                         /*stale=*/false);
  }
  if (absl::Status agreed = hold_.OnPush(held); !agreed.ok()) {
    if (IsPushPart(h)) pushes_.parts().Failed(h.bucket, h.rank, PushPartIndex(h));
    return RefusedLocked(agreed, /*stale=*/false);
  }
  if (held && held_.empty()) held_.assign(static_cast<size_t>(range_.size()), 0.f);
  const uint64_t reserved = pushes_.Reserve(
      h.bucket, g, absl::Now(), h.rank, IsPushPart(h) ? static_cast<int>(PushPartIndex(h)) : -1);
  if (ticket != nullptr) *ticket = reserved;
  if (IsPushPart(h)) return reducer_.AcceptPart(h.bucket, g);
  // After parts the push is added to them: copied, never borrowed.
  return reducer_.Accept(h.bucket, g, borrow && !reducer_.HasParts(h.bucket, g));
}

ShardJob::Completion ShardJob::IgnoredLocked(const FrameHeader& h, bool ok) {
  const int64_t n = ++abandoned_completions_;
  TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
      << Where() << "ignoring the late " << (ok ? "completion" : "failure") << " of "
      << DescribeHeader(h) << ": the receive was abandoned when rank " << h.rank
      << "'s process was replaced (" << n << " so far)";
  Completion c;
  c.abandoned = true;
  return c;
}

ShardJob::Completion ShardJob::CompleteReceive(const FrameHeader& h, const absl::Status& s,
                                               uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  Completion c;
  if (h.type != FrameType::kInit && !pushes_.Holds(h.bucket, group_[h.rank], ticket)) {
    return IgnoredLocked(h, s.ok());
  }
  if (h.type == FrameType::kInit) {
    if (!s.ok()) {
      init_seen_[h.bucket] = 0;
      return c;
    }
    if (++init_buckets_ == num_buckets_) {
      initialized_ = true;
      RefreshHalf(version_, 0, served_.size());
      c.serve.version = version_;
      if (spec_.checkpoint().initial()) c.serve.snapshot = SnapshotLocked();
      pulls_.Reached(version_, &c.serve.pullers);
    }
    return c;
  }
  if (IsPushPart(h)) {  // summed into the rank's push; the slot is free again
    if (s.ok()) {
      reducer_.LandPart(h.bucket, group_[h.rank]);
      counters_.pushed_bytes += static_cast<int64_t>(h.payload_bytes);
      pushes_.mutable_flight().CountBytes(group_[h.rank], static_cast<int64_t>(h.payload_bytes), 0);
    } else {
      pushes_.parts().Failed(h.bucket, h.rank, PushPartIndex(h));  // it may come again
    }
    pushes_.Release(h.bucket, group_[h.rank]);
    return c;
  }
  absl::StatusOr<BucketReducer::Landing> landed =
      s.ok() ? reducer_.Land(h.bucket, group_[h.rank]) : absl::StatusOr<BucketReducer::Landing>(s);
  if (s.ok() && !landed.ok()) {  // malformed top-k pairs: refused, the rank may push again
    ++counters_.rejected;
    c.error = absl::InvalidArgumentError(absl::StrCat(Where(), "bucket ", h.bucket, " from rank ",
                                                      h.rank, ": ", landed.status().message()));
  }
  if (!landed.ok()) {
    pushes_.Release(h.bucket, group_[h.rank]);
    if (!StepInProgressLocked()) pushes_.StopClock();
    return c;
  }
  LandedLocked(h, *landed, &c);
  return c;
}

ShardJob::Completion ShardJob::CompleteBorrowed(const FrameHeader& h, const void* data,
                                                std::shared_ptr<void> lease, uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  // Abandoned since AcceptData: the lease goes back unread.
  if (!pushes_.Holds(h.bucket, group_[h.rank], ticket)) return IgnoredLocked(h, true);
  Completion c;
  LandedLocked(h, reducer_.LandBorrowed(h.bucket, group_[h.rank], data, std::move(lease)), &c);
  return c;
}

int ShardJob::AbandonReceives(int rank) {
  if (rank < 0 || rank >= world_) return 0;
  absl::MutexLock lock(&mu_);
  const std::vector<PushTracker::Abandoned> gone = pushes_.Abandon(rank);
  if (gone.empty()) return 0;
  std::vector<int> buckets;
  for (const PushTracker::Abandoned& a : gone) {
    buckets.push_back(a.bucket);
    // Nothing of the part was summed: it may come again, as after a failure.
    if (a.part >= 0) pushes_.parts().Failed(a.bucket, rank, static_cast<uint32_t>(a.part));
  }
  const int64_t retired = reducer_.Abandon(group_[rank], buckets);
  if (!StepInProgressLocked()) pushes_.StopClock();
  TESSEL_LOG(WARNING) << Where() << "rank " << rank << "'s process was replaced; " << gone.size()
                      << " unfinished receive(s) of step " << version_ << " abandoned ("
                      << DescribeBuckets(buckets, num_buckets_) << ", owed again; " << retired
                      << " bytes of receive buffers retired until the job ends, "
                      << reducer_.retired_bytes() << " in all)";
  return static_cast<int>(gone.size());
}

void ShardJob::LandedLocked(const FrameHeader& h, const BucketReducer::Landing& landed,
                            Completion* c) {
  counters_.pushed_bytes += static_cast<int64_t>(h.payload_bytes);
  pushes_.mutable_flight().CountBytes(group_[h.rank], static_cast<int64_t>(h.payload_bytes), 0);
  // The tracker and the reducer count the same landings: one bucket is
  // complete for both or for neither.
  const bool complete = pushes_.Receive(h.bucket, group_[h.rank]);
  assert(complete == landed.complete);
  (void)complete;
  if (landed.complete) c->update = h.bucket;
  if (landed.fold) c->fold = h.bucket;
}

void ShardJob::FoldPrefix(int bucket) {
  const BucketReducer::Folded folded = reducer_.Fold(bucket);
  if (folded.pushes == 0 && folded.us == 0) return;
  absl::MutexLock lock(&mu_);
  counters_.folded_pushes += folded.pushes;
  counters_.update_us += folded.us;
}

ShardJob::Serve ShardJob::UpdateBucket(int bucket) {
  BucketStep step;
  StepHold::Action action;
  int64_t from = 0;  // the version the update reads; it writes from + 1
  {
    absl::MutexLock lock(&mu_);
    ++updates_running_;
    from = version_;
    // A copy: SkipTensors may add to the skipped tensors meanwhile.
    step = settings_.ForUpdate(version_ + 1);
    action = hold_.Begin(bucket);
    HeldMultiplierLocked(&step);
  }
  Serve serve;
  // A held step: reduced and measured, applied once released.
  if (action == StepHold::Action::kReduce && !ReduceHeld(bucket, &step, &serve)) return serve;
  const Range br = layout_.bucket_range(shard_, bucket);
  const auto started = std::chrono::steady_clock::now();
  // Out of place: version `from` stays whole for its pullers (the same
  // buffer where one is kept: mixed precision's masters, DDP's mean).
  const float* in = served_.update_in(from);
  float* out = served_.update_out(from);
  if (action == StepHold::Action::kUpdate) {
    // Waits for a fold of this bucket that runs; none starts after.
    reducer_.BeginSum(bucket);
    reducer_.SumChunks(bucket, [&](Range part, const float* const* srcs, int count) {
      rule_->Apply(step, part, srcs, count, in, out);
    });
  } else {  // its sum is held: the update's one source
    const Range part{br.begin - range_.begin, br.end - range_.begin};
    const float* held[] = {held_.data() + part.begin};
    rule_->Apply(step, part, held, 1, in, out);
  }
  // Mixed precision: the parameters (DDP: the mean) go back in half.
  RefreshHalf(from + 1, static_cast<size_t>(br.begin - range_.begin),
              static_cast<size_t>(br.size()));
  const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
  // The borrowed pushes are read: back to their workers.
  if (action == StepHold::Action::kUpdate) serve.released = reducer_.EndSum(bucket);
  absl::MutexLock lock(&mu_);
  --updates_running_;
  counters_.update_us += took_us;
  if (++buckets_updated_ == num_buckets_) {
    FinishStepLocked(&serve);
    return serve;
  }
  // Early serving: the pulls of this step get this bucket now.
  pulls_.BucketUpdated(step.step, bucket, &serve.pullers);
  serve.version = version_;
  return serve;
}

void ShardJob::FinishStepLocked(Serve* serve) {
  ++version_;
  ++counters_.applied_steps;
  buckets_updated_ = 0;
  settings_.EndStep();
  // NORM_ASKs still waiting: the step was released before it was measured.
  AnswerNormsLocked(absl::FailedPreconditionError(absl::StrCat(
                        Where(), "step ", version_ - 1,
                        " was released and applied before every bucket was measured: every rank "
                        "must ask for the norm before any releases the step")),
                    serve);
  hold_.EndStep();
  pushes_.NextStep(version_ - 1, absl::Now());  // the step that just ended
  serve->version = version_;
  if (checkpoints_.DueAt(version_)) serve->snapshot = SnapshotLocked();
  pulls_.Reached(version_, &serve->pullers);
}

absl::StatusOr<ShardJob::Serve> ShardJob::AcceptPull(const FrameHeader& h, uint64_t reply_to) {
  absl::MutexLock lock(&mu_);
  bool stale = false;
  absl::StatusOr<FrameChecks::PullAt> at = checks_.CheckPull(h, FrameStateLocked(), &stale);
  if (!at.ok()) return RefusedLocked(at.status(), stale);
  const bool ready = *at == FrameChecks::PullAt::kReady;
  Serve serve;
  serve.version = version_;
  Puller p{reply_to, h.rank, h.step, h.bucket, static_cast<int>(h.bucket_count), {}};
  if (h.step >= version_) {  // not a replacement's pull of the version before
    pushes_.mutable_flight().PullAsked(group_[h.rank], h.step - 1, !ready,
                                       absl::ToUnixMicros(absl::Now()));
  }
  if (ready) {
    for (int i = 0; i < p.bucket_count; ++i) p.buckets.push_back(p.first_bucket + i);
    serve.pullers.push_back(std::move(p));
    return serve;
  }
  // In flight: the buckets this step already updated go now, the rest as
  // their updates end.
  if (std::optional<Puller> now = pulls_.Add(std::move(p))) serve.pullers.push_back(*now);
  return serve;
}

std::vector<ShardJob::Puller> ShardJob::TakeWaitingPulls() {
  absl::MutexLock lock(&mu_);
  std::vector<Puller> all = pulls_.TakeAll();
  for (const NormReply& n : norm_waiters_)
    all.push_back(Puller{n.reply_to, n.rank, n.step, 0, 0, {}});
  norm_waiters_.clear();
  return all;
}

bool ShardJob::StepInProgressLocked() const {
  return buckets_updated_ > 0 || updates_running_ > 0 || pushes_.AnyPushed();
}

void ShardJob::AwaitUpdatesLocked() {
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &updates_running_));
}

std::optional<std::string> ShardJob::StallReport(absl::Time now, absl::Duration after) {
  absl::MutexLock lock(&mu_);
  const std::optional<absl::Duration> stalled = pushes_.StallDue(now, after);
  if (!stalled) return std::nullopt;
  // Who the step waits for: per rank, the buckets it has not pushed, and
  // those whose payload is still on its way.
  const PushTracker::Waiting waiting = contributors_ == world_
                                           ? pushes_.DescribeWaiting(worker_ids_)
                                           : pushes_.DescribeGroupsWaiting(group_);
  std::string out = absl::StrCat(
      "job '", spec_.job(), "' shard ", shard_, ": step ", version_, " (epoch ", epoch_,
      ") stalled for ", absl::FormatDuration(absl::Trunc(*stalled, absl::Milliseconds(100))), ", ",
      waiting.ToString());
  if (waiting.empty()) {
    absl::StrAppend(&out, "every push arrived; ", buckets_updated_, " of ", num_buckets_,
                    " buckets updated (", updates_running_, " running)");
    if (const std::string held = hold_.Waiting(); !held.empty()) {
      absl::StrAppend(&out, "; waiting for ", held);
    }
  }
  const std::vector<int> pullers = pulls_.RanksWaitingFor(version_ + 1);
  if (!pullers.empty()) {
    absl::StrAppend(&out, "; pulls waiting for step ", version_ + 1, ": ",
                    pullers.size() == 1 ? "rank " : "ranks ", absl::StrJoin(pullers, ", "));
  }
  return out;
}

const void* ShardJob::served_bucket(int b, int64_t version) const {
  return served_.served(version, layout_.bucket_range(shard_, b).begin - range_.begin);
}

uint64_t ShardJob::served_bytes(int b) const {
  return static_cast<uint64_t>(layout_.bucket_range(shard_, b).size()) * wire_bytes();
}

absl::Status ShardJob::SetOptimizer(const OptimizerParams& optimizer, int64_t step) {
  if (!rule_->holds_params()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), "DDP runs the optimizer on the workers; the servers only average"));
  }
  absl::MutexLock lock(&mu_);
  return settings_.SetOptimizer(optimizer, step, version_,
                                /*applying=*/buckets_updated_ > 0 || updates_running_ > 0);
}

absl::Status ShardJob::SkipTensors(const std::vector<int32_t>& tensors, int64_t step) {
  if (!rule_->holds_params()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), "DDP runs the optimizer on the workers; they skip tensors themselves"));
  }
  absl::MutexLock lock(&mu_);
  return settings_.SkipTensors(tensors, step, version_, [this](int b) {
    mu_.AssertHeld();
    return pushes_.Complete(b);
  });
}

std::vector<int64_t> ShardJob::tensor_skips() {
  absl::MutexLock lock(&mu_);
  return settings_.skips();
}

absl::Status ShardJob::SetEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", spec_.job(), "': epoch may not go back from ", epoch_, " to ", epoch));
  }
  epoch_ = epoch;
  return absl::OkStatus();
}

int64_t ShardJob::epoch() {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void ShardJob::InheritCounters(ShardJob& previous) {
  const JobCounters before = previous.Stats(/*with_digest=*/false).counters;
  absl::MutexLock lock(&mu_);
  counters_.Add(before);
  ++counters_.recoveries;
}

void ShardJob::StartAt(int64_t step) {
  absl::MutexLock lock(&mu_);
  version_ = step;
  hold_.Reset(step);
  restored_from_ = step;
  pushes_.StopClock();
}

int64_t ShardJob::restored_from() {
  absl::MutexLock lock(&mu_);
  return restored_from_;
}

void ShardJob::SetWorkerIds(std::vector<int> ids) {
  absl::MutexLock lock(&mu_);
  worker_ids_ = std::move(ids);
}

std::vector<int> ShardJob::worker_ids() {
  absl::MutexLock lock(&mu_);
  return worker_ids_;
}

void ShardJob::SetCreator(std::string creator) {
  absl::MutexLock lock(&mu_);
  creator_ = std::move(creator);
}

std::string ShardJob::creator() {
  absl::MutexLock lock(&mu_);
  return creator_;
}

void ShardJob::CountRejected() {
  absl::MutexLock lock(&mu_);
  ++counters_.rejected;
}

void ShardJob::CountPulled(int rank, int64_t version, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  counters_.pulled_bytes += static_cast<int64_t>(bytes);
  FlightRecorder& flight = pushes_.mutable_flight();
  flight.CountBytes(group_[rank], 0, static_cast<int64_t>(bytes));
  flight.PullServed(group_[rank], version - 1, version == version_ + 1,
                    absl::ToUnixMicros(absl::Now()));
}

int64_t ShardJob::version() {
  absl::MutexLock lock(&mu_);
  return version_;
}

bool ShardJob::CheckpointDueNext() {
  absl::MutexLock lock(&mu_);
  return checkpoints_.WouldBeDueAt(version_ + 1);
}

}  // namespace tessel
