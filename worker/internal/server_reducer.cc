#include "worker/internal/server_reducer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/job_name.h"
#include "core/status_macros.h"
#include "rpc/job_spec.h"
#include "worker/internal/convert.h"
#include "worker/internal/make_transport.h"

namespace tessel::internal {
namespace {

// The helper job's options: the parent's identity and plumbing, a DDP job
// that only averages.
WorkerOptions HelperOptions(const JobContext& parent, size_t size) {
  const WorkerOptions& po = parent.options;
  WorkerOptions o;
  o.registry = po.registry;
  o.job = HelperJobName(po.job, static_cast<int64_t>(size), parent.epoch.load());
  o.rank = parent.rank.load();
  o.world_size = parent.world_size;
  o.server_pool = po.server_pool;
  o.strategy = Strategy::kDdp;
  o.optimizer.kind = OptimizerParams::Kind::kSgd;
  o.bucket_bytes = po.bucket_bytes;
  o.align_elems = po.align_elems;
  o.connect_timeout = po.connect_timeout;
  o.step_timeout = po.step_timeout;
  o.lease_ttl = po.lease_ttl;
  o.ucx = po.ucx;
  o.transport = po.transport;
  o.tls = po.tls;
  o.token = parent.token;
  return o;
}

}  // namespace

ServerReducer::ServerReducer(const WorkerOptions& options, const JobContext& parent)
    : ctx_(options) {
  ctx_.epoch = parent.epoch.load();
}

ServerReducer::~ServerReducer() {
  // Nothing may land in the exchange's buffers once they are freed.
  if (channel_ != nullptr) channel_->transport().Shutdown();
}

absl::StatusOr<std::unique_ptr<Reducer>> ServerReducer::Make(const ReducerSite& site, size_t size) {
  const WorkerOptions options = HelperOptions(*site.parent, size);
  TESSEL_RETURN_IF_ERROR(ValidateWorkerOptions(options));
  std::unique_ptr<ServerReducer> reducer(new ServerReducer(options, *site.parent));
  TESSEL_RETURN_IF_ERROR(reducer->Start(site, size));
  return std::unique_ptr<Reducer>(std::move(reducer));
}

absl::Status ServerReducer::Start(const ReducerSite& site, size_t size) {
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, MakeTransport(ctx_.options));
  channel_ = std::make_unique<DataChannel>(&ctx_, std::move(transport));
  channel_->SetPeriodicCheck(site.check);
  const int all = static_cast<int>(site.ucx_addresses.size());
  const int shards = size < kReducerShardAllFrom ? std::min(all, 1) : all;
  if (shards == 0) {
    return absl::FailedPreconditionError(absl::StrCat(ctx_.Where(), ": no shard servers"));
  }
  channel_->SetShards(shards);
  for (int shard = 0; shard < shards; ++shard) {
    const std::string& address = site.ucx_addresses[static_cast<size_t>(shard)];
    channel_->SetAddress(shard, site.fleet->address(shard));
    absl::StatusOr<PeerId> peer = address.empty()
                                      ? absl::UnavailableError("its UCX address is not known yet")
                                      : channel_->transport().Connect(address);
    if (!peer.ok()) {
      return absl::UnavailableError(absl::StrCat(ctx_.Where(), ": cannot reach shard ", shard,
                                                 " over UCX: ", peer.status().message()));
    }
    channel_->SetPeer(shard, *peer);
  }
  const v1::JobSpec spec =
      MakeJobSpec(ctx_.options, ctx_.world_size, {{"data", {static_cast<int64_t>(size)}}}, shards);
  TESSEL_ASSIGN_OR_RETURN(Layout layout, ValidateJobSpec(spec));
  exchange_ = std::make_unique<BucketExchange>(&ctx_, channel_.get());
  channel_->SetSink(exchange_.get());
  ctx_.layout = std::make_unique<Layout>(std::move(layout));
  control_ = std::make_unique<JobControl>(&ctx_, site.fleet, shards);
  v1::CreateJobRequest create;
  *create.mutable_spec() = spec;
  create.set_epoch(ctx_.epoch.load());
  create.set_restore_step(-1);
  TESSEL_RETURN_IF_ERROR(control_->CreateJob(create, "CreateJob", nullptr));
  TESSEL_ASSIGN_OR_RETURN(std::vector<FrameKeyGrant> keys, control_->FrameKeys());
  TESSEL_RETURN_IF_ERROR(channel_->SetFrameKeys(keys));
  exchange_->Allocate();
  return absl::OkStatus();
}

absl::Status ServerReducer::Mean(absl::Span<float> data) {
  PayloadVector<float>& grads = exchange_->buffers().grads;
  if (data.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_.Where(), ": a vector of ", data.size(),
                                                   " floats for a reducer of ", grads.size()));
  }
  std::copy(data.begin(), data.end(), grads.begin());
  TESSEL_RETURN_IF_ERROR(exchange_->Exchange(ctx_.step + 1));
  ++ctx_.step;
  exchange_->NextStep();
  std::copy(grads.begin(), grads.end(), data.begin());
  return absl::OkStatus();
}

void ServerReducer::DeleteJob() { control_->DeleteJob(); }

}  // namespace tessel::internal
