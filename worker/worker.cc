#include "worker/worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/status_macros.h"
#include "core/tensor_steps.h"
#include "rpc/job_spec.h"
#include "rpc/token_env.h"
#include "runtime/log.h"
#include "runtime/metrics.h"
#include "worker/checkpoint_watch.h"
#include "worker/internal/bucket_exchange.h"
#include "worker/internal/convert.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/ddp_state.h"
#include "worker/internal/growth_policy.h"
#include "worker/internal/job_context.h"
#include "worker/internal/rejoin.h"
#include "worker/internal/worker_metrics.h"
#include "worker/internal/worker_parts.h"
#include "worker/job_start.h"

namespace tessel {

using internal::WorkerParts;

absl::StatusOr<std::unique_ptr<Worker>> Worker::Connect(const WorkerOptions& given) {
  TESSEL_RETURN_IF_ERROR(ValidateWorkerOptions(given));
  WorkerOptions options = given;
  TESSEL_ASSIGN_OR_RETURN(options.token, PresentedToken(options.token));
  std::unique_ptr<Worker> w(new Worker(std::make_unique<WorkerParts>(options)));
  TESSEL_RETURN_IF_ERROR(w->Start());
  return w;
}

Worker::Worker(std::unique_ptr<WorkerParts> parts)
    : p_(std::move(parts)),
      checkpoints_(std::make_unique<CheckpointWatch>(p_->ctx.options, absl::Now())) {}

Worker::~Worker() = default;  // WorkerParts stops the transport first

absl::Status Worker::Start() {
  TESSEL_RETURN_IF_ERROR(p_->Build());
  return p_->membership->Join();
}

absl::Status Worker::RegisterLayout(const std::vector<TensorDesc>& tensors,
                                    absl::Span<const float> init) {
  internal::JobContext& ctx = p_->ctx;
  const WorkerOptions& o = ctx.options;
  if (ctx.layout != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(ctx.Where(), ": layout already registered"));
  }
  v1::JobSpec spec = internal::MakeJobSpec(o, ctx.world_size, tensors, num_servers());
  TESSEL_ASSIGN_OR_RETURN(Layout layout, ValidateJobSpec(spec));
  // A newcomer (elastic growth) takes part in the recovery that admits it.
  const bool newcomer = p_->membership->growth().newcomer();
  if (newcomer) ctx.resume = true;
  if (o.auto_resume && !ctx.resume) {
    TESSEL_ASSIGN_OR_RETURN(const bool under_way, p_->control->UnderWay(!ctx.ddp()));
    if (under_way) {
      ctx.resume = true;
      TESSEL_LOG(INFO) << ctx.Where() << ": the job is under way (or has a checkpoint): resuming";
    }
  }
  const bool ddp = ctx.ddp();
  const size_t n = static_cast<size_t>(layout.num_params());
  TESSEL_RETURN_IF_ERROR(
      CheckJobStart({ctx.Where(), ddp, ctx.resume, o.recovery, ctx.rank.load(), init.size(), n}));
  ctx.half = JobHalfType(spec);
  if (!newcomer) {  // a newcomer takes the groups of the recovery that admits it
    const std::vector<int>& ids = p_->membership->member_ids();
    const internal::AggregationPlan plan = p_->membership->aggregation().Plan(ids);
    TESSEL_RETURN_IF_ERROR(p_->membership->aggregation().Use(plan, ids));
    for (int g : plan.groups) spec.add_rank_groups(g);
  }
  // One served version where no worker can rejoin in place (a newcomer's
  // job is elastic: never in place, whatever groups the recovery gives it).
  internal::SetServedVersions(o, &spec);
  p_->channel->SetSink(ctx.fsdp() ? static_cast<internal::FrameSink*>(p_->units.get())
                                  : p_->exchange.get());
  ctx.layout = std::make_unique<Layout>(std::move(layout));
  p_->spec = spec;
  // A recovering worker (or a restarted job) joins the recovery protocol,
  // which creates the job: rank 0 restores every shard, the others wait.
  const bool join_recovery = ctx.resume && o.recovery;
  absl::Status s = join_recovery ? absl::OkStatus() : CreateJob();
  if (s.ok() && ctx.unit_grads()) s = p_->units->Init();
  if (!s.ok()) {
    ctx.layout.reset();
    return s;
  }
  p_->exchange->Allocate();
  if (!join_recovery && !newcomer) {  // else the recovery meets
    if (absl::Status met = p_->exchange->Meet(); !met.ok()) {
      ctx.layout.reset();
      return met;
    }
  }
  internal::ModelBuffers& b = p_->exchange->buffers();
  if (ddp) {
    // A replacement (resume) holds nothing yet: its recovery copies the
    // state of the surviving workers, whatever `init` holds.
    p_->ddp.Init(n, !join_recovery);
    if (!join_recovery) std::copy(init.begin(), init.end(), b.params.begin());
    if (ctx.half) FloatToHalf(*ctx.half, b.params.data(), b.params_half.data(), n);
  }
  if (ddp && !join_recovery) return absl::OkStatus();
  s = newcomer ? p_->recovery->Admit() : join_recovery ? ResumeInJob() : PullInitial(init);
  if (!s.ok()) ctx.layout.reset();
  if (s.ok() && ctx.resume && !join_recovery) {
    TESSEL_LOG(INFO) << ctx.Where() << ": resumed from the checkpoint of step " << ctx.step;
  }
  return s;
}

absl::Status Worker::ResumeInJob() {
  return RejoinOrRollBack(p_->ctx.options.resume_step, /*replacement=*/true);
}

absl::Status Worker::RejoinOrRollBack(int64_t restore_step, bool replacement) {
  // A replacement for a lost worker (a new process) rejoins the step in
  // flight (internal/rejoin.h) where the shards still hold it: RejoinInPlace
  // waits for the job to be whole and reads the shards; a shard that lost
  // the job (a server restarted) sends it to a rollback, as does an
  // in-place attempt that fails otherwise. A process that lost its own step
  // (its lease lapsed: paused or cut off; or it saw a server change) joins
  // a rollback: what its transport and the shards kept of its step is not
  // known to be whole (issue 44 item 4).
  const bool eligible = internal::InPlaceEligible(p_->ctx);
  const bool again = p_->ctx.step == p_->recovery->last_in_place_step();
  if (restore_step < 0 && eligible && replacement && !again) {
    absl::StatusOr<bool> in_place = p_->recovery->RejoinInPlace();
    if (in_place.ok() && *in_place) return absl::OkStatus();
    // The job did not become whole within the recovery timeout: a rollback
    // would wait for the same members again.
    if (absl::IsDeadlineExceeded(in_place.status())) return in_place.status();
    if (!in_place.ok()) {
      TESSEL_LOG(WARNING) << p_->ctx.Where()
                          << ": rejoining in place failed, joining a rollback instead: "
                          << in_place.status().message();
    }
  }
  // The others of such a job may be waiting in place, not restoring.
  return p_->recovery->Run(restore_step, /*restore_if_nobody_does=*/eligible);
}

absl::Status Worker::CreateJob() {
  internal::JobContext& ctx = p_->ctx;
  const bool ddp = ctx.ddp();
  v1::CreateJobRequest req;
  *req.mutable_spec() = p_->spec;
  req.set_epoch(ctx.epoch.load());
  req.set_restore(ctx.resume);
  req.set_restore_step(ctx.options.resume_step);
  TESSEL_RETURN_IF_ERROR(
      p_->control->CreateJob(req, "CreateJob", [&](int shard, const v1::CreateJobResponse& resp) {
        return CheckCreatedShard(ctx.Where(), ctx.resume, ddp, shard, resp.step(), &ctx.step);
      }));
  // Before the first frame: the servers may authenticate them.
  TESSEL_ASSIGN_OR_RETURN(std::vector<FrameKeyGrant> keys, p_->control->FrameKeys());
  return p_->channel->SetFrameKeys(keys);
}

absl::Status Worker::PullInitial(absl::Span<const float> init) {
  internal::JobContext& ctx = p_->ctx;
  // ZeRO: rank 0 seeds the servers (unless resuming); everyone pulls.
  if (ctx.rank.load() == 0 && !ctx.resume) {
    // fsdp keeps no copy: INIT is sent from the caller's buffer, and waited for.
    // Mixed precision sends the fp32 masters from the caller's buffer too.
    const float* source = init.data();
    if (!ctx.fsdp() && !ctx.half) {
      PayloadVector<float>& params = p_->exchange->buffers().params;
      std::copy(init.begin(), init.end(), params.begin());
      source = params.data();
    }
    p_->exchange->SendInit(source);
    if (ctx.fsdp() || ctx.half) p_->channel->WaitForSends();
  }
  // fsdp: parameters are gathered per unit; wait until every shard is
  // initialized (or restored) so no gradient can arrive before its
  // parameters exist.
  if (ctx.fsdp()) return p_->units->Barrier(ctx.step);
  return p_->exchange->Pull(ctx.step);
}

absl::Span<float> Worker::params() { return absl::MakeSpan(p_->exchange->buffers().params); }
absl::Span<float> Worker::grads() { return absl::MakeSpan(p_->exchange->buffers().grads); }
std::optional<HalfType> Worker::half_type() const { return p_->ctx.half; }
absl::Span<uint16_t> Worker::half_params() {
  return absl::MakeSpan(p_->exchange->buffers().params_half);
}
absl::Span<uint16_t> Worker::half_grads() {
  return absl::MakeSpan(p_->exchange->buffers().grads_half);
}

namespace {
// Tensor `name`'s elements of a model-sized buffer; empty if there is no such
// tensor or the buffer is not held.
absl::Span<float> TensorView(const Layout* layout, absl::Span<float> flat,
                             const std::string& name) {
  const int i = layout == nullptr ? -1 : layout->FindTensor(name);
  if (i < 0 || flat.empty()) return {};
  const TensorSlot& t = layout->tensors()[i];
  return absl::MakeSpan(flat.data() + t.offset, static_cast<size_t>(t.numel));
}
}  // namespace

absl::Span<float> Worker::tensor_params(const std::string& name) {
  return TensorView(p_->ctx.layout.get(), absl::MakeSpan(p_->exchange->buffers().params), name);
}

absl::Span<float> Worker::tensor_grads(const std::string& name) {
  return TensorView(p_->ctx.layout.get(), absl::MakeSpan(p_->exchange->buffers().grads), name);
}

absl::Status Worker::AccumulateGradients(absl::Span<const float> micro) {
  if (p_->ctx.layout == nullptr) {
    return absl::FailedPreconditionError("AccumulateGradients before RegisterLayout");
  }
  return p_->exchange->AccumulateGradients(micro);
}

absl::Status Worker::GradientsReady(int64_t begin, int64_t end) {
  if (p_->ctx.layout == nullptr) {
    return absl::FailedPreconditionError("GradientsReady before RegisterLayout");
  }
  return p_->exchange->GradientsReady(begin, end);
}

absl::Span<uint8_t> Worker::sparse_grads() {
  if (p_->ctx.layout == nullptr) return {};
  return p_->exchange->sparse();
}

absl::StatusOr<absl::Span<uint8_t>> Worker::SparseBucket(int shard, int bucket) {
  if (p_->ctx.layout == nullptr) {
    return absl::FailedPreconditionError("SparseBucket before RegisterLayout");
  }
  return p_->exchange->SparseBucket(shard, bucket);
}

absl::Status Worker::SparseGradientsReady(int shard, int bucket) {
  if (p_->ctx.layout == nullptr) {
    return absl::FailedPreconditionError("SparseGradientsReady before RegisterLayout");
  }
  return p_->exchange->SparseReady(shard, bucket);
}

absl::Status Worker::Step() {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr) return absl::FailedPreconditionError("Step before RegisterLayout");
  if (ctx.fsdp()) {
    return absl::FailedPreconditionError(
        "fsdp steps go unit by unit: Gather/UnitGrads/PushUnit/Release, then FinishStep()");
  }
  if (ctx.unit_grads() && p_->exchange->unpushed() > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.Where(),
        ": with per-unit gradients every unit must be pushed (PushUnit) before Step(); ",
        p_->exchange->unpushed(), " bucket(s) were not"));
  }
  const absl::Time start = absl::Now();
  p_->compute_ns = p_->last_step_end ? absl::ToInt64Nanoseconds(start - *p_->last_step_end) : 0;
  TESSEL_RETURN_IF_ERROR(ReleaseIfHeld());
  if (p_->pulled_mean_step != ctx.step) {  // else PullMean received it
    TESSEL_RETURN_IF_ERROR(p_->exchange->Exchange(ctx.step + 1));
  }
  ++ctx.step;
  p_->exchange->NextStep();
  double update_seconds = 0;
  p_->update_ns = 0;
  if (ctx.ddp()) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status applied = p_->ddp.Apply(ctx.step, ctx.half, *ctx.layout, &p_->exchange->buffers());
    if (!applied.ok()) {
      return absl::Status(applied.code(),
                          absl::StrCat(ctx.Where(), ": the DDP updater failed step ", ctx.step,
                                       ": ", applied.message()));
    }
    update_seconds = metrics::SecondsSince(start);
    p_->update_ns = static_cast<int64_t>(update_seconds * 1e9);
  }
  const StepPhases phases = last_step_phases();
  StepMetrics(phases, update_seconds);
  if (p_->membership != nullptr) {
    p_->membership->registry().SetPhases(ctx.step, phases.compute_ns, phases.push_ns,
                                         phases.wait_ns, phases.pull_ns);
  }
  WatchCheckpoints();
  absl::Status admitted = AdmitNewcomers();
  p_->last_step_end = absl::Now();
  return admitted;
}

absl::Status Worker::AdmitNewcomers() {
  internal::JobContext& ctx = p_->ctx;
  const WorkerOptions& o = ctx.options;
  const int slots = internal::GrowthSlots(o.elastic_max_workers, ctx.world_size,
                                          o.checkpoint.every_steps, ctx.step);
  if (slots == 0) return absl::OkStatus();
  TESSEL_ASSIGN_OR_RETURN(
      std::vector<uint64_t> all,
      p_->collectives->AllGatherWords(internal::GrowthProposal(
          p_->membership->growth().Newcomers(p_->membership->member_ids()), slots)));
  const std::vector<int> agreed = internal::AgreedNewcomers(all, ctx.world_size, slots);
  if (agreed.empty()) return absl::OkStatus();
  p_->membership->growth().Plan(agreed, ctx.step);
  return ctx.Recoverable(absl::AbortedError(
      absl::StrCat(ctx.Where(), ": admitting ", agreed.size(), " new worker(s) (registry rank(s) ",
                   absl::StrJoin(agreed, ", "), ") at the checkpoint of step ", ctx.step,
                   ": the job grows from ", ctx.world_size, " to ", ctx.world_size + agreed.size(),
                   " workers. Recover() admits them; nothing rolls back")));
}

int64_t Worker::checkpoints_failing_since() const { return checkpoints_->failing_since(); }

void Worker::WatchCheckpoints() {
  const internal::JobContext& ctx = p_->ctx;
  if (ctx.rank.load() != 0) return;
  checkpoints_->AfterStep(
      absl::Now(), ctx.Where(), [this] { return RequestCheckpoint(); },
      [this] { return p_->control->Stats(absl::Seconds(2)); });
}

absl::Status Worker::SetOptimizer(const OptimizerParams& optimizer) {
  internal::JobContext& ctx = p_->ctx;
  OptimizerParams& current = ctx.options.optimizer;
  if (optimizer.kind != current.kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.Where(), ": the optimizer is ", OptimizerKindName(current.kind), "; it cannot become ",
        OptimizerKindName(optimizer.kind), " (its state would not fit)"));
  }
  absl::Status valid = ValidateOptimizerParams(optimizer);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx.Where(), ": ", valid.message()));
  }
  if (ctx.layout != nullptr && !ctx.ddp()) {
    // Every shard is at step() and none can apply step() + 1 before this
    // rank pushes it: the new values are in place for that step. A shard
    // that took them and one that did not would disagree: the caller
    // retries (the same values are accepted again) or stops.
    TESSEL_RETURN_IF_ERROR(p_->control->SetOptimizer(optimizer, ctx.step + 1));
  }
  current = optimizer;
  *p_->spec.mutable_optimizer() = OptimizerToProto(optimizer);
  p_->ddp.set_optimizer(optimizer);
  return absl::OkStatus();
}

StepPhases Worker::last_step_phases() const {
  StepPhases phases = p_->exchange->last_phases();
  phases.compute_ns = p_->compute_ns;
  phases.update_ns = p_->update_ns;
  return phases;
}

std::string Worker::data_path() const { return p_->channel->DescribePaths(); }

std::string Worker::aggregation() const { return p_->ctx.aggregation; }

std::vector<std::string> Worker::device_memory_types() const {
  return p_->channel->transport().DeviceMemoryTypes();
}

absl::Status Worker::SkipTensors(absl::Span<const int32_t> tensors) {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr) {
    return absl::FailedPreconditionError("SkipTensors before RegisterLayout");
  }
  std::vector<uint8_t> mask;
  absl::Status valid =
      SkipMaskFromIndices(tensors, static_cast<int>(ctx.layout->tensors().size()), &mask);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.Where(), ": SkipTensors: ", valid.message()));
  }
  if (mask.empty()) return absl::OkStatus();
  if (ctx.ddp()) {  // the update runs here
    p_->ddp.set_skip_now(std::move(mask));
    return absl::OkStatus();
  }
  // Every shard is at step() and none can complete a bucket holding these
  // tensors before this rank pushes it.
  std::vector<int32_t> skipped;
  for (size_t t = 0; t < mask.size(); ++t) {
    if (mask[t] != 0) skipped.push_back(static_cast<int32_t>(t));
  }
  return p_->control->SkipTensors(skipped, ctx.step + 1);
}

absl::Status Worker::RequestCheckpoint() {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.ddp()) {
    return absl::FailedPreconditionError(
        "DDP keeps its state on the workers: there is no server checkpoint to ask for");
  }
  // Every shard is at step and no bucket of the next step can complete
  // before this rank pushes it, so step + 1 is a boundary no shard has passed.
  return p_->control->SaveCheckpoint(ctx.step + 1);
}

// --- fsdp ------------------------------------------------------------------

absl::Status Worker::SetDdpUpdater(DdpUpdater* updater) {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr || !ctx.ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": a DDP updater needs a ddp job after RegisterLayout"));
  }
  return p_->ddp.InstallUpdater(updater, ctx.half, &p_->exchange->buffers());
}

absl::StatusOr<std::vector<float>> Worker::GatherAll() {
  const internal::JobContext& ctx = p_->ctx;
  const internal::ModelBuffers& b = p_->exchange->buffers();
  if (ctx.ddp()) {  // a DDP updater holds the values that count
    TESSEL_RETURN_IF_ERROR(p_->ddp.SyncToHost(ctx.half, &p_->exchange->buffers()));
  }
  if (ctx.half && !ctx.fsdp()) {
    std::vector<float> all(b.params_half.size());
    HalfToFloat(*ctx.half, b.params_half.data(), all.data(), all.size());
    return all;
  }
  if (!ctx.fsdp()) return std::vector<float>(b.params.begin(), b.params.end());
  std::vector<float> all(static_cast<size_t>(ctx.layout->num_params()));
  TESSEL_RETURN_IF_ERROR(p_->units->GatherAll(absl::MakeSpan(all)));
  return all;
}

// --- recovery --------------------------------------------------------------

bool Worker::IsRecoverable(const absl::Status& status) { return internal::IsRecoverable(status); }

absl::Status Worker::MarkRecoverable(absl::Status status) {
  return internal::MarkRecoverable(std::move(status));
}

absl::Status Worker::CheckMembers() { return p_->membership->CheckMembers(); }
absl::Status Worker::CheckServers() { return p_->membership->CheckServers(); }
void Worker::SetWaitCheck(std::function<absl::Status()> check) {
  p_->membership->SetWaitCheck(std::move(check));
}
void Worker::SetResumeStep(int64_t step) { p_->ctx.options.resume_step = step; }
int Worker::recoveries() const { return p_->recovery->recoveries(); }
bool Worker::rejoined_in_place() const { return p_->recovery->in_place_rejoins() > 0; }
bool Worker::rejoined_step_held() const { return p_->recovery->rejoined_held(); }
std::string Worker::metrics_address() const {
  return p_->http == nullptr ? std::string() : p_->http->address();
}

void Worker::ReportLoss(double loss) {
  if (p_->membership != nullptr) p_->membership->registry().SetProgress(p_->ctx.step, loss);
}
int Worker::registry_rank() const { return p_->ctx.id; }
const std::vector<int>& Worker::worker_ids() const { return p_->membership->member_ids(); }
int64_t Worker::stale_frames_dropped() { return p_->channel->stale_dropped(); }
int64_t Worker::unauthenticated_frames_dropped() const { return p_->channel->unauthenticated(); }
bool Worker::data_path_authenticated() const { return p_->channel->authenticated(); }
int64_t Worker::endpoint_renewals() const { return p_->channel->endpoint_renewals(); }

absl::Status Worker::RunRecovery(int64_t restore_step) {
  const internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr) return absl::FailedPreconditionError("Recover before RegisterLayout");
  if (!ctx.options.recovery) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": recovery is off (WorkerOptions.recovery / --recover)"));
  }
  const int64_t from = ctx.step;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = RejoinOrRollBack(restore_step, /*replacement=*/false);
  if (s.ok() && p_->metrics != nullptr) {
    p_->metrics->Recovered(metrics::SecondsSince(start), from, ctx.step);
  }
  return s;
}

void Worker::StepMetrics(const StepPhases& phases, double update_seconds) {
  const internal::JobContext& ctx = p_->ctx;
  if (p_->metrics == nullptr) {
    p_->metrics = std::make_unique<internal::WorkerMetrics>(ctx.options.job, ctx.rank.load());
  }
  p_->metrics->StepDone(ctx.step, phases, update_seconds);
  p_->metrics->Unauthenticated(p_->channel->unauthenticated());
}

absl::Status Worker::Recover() { return RunRecovery(-1); }

absl::Status Worker::RecoverTo(int64_t step) {
  const internal::JobContext& ctx = p_->ctx;
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(ctx.Where(), ": RecoverTo step ", step, " < 0"));
  }
  if (ctx.ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": DDP writes no checkpoint to recover to; use Recover()"));
  }
  return RunRecovery(step);
}

absl::StatusOr<std::vector<int64_t>> Worker::CompleteCheckpointSteps() {
  const internal::JobContext& ctx = p_->ctx;
  if (p_->membership->fleet().size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(ctx.Where(), ": no servers"));
  }
  // Asked while a recovery has not reconnected yet: shard 0 may have been
  // restarted at another address.
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<ShardFleet> fleet,
                          p_->membership->CurrentFleet(absl::Now() + ctx.options.recovery_timeout));
  auto steps = internal::JobControl(&ctx, fleet.get()).CheckpointSteps();
  if (!steps.ok()) return ctx.Recoverable(absl::UnavailableError(steps.status().message()));
  return steps;
}

// --- state and statistics --------------------------------------------------

int64_t Worker::step() const { return p_->ctx.step; }
int64_t Worker::epoch() const { return p_->ctx.epoch.load(); }
int Worker::num_servers() const { return p_->membership->num_servers(); }
const Layout& Worker::layout() const { return *p_->ctx.layout; }
const WorkerOptions& Worker::options() const { return p_->ctx.options; }
int Worker::rank() const { return p_->ctx.rank.load(); }
int Worker::world_size() const { return p_->ctx.world_size; }
bool Worker::resumed() const { return p_->ctx.resume; }

WorkerMemory Worker::memory() const {
  const internal::ModelBuffers& b = p_->exchange->buffers();
  WorkerMemory m;
  m.params_bytes = static_cast<int64_t>(b.params.size() * sizeof(float) +
                                        b.params_half.size() * sizeof(uint16_t));
  m.grads_bytes =
      static_cast<int64_t>(b.grads.size() * sizeof(float) + b.grads_half.size() * sizeof(uint16_t));
  m.optimizer_bytes = p_->ddp.bytes();
  m.peak_grads_bytes = m.grads_bytes;
  if (p_->ctx.unit_grads()) {
    m.peak_bytes = p_->units->AddHeldBytes(&m.params_bytes, &m.grads_bytes, &m.peak_grads_bytes);
  }
  return m;
}

absl::StatusOr<std::vector<ShardReport>> Worker::ServerStats() {
  return p_->queries->ServerStats();
}

// --- state queries ---------------------------------------------------------
// Collectives between steps (worker/internal/state_queries.h).

absl::Status Worker::AllReduceMean(absl::Span<float> data) {
  if (p_->ctx.layout == nullptr) {
    return absl::FailedPreconditionError("AllReduceMean before RegisterLayout");
  }
  return p_->collectives->AllReduceMean(data);
}

absl::Status Worker::Broadcast(int root, absl::Span<uint8_t> bytes) {
  if (p_->ctx.layout == nullptr) {
    return absl::FailedPreconditionError("Broadcast before RegisterLayout");
  }
  const int world = p_->ctx.world_size;
  if (root < 0 || root >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat(p_->ctx.Where(), ": broadcast root ", root, " is outside [0, ", world, ")"));
  }
  if (bytes.empty() || world == 1) return absl::OkStatus();
  std::string wire(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  TESSEL_RETURN_IF_ERROR(p_->collectives->Broadcast(root, &wire));
  std::copy(wire.begin(), wire.end(), reinterpret_cast<char*>(bytes.data()));
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> Worker::SynchronizeGradients() {
  return p_->queries->SynchronizeGradients();
}
absl::StatusOr<OptimizerStateReport> Worker::SynchronizeOptimizerState() {
  return p_->queries->SynchronizeOptimizerState();
}
absl::StatusOr<std::string> Worker::Serialize() { return p_->queries->Serialize(); }
absl::Status Worker::Deserialize(absl::string_view blob) { return p_->queries->Deserialize(blob); }
absl::Status Worker::LoadParameters(absl::Span<const float> params) {
  return p_->queries->LoadParameters(params);
}
absl::StatusOr<bool> Worker::ReportMetric(float value) { return p_->queries->ReportMetric(value); }
bool Worker::ShouldEarlyStop() const { return p_->queries->ShouldEarlyStop(); }
const EarlyStopping& Worker::early_stopping() const { return p_->queries->early_stopping(); }

}  // namespace tessel
