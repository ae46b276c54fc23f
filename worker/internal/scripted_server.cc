#include "worker/internal/scripted_server.h"

#include <cstring>
#include <utility>

#include "core/status_macros.h"
#include "gtest/gtest.h"

namespace tessel::internal {

ScriptedServer::ScriptedServer(std::shared_ptr<InProcFabric> fabric)
    : transport_(InProcTransport::Create(std::move(fabric))) {
  transport_->SetHandler([this](const Incoming& in) {
    auto h = DecodeWireHeader(in.header);
    if (!h.ok()) return Accept{};
    auto frame = std::make_shared<Frame>();
    frame->header = *h;
    frame->from = in.from;
    frame->header_bytes = in.header.size();
    frame->wire_header.assign(in.header.begin(), in.header.end());
    frame->payload.resize(in.payload_bytes);
    auto record = [this, frame](absl::Status) {
      absl::MutexLock lock(&mu_);
      frames_.push_back(std::move(*frame));
    };
    if (in.payload_bytes == 0) {
      record(absl::OkStatus());
      return Accept{};
    }
    return Accept{frame->payload.data(), frame->payload.size(), record};
  });
}

ScriptedServer::~ScriptedServer() { transport_->Shutdown(); }

std::vector<ScriptedServer::Frame> ScriptedServer::Await(size_t n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return frames_.size() >= n; };
  mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  return frames_;
}

void ScriptedServer::Reply(PeerId to, const FrameHeader& h, std::vector<uint8_t> payload,
                           JobFrameKeys* auth) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(payload));
  const WireHeader wire =
      auth != nullptr ? auth->SealFrameToWorker(h, owned->data()) : ToWire(nullptr, h);
  transport_->Send(to, wire.span(), owned->data(), owned->size(), [owned](absl::Status) {});
}

void ScriptedServer::SendRaw(PeerId to, absl::Span<const uint8_t> header,
                             std::vector<uint8_t> payload) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(payload));
  transport_->Send(to, header, owned->data(), owned->size(), [owned](absl::Status) {});
}

std::unique_ptr<JobContext> DataPathContext(WorkerOptions o, int64_t epoch,
                                            const std::vector<TensorDesc>& tensors, int shards,
                                            int64_t bucket_elems) {
  o.recovery = true;
  o.step_timeout = absl::Seconds(2);
  auto ctx = std::make_unique<JobContext>(o);
  ctx->epoch = epoch;
  auto layout = Layout::Create(tensors, shards, 4, bucket_elems);
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (layout.ok()) ctx->layout = std::make_unique<Layout>(std::move(*layout));
  return ctx;
}

absl::Status ConnectChannel(DataChannel* channel, const std::vector<ScriptedServer*>& servers) {
  channel->SetShards(static_cast<int>(servers.size()));
  for (size_t s = 0; s < servers.size(); ++s) {
    TESSEL_ASSIGN_OR_RETURN(const PeerId peer, channel->transport().Connect(servers[s]->address()));
    channel->SetAddress(static_cast<int>(s), servers[s]->address());
    channel->SetPeer(static_cast<int>(s), peer);
  }
  return absl::OkStatus();
}

FrameHeader ParamsHeader(const JobContext& ctx, int shard, int bucket, int64_t step,
                         uint64_t bytes) {
  FrameHeader h =
      MakeHeader(FrameType::kParams, ctx.job_id, ctx.epoch.load(), step, 0, shard, bucket);
  h.payload_bytes = bytes;
  h.bucket_count = bytes > 0 ? 1 : 0;  // as a server answers a pull; 0: "the shard is at step"
  return h;
}

std::vector<uint8_t> FloatBytes(size_t n, float v) {
  std::vector<float> f(n, v);
  std::vector<uint8_t> b(n * sizeof(float));
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

}  // namespace tessel::internal
