#include "worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/digest.h"
#include "core/log.h"
#include "rpc/grpc_util.h"
#include "rpc/job_spec.h"

namespace tessel {

absl::StatusOr<std::unique_ptr<Worker>> Worker::Connect(const WorkerOptions& options) {
  if (options.registry.empty())
    return absl::InvalidArgumentError("WorkerOptions.registry is empty");
  if (options.job.empty()) return absl::InvalidArgumentError("WorkerOptions.job is empty");
  if (options.world_size < 1 || options.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be in [1, ", kMaxWorldSize, "], got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside [0, ", options.world_size, ")"));
  }
  if (options.num_servers < 0) return absl::InvalidArgumentError("num_servers must be >= 0");
  if (options.elastic_min_workers < 0 || options.elastic_min_workers > options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("elastic_min_workers must be in [0, ",
                                                   options.world_size, "] (0 = off), got ",
                                                   options.elastic_min_workers));
  }
  if (options.elastic_min_workers > 0 && !options.recovery) {
    return absl::InvalidArgumentError(
        "elastic_min_workers needs recovery (WorkerOptions.recovery / --recover)");
  }
  if (options.elastic_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("elastic_grace must be >= 0");
  }
  absl::Status s = ValidateOptimizerParams(options.optimizer);
  if (!s.ok()) return s;
  std::unique_ptr<Worker> w(new Worker(options));
  s = w->Start();
  if (!s.ok()) return s;
  return w;
}

Worker::Worker(const WorkerOptions& options)
    : options_(options),
      id_(options.rank),
      job_id_(JobId(options.job)),
      stopper_(options.early_stopping),
      shuffle_rng_(options.shuffle_seed) {
  for (int r = 0; r < options.world_size; ++r) member_ids_.push_back(r);
  token_ = options.token;
  if (token_.empty()) {
    if (const char* env = std::getenv("TESSEL_TOKEN")) token_ = env;
  }
}

void Worker::Authorize(grpc::ClientContext* ctx) const {
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
}

Worker::~Worker() {
  if (registry_ != nullptr) {
    absl::Status s = registry_->Leave();
    (void)s;
  }
  if (transport_ != nullptr) transport_->Shutdown();
}

std::string Worker::Where() const {
  return absl::StrCat(
      "job '", options_.job, "' rank ", options_.rank,
      id_ == options_.rank ? std::string() : absl::StrCat(" (registry rank ", id_, ")"), " step ",
      step_);
}

absl::Status Worker::Start() {
  auto credentials = LoadClientCredentials(options_.tls);
  if (!credentials.ok()) {
    return absl::Status(credentials.status().code(),
                        absl::StrCat(Where(), ": ", credentials.status().message()));
  }
  auto transport = UcxTransport::Create(options_.ucx);
  if (!transport.ok()) return transport.status();
  transport_ = std::move(*transport);
  transport_->SetHandler([this](const Incoming& in) { return OnFrame(in); });

  credentials_ = *credentials;  // Reconnect (recovery) opens channels to new servers
  registry_ = std::make_unique<RegistryClient>(options_.registry, *credentials);
  // Servers first: a worker is useless without its shards.
  const int want_servers = options_.num_servers;
  auto pool = registry_->WaitForView(
      options_.server_pool,
      [&](const v1::View& v) {
        int n = 0;
        for (const auto& m : v.members()) n += m.role() == v1::ROLE_SERVER;
        if (want_servers == 0) return n > 0;
        int contiguous = 0;
        for (const auto& m : v.members()) {
          if (m.role() == v1::ROLE_SERVER && m.rank() < want_servers) ++contiguous;
        }
        return contiguous == want_servers;
      },
      options_.connect_timeout);
  if (!pool.ok()) {
    return absl::UnavailableError(absl::StrCat(Where(), ": shard servers of pool '",
                                               options_.server_pool,
                                               "' not found: ", pool.status().message()));
  }
  std::vector<const v1::Member*> members;
  for (const auto& m : pool->members()) {
    if (m.role() != v1::ROLE_SERVER) continue;
    if (want_servers != 0 && m.rank() >= want_servers) continue;
    members.push_back(&m);
  }
  std::sort(members.begin(), members.end(),
            [](const v1::Member* a, const v1::Member* b) { return a->rank() < b->rank(); });
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i]->rank() != static_cast<int>(i)) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": pool '", options_.server_pool, "' has no shard server ", i,
          " (servers present: ", DescribeView(*pool), "); start it or set num_servers"));
    }
    Server srv;
    srv.shard = static_cast<int>(i);
    srv.grpc_address = members[i]->grpc_address();
    srv.stub = v1::ShardServer::NewStub(MakeChannel(srv.grpc_address, *credentials));
    auto peer = transport_->Connect(members[i]->ucx_address());
    if (!peer.ok() && options_.recovery) {
      // A server that just died still holds its lease. Recovery waits for
      // its successor and connects then (Reconnect: the address differs).
      TESSEL_LOG(WARNING) << Where() << ": cannot reach shard " << i
                          << " over UCX yet: " << peer.status().message();
      srv.peer = ~PeerId{0};  // no such peer: sends fail until Reconnect
      servers_.push_back(std::move(srv));
      continue;
    }
    if (!peer.ok()) {
      return absl::UnavailableError(absl::StrCat(Where(), ": cannot reach shard ", i,
                                                 " over UCX: ", peer.status().message()));
    }
    srv.peer = *peer;
    srv.ucx_address = members[i]->ucx_address();
    servers_.push_back(std::move(srv));
  }

  if (options_.resume && !servers_.empty()) {
    // A replacement for a worker the job went on without (elastic) would
    // only disturb the survivors: refuse it before it joins.
    v1::JobRef ref;
    ref.set_job(options_.job);
    v1::ShardStats st;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Authorize(&ctx);
    if (servers_[0].stub->GetStats(&ctx, ref, &st).ok() && st.worker_ids_size() > 0 &&
        std::find(st.worker_ids().begin(), st.worker_ids().end(), id_) == st.worker_ids().end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": the job went on without this worker: an elastic recovery at epoch ",
          st.epoch(), " continued with ", st.worker_ids_size(), " worker(s), registry ranks ",
          absl::StrJoin(st.worker_ids(), ", "),
          ". A replacement cannot rejoin it; restart the whole job from a checkpoint with "
          "--resume and the world size you want"));
    }
  }
  v1::Member me;
  me.set_group(options_.job);
  me.set_role(v1::ROLE_WORKER);
  me.set_rank(options_.rank);
  registered_address_ = transport_->address();
  me.set_ucx_address(registered_address_);
  auto joined = registry_->Join(me, options_.lease_ttl);
  // A replacement for a crashed worker waits for the old lease to lapse.
  const absl::Time join_deadline = absl::Now() + options_.connect_timeout;
  while (options_.recovery && !joined.ok() && absl::IsAlreadyExists(joined.status()) &&
         absl::Now() < join_deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    joined = registry_->Join(me, options_.lease_ttl);
  }
  if (!joined.ok()) return joined.status();
  const int world = options_.world_size;
  auto complete = [world](const v1::View& v) {
    int n = 0;
    for (const auto& m : v.members()) n += m.role() == v1::ROLE_WORKER && m.rank() < world;
    return n == world;
  };
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  absl::StatusOr<v1::View> view = absl::DeadlineExceededError("not waited");
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration slice =
        options_.connect_check ? std::min(absl::Milliseconds(500), left) : left;
    view = registry_->WaitForView(options_.job, complete, std::max(slice, absl::ZeroDuration()));
    if (view.ok() || !absl::IsDeadlineExceeded(view.status()) || absl::Now() >= deadline) break;
    if (options_.connect_check) {
      absl::Status outside = options_.connect_check();
      if (!outside.ok()) return outside;
    }
  }
  if (!view.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat(Where(), ": not all ", world, " workers joined: ", view.status().message()));
  }
  epoch_ = view->epoch();
  view_epoch_ = view->epoch();
  RememberMembers(*view);
  TESSEL_LOG(INFO) << Where() << ": world of " << world << " complete at epoch " << epoch_ << ", "
                   << servers_.size() << " shard server(s)";
  return absl::OkStatus();
}

absl::Status Worker::RegisterLayout(const std::vector<TensorDesc>& tensors,
                                    absl::Span<const float> init) {
  if (layout_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(Where(), ": layout already registered"));
  }
  v1::JobSpec spec;
  spec.set_job(options_.job);
  spec.set_strategy(options_.strategy);
  spec.set_world_size(options_.world_size);
  spec.set_num_shards(static_cast<int>(servers_.size()));
  for (const TensorDesc& t : tensors) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (int64_t d : t.shape) ts->add_shape(d);
    ts->set_dtype(options_.precision);
  }
  *spec.mutable_optimizer() = OptimizerToProto(options_.optimizer);
  spec.set_bucket_bytes(options_.bucket_bytes);
  spec.set_align_elems(options_.align_elems);
  *spec.mutable_checkpoint() = options_.checkpoint;
  for (int u : options_.fsdp_units) spec.add_unit_first_tensor(u);
  auto layout = ValidateJobSpec(spec);
  if (!layout.ok()) return layout.status();
  const bool ddp = options_.strategy == v1::STRATEGY_DDP;
  const size_t n = static_cast<size_t>(layout->num_params());
  if (ddp && options_.resume && !options_.recovery) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(),
        ": DDP keeps parameters and optimizer state on the workers and writes no checkpoint, so "
        "there is nothing to resume from on the servers. A replacement for a lost worker takes "
        "the state of the surviving workers: run it with recovery on (--recover, "
        "WorkerOptions.recovery) as well as --resume"));
  }
  if (!options_.resume && (options_.rank == 0 || ddp) && init.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": init has ", init.size(), " floats but the layout has ", n));
  }
  layout_ = std::make_unique<Layout>(std::move(*layout));
  spec_ = spec;
  // A recovering worker (or a restarted job) joins the recovery protocol:
  // rank 0 restores every shard, the others wait for it (RunRecovery below).
  const bool join_recovery = options_.resume && options_.recovery;

  for (Server& srv : servers_) {
    if (join_recovery) break;
    v1::CreateJobRequest req;
    *req.mutable_spec() = spec;
    req.set_shard_index(srv.shard);
    req.set_epoch(epoch_);
    req.set_restore(options_.resume);
    req.set_restore_step(options_.resume_step);
    v1::CreateJobResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Minutes(5));  // a restore reads the checkpoint
    Authorize(&ctx);
    absl::Status s = FromGrpc(
        srv.stub->CreateJob(&ctx, req, &resp),
        absl::StrCat(Where(), ": CreateJob on shard ", srv.shard, " (", srv.grpc_address, ")"));
    if (!s.ok()) {
      layout_.reset();
      return s;
    }
    const Range r = layout_->shard_range(srv.shard);
    if (resp.range_begin() != r.begin || resp.range_end() != r.end) {
      layout_.reset();
      return absl::InternalError(
          absl::StrCat(Where(), ": shard ", srv.shard, " derived range [", resp.range_begin(), ", ",
                       resp.range_end(), ") but this worker derived [", r.begin, ", ", r.end, ")"));
    }
    if (options_.resume) {
      if (srv.shard == 0) step_ = resp.step();
      if (resp.step() != step_) {
        layout_.reset();
        return absl::FailedPreconditionError(absl::StrCat(
            Where(), ": shards resumed at different steps (shard 0 at ", step_, ", shard ",
            srv.shard, " at ", resp.step(), "); restart the servers and resume again"));
      }
    } else if (resp.step() != 0 && !ddp) {
      layout_.reset();
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": job already exists at step ", resp.step(), " on shard ", srv.shard,
          "; resume it (WorkerOptions.resume / --resume) or use a new job name"));
    }
  }

  half_ = JobHalfType(spec);
  if (unit_grads()) {
    absl::Status s = InitUnits();
    if (!s.ok()) {
      layout_.reset();
      return s;
    }
    if (!fsdp()) {  // zero2 with units: full params, per-unit grads
      if (half_) {
        params_half_.assign(n, 0);
      } else {
        params_.assign(n, 0.f);
      }
    }
  } else if (half_) {
    params_half_.assign(n, 0);
    grads_half_.assign(n, 0);
    if (ddp) params_.assign(n, 0.f);  // DDP keeps the fp32 masters on the worker
  } else {
    params_.assign(n, 0.f);
    grads_.assign(n, 0.f);
  }
  if (ddp) {
    // A replacement (resume) holds nothing yet: its recovery copies the
    // state of the surviving workers, whatever `init` holds.
    holds_state_ = !join_recovery;
    if (holds_state_) std::copy(init.begin(), init.end(), params_.begin());
    if (half_) FloatToHalf(*half_, params_.data(), params_half_.data(), n);
    optimizer_state_.assign(StateSlots(options_.optimizer), std::vector<float>(n, 0.f));
    float* state[kMaxStateSlots] = {};
    for (size_t k = 0; k < optimizer_state_.size(); ++k) state[k] = optimizer_state_[k].data();
    InitState(options_.optimizer, state, n);
  }
  ready_elems_.assign(servers_.size(), {});
  pushed_.assign(servers_.size(), {});
  for (size_t s = 0; s < servers_.size(); ++s) {
    ready_elems_[s].assign(layout_->num_buckets(static_cast<int>(s)), 0);
    pushed_[s].assign(layout_->num_buckets(static_cast<int>(s)), 0);
  }
  if (ddp && !join_recovery) return absl::OkStatus();
  if (join_recovery) {
    absl::Status s = RunRecovery(options_.resume_step);
    if (!s.ok()) layout_.reset();
    return s;
  }

  // ZeRO: rank 0 seeds the servers (unless resuming); everyone pulls.
  if (options_.rank == 0 && !options_.resume) {
    // fsdp keeps no copy: INIT is sent from the caller's buffer, and waited for.
    // Mixed precision sends the fp32 masters from the caller's buffer too.
    const float* source = init.data();
    if (!fsdp() && !half_) {
      std::copy(init.begin(), init.end(), params_.begin());
      source = params_.data();
    }
    for (Server& srv : servers_) {
      for (int b = 0; b < layout_->num_buckets(srv.shard); ++b) {
        SendData(Header(FrameType::kInit, 0, srv.shard, b),
                 source + layout_->bucket_range(srv.shard, b).begin);
      }
    }
    if (fsdp() || half_) WaitForSends();
  }
  if (fsdp()) {
    // Parameters are gathered per unit; wait until every shard is initialized
    // (or restored) so no gradient can arrive before its parameters exist.
    absl::Status s = Barrier(step_);
    if (!s.ok()) layout_.reset();
    return s;
  }
  absl::Status s = SendPulls(step_);
  if (s.ok()) s = WaitForParams(step_);
  if (!s.ok()) layout_.reset();
  if (s.ok() && options_.resume) {
    TESSEL_LOG(INFO) << Where() << ": resumed from the checkpoint of step " << step_;
  }
  return s;
}

absl::Span<float> Worker::TensorSpan(std::vector<float>& flat, const std::string& name) {
  if (layout_ == nullptr) return {};
  const int i = layout_->FindTensor(name);
  if (i < 0) return {};
  const TensorSlot& t = layout_->tensors()[i];
  return absl::MakeSpan(flat.data() + t.offset, static_cast<size_t>(t.numel));
}

absl::Span<float> Worker::tensor_params(const std::string& name) {
  return TensorSpan(params_, name);
}

absl::Span<float> Worker::tensor_grads(const std::string& name) { return TensorSpan(grads_, name); }

FrameHeader Worker::Header(FrameType type, int64_t step, int shard, int bucket) const {
  FrameHeader h;
  h.type = type;
  h.job_id = job_id_;
  h.epoch = epoch_;
  h.step = step;
  h.rank = options_.rank;
  h.shard = shard;
  h.bucket = bucket;
  if (type == FrameType::kPush || type == FrameType::kInit) {
    const uint64_t elem = type == FrameType::kPush && half_ ? 2 : 4;  // INIT is fp32 masters
    h.payload_bytes = static_cast<uint64_t>(layout_->bucket_range(shard, bucket).size()) * elem;
  }
  return h;
}

void Worker::SendData(const FrameHeader& h, const void* payload) {
  HeaderBytes bytes = EncodeHeader(h);
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_sends_;
  }
  transport_->Send(servers_[h.shard].peer, absl::MakeConstSpan(bytes), payload, h.payload_bytes,
                   [this, epoch = h.epoch](absl::Status s) {
                     absl::MutexLock lock(&mu_);
                     --outstanding_sends_;
                     if (!s.ok() && send_error_.ok() && epoch == epoch_.load()) send_error_ = s;
                   });
}

void Worker::WaitForSends() {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](int64_t* n) { return *n == 0; }, &outstanding_sends_),
                       options_.step_timeout);
}

void Worker::PushBucket(int shard, int bucket) {
  pushed_[shard][bucket] = 1;
  const int64_t begin = layout_->bucket_range(shard, bucket).begin;
  SendData(Header(FrameType::kPush, step_, shard, bucket),
           half_ ? static_cast<const void*>(grads_half_.data() + begin)
                 : static_cast<const void*>(grads_.data() + begin));
}

absl::Status Worker::AccumulateGradients(absl::Span<const float> micro) {
  if (layout_ == nullptr)
    return absl::FailedPreconditionError("AccumulateGradients before RegisterLayout");
  if (grads_.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        Where(),
        ": gradient accumulation needs a full fp32 gradient buffer (ddp, zero1, or zero2 "
        "without units or mixed precision)"));
  }
  if (micro.size() != grads_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": micro-batch gradient has ",
                                                   micro.size(), " floats; the model has ",
                                                   grads_.size()));
  }
  if (micro_batches_++ == 0) {
    std::copy(micro.begin(), micro.end(), grads_.begin());
  } else {
    for (size_t i = 0; i < grads_.size(); ++i) grads_[i] += micro[i];
  }
  return absl::OkStatus();
}

absl::Status Worker::GradientsReady(int64_t begin, int64_t end) {
  if (layout_ == nullptr) {
    return absl::FailedPreconditionError("GradientsReady before RegisterLayout");
  }
  if (begin < 0 || end > layout_->num_params() || begin > end) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": GradientsReady range [", begin, ", ",
                                                   end, ") is outside [0, ", layout_->num_params(),
                                                   ")"));
  }
  if (options_.shuffle_seed != 0) return absl::OkStatus();  // Step() pushes in shuffled order
  while (begin < end) {
    const int s = layout_->ShardOf(begin);
    const int b = layout_->BucketOf(s, begin);
    const Range br = layout_->bucket_range(s, b);
    const int64_t upto = std::min(end, br.end);
    ready_elems_[s][b] += upto - begin;
    if (ready_elems_[s][b] > br.size()) {
      return absl::InvalidArgumentError(absl::StrCat(Where(), ": gradients of bucket ", b,
                                                     " of shard ", s, " were handed over twice"));
    }
    if (ready_elems_[s][b] == br.size() && !pushed_[s][b]) PushBucket(s, b);
    begin = upto;
  }
  return absl::OkStatus();
}

absl::Status Worker::SendPulls(int64_t version) {
  int64_t expected = 0;
  for (const Server& srv : servers_) expected += layout_->num_buckets(srv.shard);
  {
    absl::MutexLock lock(&mu_);
    expect_version_ = version;
    expected_ = expected;
    received_ = 0;
    received_by_shard_.assign(servers_.size(), 0);
    error_ = absl::OkStatus();
  }
  for (const Server& srv : servers_) {
    if (layout_->num_buckets(srv.shard) == 0) continue;
    FrameHeader h = Header(FrameType::kPull, version, srv.shard, 0);
    h.bucket_count = static_cast<uint32_t>(layout_->num_buckets(srv.shard));
    SendData(h, nullptr);
  }
  return absl::OkStatus();
}

absl::Status Worker::WaitForParams(int64_t version) {
  return WaitFor(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return received_ == expected_; },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        std::vector<std::string> missing;
        for (size_t s = 0; s < servers_.size(); ++s) {
          const int want = layout_->num_buckets(static_cast<int>(s));
          if (received_by_shard_[s] < want) {
            missing.push_back(absl::StrCat("shard ", s, " (", servers_[s].grpc_address,
                                           "): ", received_by_shard_[s], "/", want, " buckets"));
          }
        }
        return absl::StrCat("parameters of step ", version, " (missing ",
                            absl::StrJoin(missing, ", "), ")");
      });
}

absl::Status Worker::Step() {
  if (layout_ == nullptr) return absl::FailedPreconditionError("Step before RegisterLayout");
  if (fsdp()) {
    return absl::FailedPreconditionError(
        "fsdp steps go unit by unit: Gather/UnitGrads/PushUnit/Release, then FinishStep()");
  }
  std::vector<std::pair<int, int>> todo;
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (size_t b = 0; b < pushed_[s].size(); ++b) {
      if (!pushed_[s][b]) todo.emplace_back(static_cast<int>(s), static_cast<int>(b));
    }
  }
  if (micro_batches_ > 1) {
    const float count = static_cast<float>(micro_batches_);
    for (float& g : grads_) g /= count;
  }
  micro_batches_ = 0;
  if (unit_grads() && !todo.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": with per-unit gradients every unit must be pushed (PushUnit) before Step(); ",
        todo.size(), " bucket(s) were not"));
  }
  if (options_.shuffle_seed != 0) std::shuffle(todo.begin(), todo.end(), shuffle_rng_);
  absl::Status s = SendPulls(step_ + 1);
  for (const auto& [shard, bucket] : todo) {
    if (options_.shuffle_seed != 0 && shuffle_rng_() % 3 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(shuffle_rng_() % 2000));
    }
    PushBucket(shard, bucket);
  }
  if (s.ok()) s = WaitForParams(step_ + 1);
  if (!s.ok()) return s;
  ++step_;
  for (auto& v : ready_elems_) std::fill(v.begin(), v.end(), 0);
  for (auto& v : pushed_) std::fill(v.begin(), v.end(), 0);
  if (options_.strategy == v1::STRATEGY_DDP && !reduce_only_) ApplyLocalUpdate();
  MaybeCheckpoint();
  return absl::OkStatus();
}

void Worker::ApplyLocalUpdate() {
  // The pulled gradient is the average over ranks; every worker applies the
  // same update to its own copy.
  float* state[kMaxStateSlots] = {};
  if (!half_) {
    for (size_t k = 0; k < optimizer_state_.size(); ++k) state[k] = optimizer_state_[k].data();
    ApplyUpdate(options_.optimizer, step_, params_.data(), grads_.data(), state, params_.size());
    return;
  }
  // Mixed precision: the averaged gradient arrived in half; widen it a chunk
  // at a time, update the fp32 masters and round them to the half copy the
  // model computes with. The optimizer is elementwise, so chunks change nothing.
  constexpr size_t kChunk = 16384;
  std::vector<float> widened(std::min(kChunk, params_.size()));
  for (size_t begin = 0; begin < params_.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, params_.size() - begin);
    HalfToFloat(*half_, grads_half_.data() + begin, widened.data(), n);
    for (size_t k = 0; k < optimizer_state_.size(); ++k) {
      state[k] = optimizer_state_[k].data() + begin;
    }
    ApplyUpdate(options_.optimizer, step_, params_.data() + begin, widened.data(), state, n);
    FloatToHalf(*half_, params_.data() + begin, params_half_.data() + begin, n);
  }
}

void Worker::MaybeCheckpoint() {
  if (options_.rank != 0 || options_.checkpoint_interval <= absl::ZeroDuration() ||
      absl::Now() - last_checkpoint_ < options_.checkpoint_interval) {
    return;
  }
  last_checkpoint_ = absl::Now();
  // Every shard is at step_ and no bucket of the next step can complete before
  // this rank pushes it, so step_ + 1 is a boundary no shard has passed.
  for (Server& srv : servers_) {
    v1::SaveCheckpointRequest req;
    req.set_job(options_.job);
    req.set_step(step_ + 1);
    v1::SaveCheckpointResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Authorize(&ctx);
    absl::Status s = FromGrpc(srv.stub->SaveCheckpoint(&ctx, req, &resp),
                              absl::StrCat("SaveCheckpoint on shard ", srv.shard));
    if (!s.ok()) TESSEL_LOG(WARNING) << Where() << ": periodic checkpoint not scheduled: " << s;
  }
}

Accept Worker::OnFrame(const Incoming& in) {
  auto h = DecodeHeader(in.header.data(), in.header.size());
  if (!h.ok()) {
    TESSEL_LOG(WARNING) << "dropping malformed frame: " << h.status();
    return Accept{};
  }
  if (h->type == FrameType::kError) {
    auto message = std::make_shared<std::string>(in.payload_bytes, '\0');
    FrameHeader about = *h;
    auto record = [this, message, about](absl::Status) {
      absl::MutexLock lock(&mu_);
      if (about.epoch != epoch_.load()) {  // about a frame of an epoch recovery left behind
        ++stale_dropped_;
        return;
      }
      if (!error_.ok()) return;
      error_ = absl::Status(static_cast<absl::StatusCode>(about.code),
                            absl::StrCat(Where(), ": shard ", about.shard, " refused ",
                                         DescribeHeader(about), ": ", *message));
    };
    if (in.payload_bytes == 0) {
      record(absl::OkStatus());
      return Accept{};
    }
    return Accept{message->data(), record};
  }
  if (fsdp() && h->type == FrameType::kParams && h->job_id == job_id_ && layout_ != nullptr) {
    return OnFsdpFrame(*h, in);
  }
  if (h->type != FrameType::kParams || h->job_id != job_id_ || layout_ == nullptr || h->shard < 0 ||
      h->shard >= static_cast<int>(servers_.size()) || h->bucket < 0 ||
      h->bucket >= layout_->num_buckets(h->shard)) {
    TESSEL_LOG(WARNING) << "dropping unexpected frame " << DescribeHeader(*h);
    return Accept{};
  }
  const Range br = layout_->bucket_range(h->shard, h->bucket);
  {
    absl::MutexLock lock(&mu_);
    if (h->step != expect_version_ || h->epoch != epoch_.load() ||
        h->payload_bytes != static_cast<uint64_t>(br.size()) * (half_ ? 2 : 4)) {
      TESSEL_LOG(WARNING) << "dropping stale or mis-sized " << DescribeHeader(*h)
                          << " (expecting step " << expect_version_ << ", epoch " << epoch_.load()
                          << ")";
      ++stale_dropped_;
      return Accept{};
    }
    ++inflight_receives_;
  }
  // ZeRO pulls parameters; DDP pulls the averaged gradient.
  const bool ddp = options_.strategy == v1::STRATEGY_DDP;
  void* dst = half_
                  ? static_cast<void*>((ddp ? grads_half_.data() : params_half_.data()) + br.begin)
                  : static_cast<void*>((ddp ? grads_.data() : params_.data()) + br.begin);
  const int shard = h->shard;
  const int64_t epoch = h->epoch;
  return Accept{dst, [this, shard, epoch](absl::Status s) {
                  absl::MutexLock lock(&mu_);
                  --inflight_receives_;
                  if (epoch != epoch_.load()) return;  // a recovery started meanwhile
                  if (!s.ok()) {
                    if (error_.ok()) error_ = s;
                    return;
                  }
                  ++received_;
                  ++received_by_shard_[shard];
                }};
}

absl::Status Worker::InitUnits() {
  std::vector<int> firsts = options_.fsdp_units;
  if (firsts.empty() || firsts.front() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": fsdp needs WorkerOptions.fsdp_units starting at tensor 0"));
  }
  const auto& tensors = layout_->tensors();
  units_.clear();
  unit_starts_.clear();
  for (size_t i = 0; i < firsts.size(); ++i) {
    const int first = firsts[i];
    const int end = i + 1 < firsts.size() ? firsts[i + 1] : static_cast<int>(tensors.size());
    Unit u;
    u.range =
        Range{tensors[first].offset,
              end < static_cast<int>(tensors.size()) ? tensors[end].offset : layout_->num_params()};
    for (const Server& srv : servers_) u.buckets.push_back(layout_->BucketsIn(srv.shard, u.range));
    unit_starts_.push_back(u.range.begin);
    units_.push_back(std::move(u));
  }
  return absl::OkStatus();
}

int64_t Worker::UnitBytes(const Unit& u) {
  int64_t bytes = static_cast<int64_t>(u.params.capacity() * sizeof(float) +
                                       u.params_half.capacity() * sizeof(uint16_t));
  if (u.grads) bytes += static_cast<int64_t>(u.grads->capacity() * sizeof(float));
  if (u.grads_half) bytes += static_cast<int64_t>(u.grads_half->capacity() * sizeof(uint16_t));
  return bytes;
}

void Worker::AccountLocked() {
  int64_t bytes = 0;
  for (const Unit& u : units_) bytes += UnitBytes(u);
  held_bytes_ = bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes);
}

absl::Status Worker::WaitFor(const std::function<bool()>& done,
                             const std::function<std::string()>& what) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done() || !error_.ok() || !send_error_.ok();
  };
  struct Arg {
    decltype(ready)* f;
  } arg{&ready};
  // Wait in slices so a membership change (a worker left or its lease
  // lapsed) ends the wait within about a heartbeat, with the reason, instead
  // of at the step deadline.
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  bool finished = false;
  while (!finished && absl::Now() < deadline) {
    finished = mu_.AwaitWithTimeout(absl::Condition(
                                        +[](Arg* a) { return (*a->f)(); }, &arg),
                                    std::min(absl::Milliseconds(250), deadline - absl::Now()));
    if (!finished && registry_ != nullptr && !registry_->lease_status().ok()) {
      // Declared dead while alive (paused, starved or cut off): recovery
      // re-joins if the rank is still free, else this process stands down.
      return Recoverable(absl::AbortedError(
          absl::StrCat(Where(),
                       ": this worker's registry lease lapsed (it was paused or cut off for longer "
                       "than the lease ttl) and the job went on without it. ",
                       registry_->lease_status().message())));
    }
    if (!finished && registry_ != nullptr && registry_->group_epoch() > view_epoch_) {
      mu_.Unlock();
      absl::Status changed = MembershipChanged();
      mu_.Lock();
      if (!changed.ok()) return changed;
    }
    if (!finished && registry_ != nullptr) {  // a shard server died or was restarted
      mu_.Unlock();
      absl::Status servers = ServersChanged();
      mu_.Lock();
      if (!servers.ok()) return servers;
    }
    if (!finished && wait_check_) {
      mu_.Unlock();
      absl::Status outside = wait_check_();
      mu_.Lock();
      if (!outside.ok()) return outside;
    }
  }
  if (!error_.ok()) return Recoverable(error_);
  if (!send_error_.ok()) {
    return Recoverable(absl::UnavailableError(
        absl::StrCat(Where(), ": sending to a shard server failed: ", send_error_.message())));
  }
  if (!finished) {
    return absl::DeadlineExceededError(
        absl::StrCat(Where(), ": ", what(), " did not complete within ",
                     absl::FormatDuration(options_.step_timeout),
                     ". A worker or server may have died: check the registry (tesselctl members)"));
  }
  return absl::OkStatus();
}

void Worker::RememberMembers(const v1::View& view) {
  member_addresses_.clear();
  for (const auto& m : view.members()) {
    if (m.role() == v1::ROLE_WORKER) member_addresses_[m.rank()] = m.ucx_address();
  }
}

absl::Status Worker::MembershipChanged() {
  std::string who = "membership changed";
  auto view = registry_->GetView(options_.job);
  if (view.ok()) {
    // Only a change to this job's workers matters: one of them gone or
    // replaced by another process. A newcomer that is not one of them (a
    // late replacement being refused) changes nothing here.
    bool same = true;
    for (int id : member_ids_) {
      bool found = false;
      for (const auto& m : view->members()) {
        found = found ||
                (m.role() == v1::ROLE_WORKER && m.rank() == id && member_addresses_.count(id) > 0 &&
                 member_addresses_.at(id) == m.ucx_address());
      }
      same = same && found;
    }
    if (same) {
      view_epoch_ = view->epoch();
      return absl::OkStatus();
    }
    std::vector<std::string> missing;
    for (int r = 0; r < options_.world_size; ++r) {
      bool present = false;
      for (const auto& m : view->members()) {
        present = present || (m.role() == v1::ROLE_WORKER && m.rank() == member_ids_[r]);
      }
      if (!present) missing.push_back(absl::StrCat(r));
    }
    if (!missing.empty()) {
      who = absl::StrCat("worker rank(s) ", absl::StrJoin(missing, ", "),
                         " left the job or stopped heartbeating");
    }
  }
  if (options_.recovery) {
    return Recoverable(absl::AbortedError(absl::StrCat(
        Where(), ": ", who, " (membership epoch ", view_epoch_, " -> ", registry_->group_epoch(),
        "); pausing for up to ", absl::FormatDuration(options_.recovery_timeout),
        " until the job is complete again (start the missing rank with --resume)",
        elastic() ? absl::StrCat(" or, after ", absl::FormatDuration(options_.elastic_grace),
                                 " without a replacement, going on without it (elastic)")
                  : std::string(),
        ", then ", AfterPause())));
  }
  return absl::AbortedError(absl::StrCat(
      Where(), ": ", who, " (membership epoch ", view_epoch_, " -> ", registry_->group_epoch(),
      "); the step cannot complete. Restart the missing worker(s) and resume from the latest "
      "checkpoint (--resume)"));
}

absl::Status Worker::Prefetch(int unit) {
  if (!fsdp() || layout_ == nullptr || unit < 0 || unit >= num_units()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": no fsdp unit ", unit));
  }
  Unit& u = units_[unit];
  {
    absl::MutexLock lock(&mu_);
    if (u.version == step_ && (!u.params.empty() || !u.params_half.empty())) {
      return absl::OkStatus();  // held or in flight
    }
    if (half_) {
      u.params_half.assign(static_cast<size_t>(u.range.size()), 0);
    } else {
      u.params.assign(static_cast<size_t>(u.range.size()), 0.f);
    }
    u.version = step_;
    u.received = 0;
    u.expected = 0;
    for (const auto& b : u.buckets) u.expected += b.second;
    AccountLocked();
  }
  for (const Server& srv : servers_) {
    const auto [first, count] = u.buckets[srv.shard];
    if (count == 0) continue;
    FrameHeader h = Header(FrameType::kPull, step_, srv.shard, first);
    h.bucket_count = static_cast<uint32_t>(count);
    SendData(h, nullptr);
  }
  return absl::OkStatus();
}

absl::Status Worker::WaitForUnit(int unit) {
  absl::Status s = Prefetch(unit);
  if (!s.ok()) return s;
  Unit& u = units_[unit];
  return WaitFor([&]() { return u.received == u.expected; },
                 [&]() { return absl::StrCat("gathering unit ", unit, " at step ", step_); });
}

absl::StatusOr<absl::Span<const float>> Worker::Gather(int unit) {
  if (half_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": a mixed-precision job holds half parameters: use GatherHalf"));
  }
  absl::Status s = WaitForUnit(unit);
  if (!s.ok()) return s;
  return absl::MakeConstSpan(units_[unit].params);
}

absl::StatusOr<absl::Span<const uint16_t>> Worker::GatherHalf(int unit) {
  if (!half_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": GatherHalf is for mixed-precision jobs; use Gather"));
  }
  absl::Status s = WaitForUnit(unit);
  if (!s.ok()) return s;
  return absl::MakeConstSpan(units_[unit].params_half);
}

void Worker::Release(int unit) {
  if (unit < 0 || unit >= num_units()) return;
  Unit& u = units_[unit];
  absl::Status s =
      WaitFor([&]() { return u.received == u.expected; }, [] { return "releasing a unit"; });
  (void)s;
  absl::MutexLock lock(&mu_);
  std::vector<float>().swap(u.params);
  std::vector<uint16_t>().swap(u.params_half);
  u.version = -1;
  AccountLocked();
}

absl::Span<uint16_t> Worker::UnitHalfGrads(int unit) {
  if (!unit_grads() || !half_ || unit < 0 || unit >= num_units()) return {};
  Unit& u = units_[unit];
  absl::MutexLock lock(&mu_);
  if (u.grads_half == nullptr) {
    u.grads_half = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(u.range.size()), 0);
    AccountLocked();
  }
  return absl::MakeSpan(*u.grads_half);
}

absl::Span<float> Worker::UnitGrads(int unit) {
  if (!unit_grads() || half_ || unit < 0 || unit >= num_units()) return {};
  Unit& u = units_[unit];
  absl::MutexLock lock(&mu_);
  if (u.grads == nullptr) {
    u.grads = std::make_shared<std::vector<float>>(static_cast<size_t>(u.range.size()), 0.f);
    AccountLocked();
  }
  return absl::MakeSpan(*u.grads);
}

absl::Status Worker::PushUnit(int unit) {
  if (!unit_grads() || unit < 0 || unit >= num_units() ||
      (units_[unit].grads == nullptr && units_[unit].grads_half == nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat(Where(), ": PushUnit(", unit, ") without ",
                                                      half_ ? "UnitHalfGrads(" : "UnitGrads(", unit,
                                                      ")"));
  }
  Unit& u = units_[unit];
  std::shared_ptr<std::vector<float>> grads;
  std::shared_ptr<std::vector<uint16_t>> grads_half;
  {
    absl::MutexLock lock(&mu_);
    grads = std::move(u.grads);
    grads_half = std::move(u.grads_half);
    u.grads.reset();
    u.grads_half.reset();
  }
  for (const Server& srv : servers_) {
    const auto [first, count] = u.buckets[srv.shard];
    for (int b = first; b < first + count; ++b) {
      if (!fsdp()) pushed_[srv.shard][b] = 1;  // zero2: Step() checks every bucket went
      const FrameHeader h = Header(FrameType::kPush, step_, srv.shard, b);
      const Range br = layout_->bucket_range(srv.shard, b);
      HeaderBytes bytes = EncodeHeader(h);
      {
        absl::MutexLock lock(&mu_);
        ++outstanding_sends_;
      }
      // The buffer lives until its last bucket is sent, then is freed.
      const size_t at = static_cast<size_t>(br.begin - u.range.begin);
      const void* payload = grads_half ? static_cast<const void*>(grads_half->data() + at)
                                       : static_cast<const void*>(grads->data() + at);
      transport_->Send(srv.peer, absl::MakeConstSpan(bytes), payload, h.payload_bytes,
                       [this, grads, grads_half, epoch = h.epoch](absl::Status s) {
                         absl::MutexLock lock(&mu_);
                         --outstanding_sends_;
                         if (!s.ok() && send_error_.ok() && epoch == epoch_.load()) {
                           send_error_ = s;
                         }
                       });
    }
  }
  grads.reset();
  grads_half.reset();
  absl::MutexLock lock(&mu_);
  AccountLocked();
  return absl::OkStatus();
}

absl::Status Worker::Barrier(int64_t version) {
  int64_t shards = 0;
  {
    absl::MutexLock lock(&mu_);
    sync_received_ = 0;
    sync_version_ = version;
    for (const Server& srv : servers_) shards += layout_->num_buckets(srv.shard) > 0;
    sync_expected_ = shards;
  }
  for (const Server& srv : servers_) {
    if (layout_->num_buckets(srv.shard) == 0) continue;
    SendData(Header(FrameType::kPull, version, srv.shard, 0), nullptr);  // notify only
  }
  return WaitFor([&]() { return sync_received_ == sync_expected_; },
                 [&]() { return absl::StrCat("step ", version, " on every shard"); });
}

absl::Status Worker::FinishStep() {
  if (!fsdp() || layout_ == nullptr) {
    return absl::FailedPreconditionError("FinishStep is for fsdp jobs; use Step()");
  }
  absl::Status s = Barrier(step_ + 1);
  if (!s.ok()) return s;
  ++step_;
  MaybeCheckpoint();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Worker::GatherAll() {
  if (half_ && !fsdp()) {
    std::vector<float> all(params_half_.size());
    HalfToFloat(*half_, params_half_.data(), all.data(), all.size());
    return all;
  }
  if (!fsdp()) return std::vector<float>(params_.begin(), params_.end());
  std::vector<float> all(static_cast<size_t>(layout_->num_params()));
  for (int u = 0; u < num_units(); ++u) {
    float* dst = all.data() + units_[u].range.begin;
    if (half_) {
      auto p = GatherHalf(u);
      if (!p.ok()) return p.status();
      HalfToFloat(*half_, p->data(), dst, p->size());
    } else {
      auto p = Gather(u);
      if (!p.ok()) return p.status();
      std::copy(p->begin(), p->end(), dst);
    }
    Release(u);
  }
  return all;
}

Accept Worker::OnFsdpFrame(const FrameHeader& h, const Incoming& in) {
  if (h.epoch != epoch_.load()) {
    absl::MutexLock lock(&mu_);
    ++stale_dropped_;
    return Accept{};
  }
  if (h.bucket_count == 0) {  // a shard reached the step FinishStep waits for
    absl::MutexLock lock(&mu_);
    if (h.step == sync_version_) ++sync_received_;
    return Accept{};
  }
  if (h.shard < 0 || h.shard >= static_cast<int>(servers_.size()) || h.bucket < 0 ||
      h.bucket >= layout_->num_buckets(h.shard)) {
    TESSEL_LOG(WARNING) << "dropping unexpected frame " << DescribeHeader(h);
    return Accept{};
  }
  const Range br = layout_->bucket_range(h.shard, h.bucket);
  const int unit =
      static_cast<int>(std::upper_bound(unit_starts_.begin(), unit_starts_.end(), br.begin) -
                       unit_starts_.begin()) -
      1;
  absl::MutexLock lock(&mu_);
  Unit& u = units_[unit];
  const bool held = half_ ? !u.params_half.empty() : !u.params.empty();
  if (u.version != h.step || !held || br.end > u.range.end ||
      h.payload_bytes != static_cast<uint64_t>(br.size()) * (half_ ? 2 : 4)) {
    TESSEL_LOG(WARNING) << "dropping stale " << DescribeHeader(h);
    ++stale_dropped_;
    return Accept{};
  }
  ++inflight_receives_;
  const int64_t epoch = h.epoch;
  const size_t at = static_cast<size_t>(br.begin - u.range.begin);
  void* dst = half_ ? static_cast<void*>(u.params_half.data() + at)
                    : static_cast<void*>(u.params.data() + at);
  return Accept{dst, [this, unit, epoch](absl::Status s) {
                  absl::MutexLock lock(&mu_);
                  --inflight_receives_;
                  if (epoch != epoch_.load()) return;  // a recovery started meanwhile
                  if (!s.ok()) {
                    if (error_.ok()) error_ = s;
                    return;
                  }
                  ++units_[unit].received;
                }};
}

// --- recovery -------------------------------------------------------------
//
// Protocol (docs/architecture.md, "Recovery"): every worker that sees a
// member missing stops its step with a recoverable status; Recover() waits
// until all ranks and shards are present again, reconnects restarted servers,
// and then rank 0 replaces the job on every shard with the latest complete
// checkpoint at a fresh epoch above every epoch in use, while the other ranks
// poll the shards until they all report that restore. Everyone then pulls the
// checkpoint's parameters. Frames of the old epoch are refused by servers and
// dropped by workers, so nothing from before the rollback is applied.

namespace {
constexpr char kRecoverableUrl[] = "type.tessel.dev/recoverable";

absl::Status Untagged(const absl::Status& s) { return absl::Status(s.code(), s.message()); }
}  // namespace

bool Worker::IsRecoverable(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kRecoverableUrl).has_value();
}

absl::Status Worker::MarkRecoverable(absl::Status status) {
  if (!status.ok()) status.SetPayload(kRecoverableUrl, absl::Cord("1"));
  return status;
}

absl::Status Worker::CheckMembers() {
  if (registry_->group_epoch() <= view_epoch_) return absl::OkStatus();
  return MembershipChanged();
}

absl::Status Worker::Recoverable(absl::Status s) const {
  if (!options_.recovery || s.ok()) return s;
  // Refusals that a rollback repairs: a stale epoch or step, a job the
  // (restarted) server does not have yet, a lost peer. Others are bugs.
  const absl::StatusCode c = s.code();
  if (c == absl::StatusCode::kFailedPrecondition || c == absl::StatusCode::kNotFound ||
      c == absl::StatusCode::kAborted || c == absl::StatusCode::kUnavailable ||
      c == absl::StatusCode::kCancelled) {
    return MarkRecoverable(std::move(s));
  }
  return s;
}

int64_t Worker::stale_frames_dropped() {
  absl::MutexLock lock(&mu_);
  return stale_dropped_;
}

absl::Status Worker::ServersChanged() {
  auto pool = registry_->GetView(options_.server_pool);
  if (!pool.ok()) return absl::OkStatus();  // the registry is unreachable: not a verdict
  std::vector<std::string> gone;
  for (const Server& srv : servers_) {
    bool same = false;
    for (const auto& m : pool->members()) {
      same = same || (m.role() == v1::ROLE_SERVER && m.rank() == srv.shard &&
                      m.ucx_address() == srv.ucx_address);
    }
    if (!same) gone.push_back(absl::StrCat(srv.shard, " (", srv.grpc_address, ")"));
  }
  if (gone.empty()) return absl::OkStatus();
  const std::string what =
      absl::StrCat("shard server(s) ", absl::StrJoin(gone, ", "), " of pool '",
                   options_.server_pool, "' left, stopped heartbeating or were restarted");
  if (options_.recovery) {
    return Recoverable(absl::AbortedError(absl::StrCat(
        Where(), ": ", what, "; pausing for up to ",
        absl::FormatDuration(options_.recovery_timeout),
        " until every shard is back (restart it with the same --shard and --checkpoint_dir), "
        "then ",
        AfterPause())));
  }
  return absl::AbortedError(
      absl::StrCat(Where(), ": ", what,
                   "; the step cannot complete. Restart the server and resume every "
                   "worker from the latest checkpoint (--resume)"));
}

absl::Status Worker::Recover() {
  if (layout_ == nullptr) return absl::FailedPreconditionError("Recover before RegisterLayout");
  if (!options_.recovery) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": recovery is off (WorkerOptions.recovery / --recover)"));
  }
  return RunRecovery(-1);
}

absl::Status Worker::RecoverTo(int64_t step) {
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": RecoverTo step ", step, " < 0"));
  }
  if (options_.strategy == v1::STRATEGY_DDP) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": DDP writes no checkpoint to recover to; use Recover()"));
  }
  if (layout_ == nullptr) return absl::FailedPreconditionError("RecoverTo before RegisterLayout");
  if (!options_.recovery) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": recovery is off (WorkerOptions.recovery / --recover)"));
  }
  return RunRecovery(step);
}

absl::StatusOr<std::vector<int64_t>> Worker::CompleteCheckpointSteps() {
  if (servers_.empty()) return absl::FailedPreconditionError(absl::StrCat(Where(), ": no servers"));
  v1::JobRef ref;
  ref.set_job(options_.job);
  v1::ListCheckpointsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  Authorize(&ctx);
  absl::Status s = FromGrpc(servers_[0].stub->ListCheckpoints(&ctx, ref, &resp),
                            absl::StrCat(Where(), ": listing the job's checkpoints"));
  if (absl::IsNotFound(s)) return std::vector<int64_t>();
  if (!s.ok()) return Recoverable(absl::UnavailableError(s.message()));
  std::vector<int64_t> steps;
  for (const v1::CheckpointInfo& c : resp.checkpoints()) steps.push_back(c.step());
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status Worker::RunRecovery(int64_t restore_step) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.recovery_timeout;
  const int64_t from = step_;
  // Only a restore newer than anything this worker knew when the failure
  // struck counts; a retry may take the same restore again (the job cannot
  // have moved past it without this worker).
  const int64_t after_epoch = std::max(epoch_.load(), view_epoch_);
  const absl::Time elastic_at = start + options_.elastic_grace;
  for (int attempt = 1;; ++attempt) {
    absl::Status s = RecoverOnce(deadline, elastic_at, restore_step, after_epoch);
    if (s.ok()) {
      ++recoveries_;
      TESSEL_LOG(WARNING)
          << Where() << ": recovered in "
          << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
          << (options_.strategy == v1::STRATEGY_DDP
                  ? absl::StrCat(": servers re-created and every worker's state aligned at step ",
                                 step_, " (this worker was at ", from, ")")
                  : absl::StrCat(": rolled back from step ", from, " to the checkpoint of step ",
                                 step_))
          << ", epoch " << epoch_.load() << " (attempt " << attempt << ")";
      return s;
    }
    if (!IsRecoverable(s) || absl::Now() >= deadline) return Untagged(s);
    TESSEL_LOG(WARNING) << Where() << ": recovery attempt " << attempt
                        << " did not complete, trying again: " << s.message();
    absl::SleepFor(absl::Milliseconds(200));
  }
}

void Worker::ResetForRecovery() {
  absl::MutexLock lock(&mu_);
  expect_version_ = -1;  // accept no PARAMS until the rollback's pull
  received_ = 0;
  expected_ = 0;
  error_ = absl::OkStatus();
  send_error_ = absl::OkStatus();
  sync_version_ = -1;
  sync_received_ = 0;
  for (Unit& u : units_) {  // buffers are freed (or retired) by SettleReceives
    u.grads.reset();
    u.grads_half.reset();
    u.version = -1;
    u.received = 0;
    u.expected = 0;
  }
  AccountLocked();
  for (auto& v : ready_elems_) std::fill(v.begin(), v.end(), 0);
  for (auto& v : pushed_) std::fill(v.begin(), v.end(), 0);
  micro_batches_ = 0;
}

absl::Status Worker::RecoverOnce(absl::Time deadline, absl::Time elastic_at, int64_t restore_step,
                                 int64_t after_epoch) {
  ResetForRecovery();
  RenewWedgedEndpoint();
  // The workers to go on with: all of them, or (elastic) the survivors.
  std::vector<int> ids;
  absl::Status s = WaitForMembers(deadline, elastic_at, &ids);
  if (!s.ok()) return s;
  SettleReceives(absl::Seconds(1));
  int64_t epoch = 0, step = 0;
  // The first of them restores every shard and records the membership
  // there; the others adopt whatever that restore recorded.
  if (ids.front() == id_) {
    s = RestoreShards(restore_step, ids, &epoch, &step);
  } else {
    s = AwaitRestore(deadline, after_epoch, &epoch, &step, &ids);
  }
  if (!s.ok()) return s;
  DropReducers();  // named by the old epoch; the new one gets fresh ones
  {
    // From here on, refusals and failed sends of the old epoch are ignored.
    absl::MutexLock lock(&mu_);
    epoch_ = epoch;
    error_ = absl::OkStatus();
    send_error_ = absl::OkStatus();
  }
  AdoptMembers(ids);
  // DDP keeps its own state: the ranks align it among themselves.
  if (options_.strategy == v1::STRATEGY_DDP) return Recoverable(AlignDdpState(step));
  step_ = step;
  if (fsdp()) return Barrier(step_);
  s = SendPulls(step_);
  if (s.ok()) s = WaitForParams(step_);
  return s;
}

absl::Status Worker::WaitForMembers(absl::Time deadline, absl::Time elastic_at,
                                    std::vector<int>* ids) {
  const int world = options_.world_size;
  const int shards = static_cast<int>(servers_.size());
  bool logged = false;
  std::string missing;
  for (;;) {
    if (!registry_->lease_status().ok()) {  // declared dead while paused or cut off
      v1::Member me;
      me.set_group(options_.job);
      me.set_role(v1::ROLE_WORKER);
      me.set_rank(id_);
      me.set_ucx_address(registered_address_);
      auto joined = registry_->Join(me, options_.lease_ttl);
      if (!joined.ok()) {
        return absl::AbortedError(absl::StrCat(
            Where(),
            ": this worker's registry lease lapsed (it was paused or cut off for longer "
            "than the lease ttl) and rank ",
            id_, " cannot be re-joined (", joined.status().message(),
            "): a replacement has taken over. Exiting"));
      }
      TESSEL_LOG(WARNING) << Where() << ": the registry lease had lapsed; re-joined as rank "
                          << id_;
    }
    auto job = registry_->GetView(options_.job);
    auto pool = registry_->GetView(options_.server_pool);
    missing.clear();
    if (job.ok() && pool.ok()) {
      std::vector<std::string> ranks, gone;
      std::vector<int> present_ids;
      for (int r = 0; r < world; ++r) {
        bool present = false;
        for (const auto& m : job->members()) {
          present = present || (m.role() == v1::ROLE_WORKER && m.rank() == member_ids_[r]);
        }
        if (present) {
          present_ids.push_back(member_ids_[r]);
        } else {
          ranks.push_back(absl::StrCat(member_ids_[r]));
        }
      }
      for (int sh = 0; sh < shards; ++sh) {
        bool present = false;
        for (const auto& m : pool->members()) {
          present = present || (m.role() == v1::ROLE_SERVER && m.rank() == sh);
        }
        if (!present) gone.push_back(absl::StrCat(sh));
      }
      // Elastic: no replacement within the grace period, enough survivors.
      const bool shrink = elastic() && !ranks.empty() && gone.empty() &&
                          static_cast<int>(present_ids.size()) >= options_.elastic_min_workers &&
                          absl::Now() >= elastic_at;
      if (!ranks.empty()) {
        absl::StrAppend(&missing, "worker rank(s) ", absl::StrJoin(ranks, ", "),
                        " (start a replacement with --rank=", ranks.size() == 1 ? ranks[0] : "R",
                        " --resume)");
        if (elastic()) {
          absl::StrAppend(&missing,
                          static_cast<int>(present_ids.size()) >= options_.elastic_min_workers
                              ? absl::StrCat("; without one, the job goes on elastically with ",
                                             present_ids.size(), " worker(s) after ",
                                             absl::FormatDuration(options_.elastic_grace))
                              : absl::StrCat("; only ", present_ids.size(),
                                             " worker(s) left, fewer than elastic_min_workers=",
                                             options_.elastic_min_workers));
        }
      }
      if (!gone.empty()) {
        absl::StrAppend(&missing, missing.empty() ? "" : " and ", "shard server(s) ",
                        absl::StrJoin(gone, ", "), " of pool '", options_.server_pool,
                        "' (restart tessel-server --shard=", gone.size() == 1 ? gone[0] : "N",
                        " with the same --checkpoint_dir)");
      }
      if (missing.empty() || shrink) {
        // A worker that was paused or cut off past its lease may find its
        // rank taken by a replacement: it must not train alongside it.
        for (const auto& m : job->members()) {
          if (m.role() == v1::ROLE_WORKER && m.rank() == id_ &&
              m.pid() != static_cast<int64_t>(getpid())) {
            return absl::AbortedError(
                absl::StrCat(Where(), ": rank ", id_, " is now held by another process (pid ",
                             m.pid(), " on ", m.host(),
                             "): this worker's lease lapsed while it was paused "
                             "or cut off, and a replacement took over. Exiting"));
          }
        }
        *ids = shrink ? present_ids : member_ids_;
        if (shrink) {
          TESSEL_LOG(WARNING) << Where() << ": no replacement for " << absl::StrJoin(ranks, ", ")
                              << " within " << absl::FormatDuration(options_.elastic_grace)
                              << "; going on elastically with the " << present_ids.size()
                              << " worker(s) left (registry ranks "
                              << absl::StrJoin(present_ids, ", ") << ")";
        }
        view_epoch_ = job->epoch();
        RememberMembers(*job);
        return Reconnect(*pool);
      }
    } else {
      missing = absl::StrCat("the registry at ", options_.registry, " (",
                             (job.ok() ? pool.status() : job.status()).message(), ")");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          Where(), ": ", missing, " did not return within ",
          absl::FormatDuration(options_.recovery_timeout), " (recovery_timeout); giving up"));
    }
    if (!logged) {
      TESSEL_LOG(WARNING) << Where() << ": paused; waiting for " << missing;
      logged = true;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

std::string Worker::AfterPause() const {
  return options_.strategy == v1::STRATEGY_DDP
             ? "giving every worker the state of the most advanced one (DDP keeps its state on "
               "the workers: nothing rolls back)"
             : "rolling back to the latest checkpoint";
}

absl::Status Worker::AlignDdpState(int64_t server_step) {
  // Per rank: step + 1 (0: holds no state) and the digest of its state.
  const uint64_t mine[2] = {holds_state_ ? static_cast<uint64_t>(step_) + 1 : 0,
                            holds_state_ ? DdpStateDigest() : 0};
  auto all = ExchangeWords(mine);
  if (!all.ok()) return all.status();
  const int world = options_.world_size;
  int donor = -1;
  for (int r = 0; r < world; ++r) {
    if ((*all)[2 * r] > 0 && (donor < 0 || (*all)[2 * r] > (*all)[2 * donor])) donor = r;
  }
  if (donor < 0) {
    // Not recoverable: nobody can supply the state.
    return absl::DataLossError(absl::StrCat(
        Where(),
        ": no worker of this DDP job holds its state (every one was restarted): DDP keeps "
        "parameters and optimizer state only on the workers and writes no checkpoint. Start the "
        "job afresh, or use zero1/zero2/fsdp with --checkpoint_every_steps to survive losing "
        "every worker"));
  }
  const int64_t target = static_cast<int64_t>((*all)[2 * donor]) - 1;
  std::vector<std::string> behind;
  for (int r = 0; r < world; ++r) {
    const uint64_t step1 = (*all)[2 * r];
    if (step1 == (*all)[2 * donor] && (*all)[2 * r + 1] == (*all)[2 * donor + 1]) continue;
    behind.push_back(step1 == 0                   ? absl::StrCat(r, " (no state: a replacement)")
                     : step1 == (*all)[2 * donor] ? absl::StrCat(r, " (same step, other state)")
                                                  : absl::StrCat(r, " (at step ", step1 - 1, ")"));
  }
  if (!behind.empty()) {
    TESSEL_LOG(WARNING) << Where() << ": rank(s) " << absl::StrJoin(behind, ", ")
                        << " differ from rank " << donor << " at step " << target
                        << "; every rank takes rank " << donor << "'s state";
    absl::Status s = BroadcastDdpState(donor);
    if (!s.ok()) return s;
  }
  holds_state_ = true;
  if (target == server_step) return absl::OkStatus();
  // The first worker re-created the servers at its own step; move them to
  // the job's, and let nobody push before they are there.
  absl::Status wrote = absl::OkStatus();
  if (options_.rank == 0) {
    TrainState at;
    at.step = target;
    wrote = WriteServerState(at);
  }
  absl::Status s = AgreeOk(wrote.ok(), absl::StrCat("moving the shard servers to step ", target));
  return wrote.ok() ? s : wrote;
}

void Worker::AdoptMembers(const std::vector<int>& ids) {
  if (ids == member_ids_) return;
  const int rank = static_cast<int>(std::find(ids.begin(), ids.end(), id_) - ids.begin());
  const int from = options_.world_size;
  {
    absl::MutexLock lock(&mu_);
    options_.rank = rank;
    options_.world_size = static_cast<int>(ids.size());
  }
  spec_.set_world_size(static_cast<int>(ids.size()));
  member_ids_ = ids;
  TESSEL_LOG(WARNING) << Where() << ": the job continues elastically with " << ids.size() << " of "
                      << from << " workers (registry ranks " << absl::StrJoin(ids, ", ")
                      << "); this worker is now rank " << rank << " of " << ids.size();
}

absl::Status Worker::Reconnect(const v1::View& pool) {
  for (Server& srv : servers_) {
    const v1::Member* now = nullptr;
    for (const auto& m : pool.members()) {
      if (m.role() == v1::ROLE_SERVER && m.rank() == srv.shard) now = &m;
    }
    if (now == nullptr || now->ucx_address() == srv.ucx_address) continue;
    auto peer = transport_->Connect(now->ucx_address());
    if (!peer.ok()) {
      return Recoverable(
          absl::UnavailableError(absl::StrCat(Where(), ": cannot reach the restarted shard ",
                                              srv.shard, " over UCX: ", peer.status().message())));
    }
    if (srv.ucx_address.empty()) {
      TESSEL_LOG(INFO) << Where() << ": shard " << srv.shard << " at " << now->grpc_address()
                       << " connected again over UCX (this worker's endpoint is new)";
    } else {
      TESSEL_LOG(INFO) << Where() << ": shard " << srv.shard << " is back at "
                       << now->grpc_address() << " (was " << srv.grpc_address << ")";
    }
    srv.grpc_address = now->grpc_address();
    srv.stub = v1::ShardServer::NewStub(MakeChannel(srv.grpc_address, credentials_));
    srv.peer = *peer;
    srv.ucx_address = now->ucx_address();
  }
  return absl::OkStatus();
}

void Worker::RenewWedgedEndpoint() {
  // A server killed while writing into this worker's shared-memory receive
  // queue wedges it for good (transport/transport.h): nothing any server
  // sends would arrive again. The cure is a fresh endpoint; every server is
  // then connected again (Reconnect: no address matches ""). The registry
  // keeps the first address: it names this process, and servers answer
  // through the endpoint each message arrives on.
  absl::Status queue = transport_->CheckReceiveQueue(absl::Seconds(3));
  if (queue.ok()) return;
  TESSEL_LOG(WARNING) << Where() << ": " << queue.message()
                      << "; re-creating this worker's UCX endpoint";
  absl::Status reset = transport_->Reset();
  if (!reset.ok()) {
    TESSEL_LOG(ERROR) << Where() << ": cannot re-create the UCX endpoint: " << reset.message();
    return;
  }
  ++endpoint_renewals_;
  for (Server& srv : servers_) {
    srv.ucx_address.clear();
    srv.peer = ~PeerId{0};
  }
}

void Worker::SettleReceives(absl::Duration limit) {
  // PARAMS accepted before the rollback land where the checkpoint's will.
  // A live server's finish within moments; what is still in flight after
  // that comes from a dead or stalled server and could land at any time (a
  // stalled one may wake up), so the buffers it targets are retired (kept
  // alive, never read again) and replaced by fresh ones.
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](int64_t* n) { return *n == 0; }, &inflight_receives_),
                       limit);
  const bool stuck = inflight_receives_ > 0;
  for (Unit& u : units_) {
    if (stuck && !u.params.empty()) retired_.push_back(std::move(u.params));
    if (stuck && !u.params_half.empty()) retired_half_.push_back(std::move(u.params_half));
    std::vector<float>().swap(u.params);
    std::vector<uint16_t>().swap(u.params_half);
  }
  if (stuck) {
    // DDP receives the averaged gradient; its parameters are its own state.
    const bool ddp = options_.strategy == v1::STRATEGY_DDP;
    std::vector<float>& target = ddp ? grads_ : params_;
    if (!target.empty()) {
      retired_.push_back(std::move(target));
      target.assign(retired_.back().size(), 0.f);
    }
    std::vector<uint16_t>& target_half = ddp ? grads_half_ : params_half_;
    if (!target_half.empty()) {
      retired_half_.push_back(std::move(target_half));
      target_half.assign(retired_half_.back().size(), 0);
    }
    TESSEL_LOG(WARNING) << Where() << ": " << inflight_receives_
                        << " parameter transfer(s) from before the rollback are still in flight "
                           "(a dead or stalled server); their buffers were replaced";
  }
  AccountLocked();
}

absl::Status Worker::RestoreShards(int64_t restore_step, const std::vector<int>& ids,
                                   int64_t* epoch, int64_t* step) {
  const bool ddp = options_.strategy == v1::STRATEGY_DDP;
  // The step to go back to: the latest complete checkpoint (DDP: ours).
  *step = step_;
  if (!ddp) {
    v1::CheckpointRef ref;
    ref.set_job(options_.job);
    ref.set_step(restore_step);
    v1::CheckpointInfo info;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Authorize(&ctx);
    absl::Status s = FromGrpc(servers_[0].stub->GetCheckpoint(&ctx, ref, &info),
                              absl::StrCat(Where(), ": finding the checkpoint to roll back to"));
    if (absl::IsNotFound(s)) {
      return absl::FailedPreconditionError(
          absl::StrCat(s.message(),
                       ". Recovery needs a complete checkpoint: run with "
                       "CheckpointPolicy.every_steps (--checkpoint_every_steps) and initial "
                       "(--checkpoint_initial) on servers sharing one --checkpoint_dir"));
    }
    if (!s.ok()) return Recoverable(absl::UnavailableError(s.message()));
    *step = info.step();
  }
  // An epoch above every one in use: ours, the registry's, every shard's.
  int64_t e = std::max(epoch_.load(), view_epoch_);
  for (Server& srv : servers_) {
    v1::JobRef ref;
    ref.set_job(options_.job);
    v1::ShardStats st;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Authorize(&ctx);
    grpc::Status g = srv.stub->GetStats(&ctx, ref, &st);
    if (g.ok()) {
      e = std::max(e, st.epoch());
    } else if (g.error_code() != grpc::StatusCode::NOT_FOUND) {
      return Recoverable(
          absl::UnavailableError(absl::StrCat(Where(), ": GetStats on shard ", srv.shard, " (",
                                              srv.grpc_address, "): ", g.error_message())));
    }
  }
  *epoch = e + 1;
  for (Server& srv : servers_) {
    v1::CreateJobRequest req;
    *req.mutable_spec() = spec_;
    req.mutable_spec()->set_world_size(static_cast<int>(ids.size()));
    for (int id : ids) req.add_worker_ids(id);
    req.set_shard_index(srv.shard);
    req.set_epoch(*epoch);
    req.set_restore(!ddp);
    req.set_restore_step(*step);
    req.set_replace(true);
    req.set_start_step(*step);
    v1::CreateJobResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Minutes(5));  // a restore reads the checkpoint
    Authorize(&ctx);
    absl::Status s = FromGrpc(srv.stub->CreateJob(&ctx, req, &resp),
                              absl::StrCat(Where(), ": restoring shard ", srv.shard, " (",
                                           srv.grpc_address, ") to step ", *step));
    if (!s.ok()) {
      if (absl::IsInvalidArgument(s) || absl::IsPermissionDenied(s) || absl::IsUnauthenticated(s)) {
        return s;  // will not get better by trying again
      }
      // Others may: the server died again, or pruning removed checkpoint C
      // while it was read (the next attempt picks the newest one).
      return Recoverable(absl::UnavailableError(s.message()));
    }
    const Range r = layout_->shard_range(srv.shard);
    if (resp.range_begin() != r.begin || resp.range_end() != r.end || resp.step() != *step) {
      return absl::InternalError(absl::StrCat(
          Where(), ": shard ", srv.shard, " restored [", resp.range_begin(), ", ", resp.range_end(),
          ") at step ", resp.step(), "; expected [", r.begin, ", ", r.end, ") at step ", *step));
    }
  }
  TESSEL_LOG(INFO) << Where() << ": restored " << servers_.size() << " shard(s) to step " << *step
                   << " at epoch " << *epoch << " for " << ids.size() << " worker(s)";
  return absl::OkStatus();
}

absl::Status Worker::AwaitRestore(absl::Time deadline, int64_t after_epoch, int64_t* epoch,
                                  int64_t* step, std::vector<int>* ids) {
  std::string last = "no answer yet";
  int polls = 0;
  for (;;) {
    int64_t e = -1, k = -1;
    std::vector<int> restored_ids;
    bool ready = true, unreachable = false;
    for (Server& srv : servers_) {
      v1::JobRef ref;
      ref.set_job(options_.job);
      v1::ShardStats st;
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Seconds(5));
      Authorize(&ctx);
      grpc::Status g = srv.stub->GetStats(&ctx, ref, &st);
      if (!g.ok()) {
        last = absl::StrCat("shard ", srv.shard, ": ", g.error_message());
        ready = false;
        unreachable = g.error_code() != grpc::StatusCode::NOT_FOUND;
        break;
      }
      // Restored by this recovery: a newer epoch, every shard the same, and
      // still at the step it was restored to (no step can pass without us).
      if (st.epoch() <= after_epoch || st.restored_from_step() != st.step() ||
          (e >= 0 && (st.epoch() != e || st.step() != k))) {
        last = absl::StrCat("shard ", srv.shard, " at epoch ", st.epoch(), " step ", st.step(),
                            " (restored from ", st.restored_from_step(), ")");
        ready = false;
        break;
      }
      std::vector<int> shard_ids(st.worker_ids().begin(), st.worker_ids().end());
      if (shard_ids.empty()) {
        for (int r = 0; r < st.world_size(); ++r) shard_ids.push_back(r);
      }
      if (e >= 0 && shard_ids != restored_ids) {
        last = absl::StrCat("shard ", srv.shard, " restored for workers ",
                            absl::StrJoin(shard_ids, ","), ", another shard for ",
                            absl::StrJoin(restored_ids, ","));
        ready = false;
        break;
      }
      e = st.epoch();
      k = st.step();
      restored_ids = std::move(shard_ids);
    }
    if (ready) {
      if (std::find(restored_ids.begin(), restored_ids.end(), id_) == restored_ids.end()) {
        // Not recoverable: the job went on without this worker.
        return absl::AbortedError(
            absl::StrCat(Where(), ": the job went on without this worker (registry rank ", id_,
                         "): a recovery at epoch ", e, " restored step ", k, " for ",
                         restored_ids.size(), " worker(s), registry ranks ",
                         absl::StrJoin(restored_ids, ", "), " (elastic continuation). Exiting"));
      }
      *epoch = e;
      *step = k;
      *ids = std::move(restored_ids);
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(Where(), ": the first worker did not restore the shard servers within ",
                       absl::FormatDuration(options_.recovery_timeout), " (last seen: ", last,
                       "); is it running with recovery enabled?"));
    }
    if (registry_->group_epoch() > view_epoch_) {
      absl::Status changed = MembershipChanged();  // someone left again: start over
      if (!changed.ok()) return changed;
    }
    if (++polls % 10 == 0 || unreachable) {
      absl::Status servers = ServersChanged();  // a server died again: reconnect, start over
      if (!servers.ok()) return servers;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

WorkerMemory Worker::memory() const {
  WorkerMemory m;
  m.params_bytes =
      static_cast<int64_t>(params_.size() * sizeof(float) + params_half_.size() * sizeof(uint16_t));
  m.grads_bytes =
      static_cast<int64_t>(grads_.size() * sizeof(float) + grads_half_.size() * sizeof(uint16_t));
  for (const auto& s : optimizer_state_) m.optimizer_bytes += s.size() * sizeof(float);
  if (unit_grads()) {
    absl::MutexLock lock(const_cast<absl::Mutex*>(&mu_));
    for (const Unit& u : units_) {
      m.params_bytes += static_cast<int64_t>(u.params.capacity() * sizeof(float) +
                                             u.params_half.capacity() * sizeof(uint16_t));
      if (u.grads) m.grads_bytes += static_cast<int64_t>(u.grads->capacity() * sizeof(float));
      if (u.grads_half) {
        m.grads_bytes += static_cast<int64_t>(u.grads_half->capacity() * sizeof(uint16_t));
      }
    }
    m.peak_bytes = peak_bytes_;
  }
  return m;
}

absl::StatusOr<std::vector<v1::ShardStats>> Worker::ServerStats() {
  std::vector<v1::ShardStats> out;
  for (Server& srv : servers_) {
    v1::JobRef ref;
    ref.set_job(options_.job);
    v1::ShardStats st;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Authorize(&ctx);
    absl::Status s =
        FromGrpc(srv.stub->GetStats(&ctx, ref, &st), absl::StrCat("GetStats on shard ", srv.shard));
    if (!s.ok()) return s;
    out.push_back(std::move(st));
  }
  return out;
}

// --- state queries -----------------------------------------------------------

absl::Status Worker::AllReduceMean(absl::Span<float> data) {
  if (layout_ == nullptr) {
    return absl::FailedPreconditionError("AllReduceMean before RegisterLayout");
  }
  if (data.empty()) return absl::InvalidArgumentError(absl::StrCat(Where(), ": empty vector"));
  if (options_.world_size == 1) return absl::OkStatus();  // the mean of one
  std::unique_ptr<Worker>& reducer = reducers_[data.size()];
  if (reducer == nullptr) {
    // A reduce-only DDP job of this size, on shard 0 for small vectors (a
    // metric, a digest) and on every server for large ones (gradients).
    WorkerOptions o;
    o.registry = options_.registry;
    // Named by the fencing epoch: after a recovery (a replacement, or an
    // elastic renumbering) every rank uses new jobs for the new membership.
    o.job = absl::StrCat(options_.job, "~sync", data.size(), ".e", epoch_.load());
    o.rank = options_.rank;
    o.world_size = options_.world_size;
    o.server_pool = options_.server_pool;
    o.num_servers = data.size() < (1 << 16) ? 1 : options_.num_servers;
    o.strategy = v1::STRATEGY_DDP;
    o.optimizer.kind = OptimizerParams::Kind::kSgd;
    o.bucket_bytes = options_.bucket_bytes;
    o.align_elems = options_.align_elems;
    o.connect_timeout = options_.connect_timeout;
    o.step_timeout = options_.step_timeout;
    o.lease_ttl = options_.lease_ttl;
    o.ucx = options_.ucx;
    o.tls = options_.tls;
    o.token = token_;
    // A rank lost meanwhile never joins: stop waiting, let recovery start over.
    o.connect_check = [this] { return CheckMembers(); };
    auto w = Worker::Connect(o);
    if (!w.ok()) {
      reducers_.erase(data.size());
      return w.status();
    }
    (*w)->reduce_only_ = true;
    const std::vector<float> zeros(data.size(), 0.f);
    absl::Status s = (*w)->RegisterLayout({{"data", {static_cast<int64_t>(data.size())}}}, zeros);
    if (!s.ok()) {
      reducers_.erase(data.size());
      return s;
    }
    reducer = std::move(*w);
  }
  std::copy(data.begin(), data.end(), reducer->grads().begin());
  absl::Status s = reducer->Step();
  if (!s.ok()) {
    reducers_.erase(data.size());  // its job is mid-step: start over next time
    return s;
  }
  std::copy(reducer->grads().begin(), reducer->grads().end(), data.begin());
  return absl::OkStatus();
}

absl::Status Worker::AgreeOk(bool ok, const std::string& what) {
  std::vector<float> flag = {ok ? 0.f : 1.f};
  absl::Status s = AllReduceMean(absl::MakeSpan(flag));
  if (!s.ok()) return s;
  if (flag[0] != 0.f) {
    return absl::AbortedError(absl::StrCat(
        Where(), ": ", what, " failed on another rank (see its log); nothing changed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> Worker::SynchronizeGradients() {
  if (layout_ == nullptr)
    return absl::FailedPreconditionError("SynchronizeGradients before RegisterLayout");
  if (unit_grads()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": SynchronizeGradients needs a full gradient buffer; with ",
        fsdp() ? "fsdp" : "per-unit zero2",
        " each unit's gradients are pushed and freed as backward goes (the servers average them)"));
  }
  const size_t n = static_cast<size_t>(layout_->num_params());
  synced_grads_.resize(n);
  if (half_) {
    HalfToFloat(*half_, grads_half_.data(), synced_grads_.data(), n);
  } else {
    std::copy(grads_.begin(), grads_.end(), synced_grads_.begin());
    if (micro_batches_ > 1) {  // as Step() will: the mean over micro-batches
      const float count = static_cast<float>(micro_batches_);
      for (float& g : synced_grads_) g /= count;
    }
  }
  absl::Status s = AllReduceMean(absl::MakeSpan(synced_grads_));
  if (!s.ok()) return s;
  return absl::MakeConstSpan(synced_grads_);
}

namespace {
// Values travel through AllReduceMean as 16-bit integers in floats: exact
// through a mean over up to 2^20 ranks when only one rank contributes a
// non-zero value (recovered by rounding mean * W).
void PutWords(uint64_t v, int words, float* out) {
  for (int i = 0; i < words; ++i) out[i] = static_cast<float>((v >> (16 * i)) & 0xffff);
}
uint64_t GetWords(const float* in, int words, int world) {
  uint64_t v = 0;
  for (int i = 0; i < words; ++i) {
    v |= static_cast<uint64_t>(std::nearbyint(static_cast<double>(in[i]) * world)) << (16 * i);
  }
  return v;
}
}  // namespace

absl::StatusOr<std::vector<uint64_t>> Worker::ExchangeWords(absl::Span<const uint64_t> mine) {
  const size_t world = static_cast<size_t>(options_.world_size);
  const size_t k = mine.size();
  std::vector<float> words(world * k * 4, 0.f);
  for (size_t i = 0; i < k; ++i) {
    PutWords(mine[i], 4, words.data() + (static_cast<size_t>(options_.rank) * k + i) * 4);
  }
  absl::Status s = AllReduceMean(absl::MakeSpan(words));
  if (!s.ok()) return s;
  std::vector<uint64_t> all(world * k);
  for (size_t j = 0; j < all.size(); ++j) {
    all[j] = GetWords(words.data() + j * 4, 4, static_cast<int>(world));
  }
  return all;
}

uint64_t Worker::DdpStateDigest() const {
  Digest d;
  d.UpdateInt(step_);
  d.Update(params_.data(), params_.size() * sizeof(float));
  for (const auto& slot : optimizer_state_) d.Update(slot.data(), slot.size() * sizeof(float));
  return d.value();
}

absl::Status Worker::BroadcastDdpState(int root) {
  // Every 32-bit value as two 16-bit words; the step as four.
  const int world = options_.world_size;
  const size_t n = params_.size();
  const size_t values = n * (1 + optimizer_state_.size());
  std::vector<float> wire(4 + values * 2, 0.f);
  if (options_.rank == root) {
    PutWords(static_cast<uint64_t>(step_), 4, wire.data());
    size_t at = 4;
    auto put = [&](const std::vector<float>& v) {
      for (float x : v) {
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        PutWords(bits, 2, wire.data() + at);
        at += 2;
      }
    };
    put(params_);
    for (const auto& slot : optimizer_state_) put(slot);
  }
  absl::Status s = AllReduceMean(absl::MakeSpan(wire));
  if (!s.ok()) return s;
  step_ = static_cast<int64_t>(GetWords(wire.data(), 4, world));
  size_t at = 4;
  auto get = [&](std::vector<float>& v) {
    for (float& x : v) {
      const uint32_t bits = static_cast<uint32_t>(GetWords(wire.data() + at, 2, world));
      at += 2;
      std::memcpy(&x, &bits, 4);
    }
  };
  get(params_);
  for (auto& slot : optimizer_state_) get(slot);
  if (half_) FloatToHalf(*half_, params_.data(), params_half_.data(), n);
  return ReleaseReducer(wire.size());
}

absl::Status Worker::ReleaseReducer(size_t size) {
  auto it = reducers_.find(size);
  if (it == reducers_.end()) return absl::OkStatus();
  // Nobody may still be pulling from its job when rank 0 deletes it.
  absl::Status s = AgreeOk(true, "releasing a reducer");
  if (!s.ok()) return s;
  if (options_.rank == 0) it->second->DeleteJobOnServers();
  reducers_.erase(it);
  return absl::OkStatus();
}

void Worker::DropReducers() {
  for (auto& [size, reducer] : reducers_) {
    if (reducer != nullptr) reducer->DeleteJobOnServers();
  }
  reducers_.clear();
}

void Worker::DeleteJobOnServers() {
  for (Server& srv : servers_) {
    v1::JobRef ref;
    ref.set_job(options_.job);
    v1::DeleteJobResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    Authorize(&ctx);
    grpc::Status g = srv.stub->DeleteJob(&ctx, ref, &resp);
    if (!g.ok() && g.error_code() != grpc::StatusCode::NOT_FOUND) {
      TESSEL_LOG(WARNING) << Where() << ": could not delete job '" << options_.job << "' on shard "
                          << srv.shard << ": " << g.error_message();
    }
  }
}

absl::StatusOr<OptimizerStateReport> Worker::SynchronizeOptimizerState() {
  if (layout_ == nullptr) {
    return absl::FailedPreconditionError("SynchronizeOptimizerState before RegisterLayout");
  }
  OptimizerStateReport report;
  report.step = step_;
  if (options_.strategy != v1::STRATEGY_DDP) {
    // One copy, sharded: nothing to copy around; check the shards agree on the step.
    auto stats = ServerStats();
    if (!stats.ok()) return stats.status();
    for (const v1::ShardStats& st : *stats) {
      report.digests.push_back(st.state_digest());
      if (st.step() != step_ || st.step_in_progress() || !st.initialized()) {
        report.consistent = false;
      }
    }
    return report;
  }
  const uint64_t mine[2] = {static_cast<uint64_t>(step_), DdpStateDigest()};
  auto all = ExchangeWords(mine);
  if (!all.ok()) return all.status();
  const int world = options_.world_size;
  for (int r = 0; r < world; ++r) {
    if ((*all)[2 * r] != (*all)[0]) {  // the same verdict on every rank, before anything changes
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": rank 0 is at step ", (*all)[0], " and rank ", r, " at ", (*all)[2 * r],
          "; ranks must call SynchronizeOptimizerState at the same step"));
    }
    report.digests.push_back(absl::StrFormat("%016x", (*all)[2 * r + 1]));
    if ((*all)[2 * r + 1] != (*all)[1]) report.repaired_ranks.push_back(r);
  }
  report.consistent = report.repaired_ranks.empty();
  if (report.consistent) return report;
  TESSEL_LOG(WARNING) << Where() << ": optimizer state differs from rank 0's on rank(s) "
                      << absl::StrJoin(report.repaired_ranks, ", ") << "; copying rank 0's";
  absl::Status s = BroadcastDdpState(0);
  if (!s.ok()) return s;
  return report;
}

absl::Status Worker::ReadServerState(TrainState* out) {
  constexpr int64_t kChunk = 1 << 20;
  const size_t slots = out->state.size();
  for (Server& srv : servers_) {
    const Range r = layout_->shard_range(srv.shard);
    for (int64_t off = 0; off < r.size(); off += kChunk) {
      v1::ReadStateRequest req;
      req.set_job(options_.job);
      req.set_epoch(epoch_.load());
      req.set_step(step_);
      req.set_offset(off);
      req.set_count(std::min(kChunk, r.size() - off));
      v1::ShardState st;
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Minutes(1));
      Authorize(&ctx);
      absl::Status s = FromGrpc(srv.stub->ReadState(&ctx, req, &st),
                                absl::StrCat(Where(), ": ReadState on shard ", srv.shard));
      if (!s.ok()) return s;
      const size_t bytes = static_cast<size_t>(req.count()) * sizeof(float);
      if (st.params().size() != bytes || st.state().size() != bytes * slots ||
          st.range_begin() != r.begin || st.range_end() != r.end) {
        return absl::DataLossError(
            absl::StrCat(Where(), ": shard ", srv.shard, " sent a state chunk of the wrong size"));
      }
      std::memcpy(out->params.data() + r.begin + off, st.params().data(), bytes);
      for (size_t k = 0; k < slots; ++k) {
        std::memcpy(out->state[k].data() + r.begin + off, st.state().data() + k * bytes, bytes);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Worker::WriteServerState(const TrainState& state) {
  constexpr int64_t kChunk = 1 << 20;
  const bool ddp = options_.strategy == v1::STRATEGY_DDP;
  for (Server& srv : servers_) {
    const Range r = layout_->shard_range(srv.shard);
    int64_t off = 0;
    do {
      const int64_t count = ddp ? 0 : std::min(kChunk, r.size() - off);
      v1::WriteStateRequest req;
      req.set_job(options_.job);
      req.set_epoch(epoch_.load());
      req.set_step(state.step);
      req.set_offset(off);
      const size_t bytes = static_cast<size_t>(count) * sizeof(float);
      if (count > 0) {
        req.mutable_params()->assign(
            reinterpret_cast<const char*>(state.params.data() + r.begin + off), bytes);
        for (const auto& slot : state.state) {
          req.mutable_state()->append(reinterpret_cast<const char*>(slot.data() + r.begin + off),
                                      bytes);
        }
      }
      off += count;
      req.set_commit(off >= r.size() || ddp);
      v1::WriteStateResponse resp;
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Minutes(1));
      Authorize(&ctx);
      absl::Status s = FromGrpc(srv.stub->WriteState(&ctx, req, &resp),
                                absl::StrCat(Where(), ": WriteState on shard ", srv.shard));
      if (!s.ok()) return s;
    } while (off < r.size() && !ddp);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Worker::Serialize() {
  if (layout_ == nullptr) return absl::FailedPreconditionError("Serialize before RegisterLayout");
  TrainState state;
  state.spec = spec_;
  state.step = step_;
  const size_t n = static_cast<size_t>(layout_->num_params());
  if (options_.strategy == v1::STRATEGY_DDP) {
    state.params = params_;
    state.state = optimizer_state_;
    return EncodeTrainState(state);
  }
  // Every rank reads between two barriers: no shard can start the next step
  // while anyone reads.
  absl::Status s = AgreeOk(true, "Serialize");
  if (!s.ok()) return s;
  state.params.assign(n, 0.f);
  state.state.assign(static_cast<size_t>(StateSlots(options_.optimizer)), std::vector<float>(n));
  absl::Status read = ReadServerState(&state);
  s = AgreeOk(read.ok(), "Serialize");
  if (!read.ok()) return read;
  if (!s.ok()) return s;
  return EncodeTrainState(state);
}

absl::Status Worker::Deserialize(absl::string_view blob) {
  if (layout_ == nullptr) return absl::FailedPreconditionError("Deserialize before RegisterLayout");
  absl::StatusOr<TrainState> state = DecodeTrainState(blob);
  absl::Status fits = state.ok() ? CheckTrainStateFits(*state, spec_) : state.status();
  if (!fits.ok()) {
    fits = absl::Status(fits.code(), absl::StrCat(Where(), ": Deserialize: ", fits.message()));
  }
  // Agree before touching anything: a rank with a bad blob stops everyone.
  absl::Status s = AgreeOk(fits.ok(), "Deserialize (checking the blob)");
  if (!fits.ok()) return fits;
  if (!s.ok()) return s;
  const bool ddp = options_.strategy == v1::STRATEGY_DDP;
  absl::Status wrote = absl::OkStatus();
  if (options_.rank == 0) wrote = WriteServerState(*state);
  s = AgreeOk(wrote.ok(), "Deserialize (writing the shard servers)");
  if (!wrote.ok()) return wrote;
  if (!s.ok()) return s;
  step_ = state->step;
  micro_batches_ = 0;
  for (auto& v : ready_elems_) std::fill(v.begin(), v.end(), 0);
  for (auto& v : pushed_) std::fill(v.begin(), v.end(), 0);
  if (ddp) {
    params_ = state->params;
    optimizer_state_ = state->state;
    if (half_) FloatToHalf(*half_, params_.data(), params_half_.data(), params_.size());
    return absl::OkStatus();
  }
  if (fsdp()) return Barrier(step_);  // units are gathered per step
  s = SendPulls(step_);
  if (s.ok()) s = WaitForParams(step_);
  return s;
}

absl::StatusOr<bool> Worker::ReportMetric(float value) {
  std::vector<float> mean = {value};
  absl::Status s = AllReduceMean(absl::MakeSpan(mean));
  if (!s.ok()) return s;
  stopper_.Observe(mean[0]);
  const bool stop = options_.early_stop_hook ? options_.early_stop_hook(mean[0], stopper_)
                                             : stopper_.ShouldStop();
  early_stop_ = early_stop_ || stop;
  return early_stop_;
}

}  // namespace tessel
