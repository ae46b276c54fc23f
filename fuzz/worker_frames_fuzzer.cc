// Fuzz target: a worker's frame handlers end to end, DataChannel::OnFrame
// (worker/internal/data_channel.h) with a scripted sink that waits for the
// PARAMS of step kFuzzParamsStep of every bucket (each into a buffer of
// exactly that bucket's size, taken as BucketExchange takes them), and the
// real HostAggregator (worker/internal/host_aggregator.h) behind it for the
// PUSH frames of the other worker of its host. Frames come as a hostile peer
// sends them (fuzz/frame_input.h), through FakeTransport.
//
// The first input byte (frame_jobs.h kWorker*): frame authentication on
// (a frame flagged kSeal is sealed as its legitimate sender would: a
// server's PARAMS/ERROR to this rank, the host's other rank's frames),
// bf16 on the wire,
// ranks 0 and 1 on one host (host aggregation), this worker's rank, and
// whether its own gradients are ready at the end (the aggregator then sums
// what landed, reading borrowed pushes where they lie, and pushes).
//
// Invariants besides "no crash, no sanitizer report":
//   - no buffer is written past its size (ASan: every buffer is exact), no
//     handler gives implausible room, every lease released was lent once;
//   - with authentication on, a frame not sealed with its shard's key is
//     refused (nothing taken) and counted in unauthenticated();
//   - a frame whose payload is not the size its header announces, or an
//     ERROR with more than kMaxErrorTextBytes of text, is refused and counted
//     in refused(), exactly once;
//   - the step fails (WaitFor) if and only if an ERROR of the current epoch
//     with a non-OK code was taken, or a receive failed (a payload larger
//     than its room): refused frames change nothing.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/layout.h"
#include "core/wire.h"
#include "fuzz/fake_transport.h"
#include "fuzz/frame_input.h"
#include "fuzz/frame_jobs.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/quiet_logs.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
// FrameSink's default OnPush names parameters it does not use; this target
// builds with -Wextra -Werror (run_fuzzers.sh), the library with defaults.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunused-parameter"
#include "worker/internal/data_channel.h"
#include "worker/internal/host_aggregator.h"
#pragma clang diagnostic pop
#include "worker/internal/job_context.h"

namespace tessel::fuzz {
namespace {

using internal::DataChannel;
using internal::HostAggregator;
using internal::JobContext;

// Waits for the PARAMS of kFuzzParamsStep: one exact-size buffer per
// (shard, bucket); PUSH frames go to the host aggregator.
class ScriptedSink : public internal::FrameSink {
 public:
  ScriptedSink(JobContext* ctx, DataChannel* channel, HostAggregator* aggregator)
      : ctx_(ctx), channel_(channel), aggregator_(aggregator) {
    for (int s = 0; s < ctx->layout->num_shards(); ++s) {
      for (int b = 0; b < ctx->layout->num_buckets(s); ++b) {
        const uint64_t bytes =
            DensePayloadBytes(ctx->layout->bucket_range(s, b).size(), ctx->half.has_value());
        buffers_.push_back(std::make_unique<std::vector<uint8_t>>(bytes));
        index_.push_back({s, b});
      }
    }
  }
  Accept OnParams(const FrameHeader& h) override {
    std::vector<uint8_t>* buffer = nullptr;
    for (size_t i = 0; i < index_.size(); ++i) {
      if (index_[i].first == h.shard && index_[i].second == h.bucket) buffer = buffers_[i].get();
    }
    FUZZ_CHECK(buffer != nullptr, absl::StrCat("the channel passed on ", DescribeHeader(h),
                                               ", which names no bucket of the layout"));
    if (h.step != kFuzzParamsStep || h.epoch != ctx_->epoch.load() ||
        h.payload_bytes != buffer->size()) {
      channel_->CountStale();
      return Accept{};
    }
    // As BucketExchange: the header's size, checked against the bucket.
    return channel_->Receive(buffer->data(), h.payload_bytes, h.epoch, [this] {
      absl::MutexLock lock(&mu_);
      ++landed_;
    });
  }
  Accept OnPush(const FrameHeader& h, const Incoming& in) override {
    return aggregator_->OnPush(h, in);
  }

 private:
  JobContext* const ctx_;
  DataChannel* const channel_;
  HostAggregator* const aggregator_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers_;
  std::vector<std::pair<int, int>> index_;
  absl::Mutex mu_;
  int landed_ ABSL_GUARDED_BY(mu_) = 0;
};

std::string Secret(int shard) {
  return std::string(kJobSecretBytes, static_cast<char>('k' + shard));
}

}  // namespace
}  // namespace tessel::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) { return tessel::fuzz::QuietLogs(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  using namespace tessel::fuzz;
  const uint8_t config = ConfigByte(data, size);
  const bool auth_on = (config & kWorkerAuth) != 0;
  const bool half = (config & kWorkerHalf) != 0;
  const bool host_group = (config & kWorkerHostGroup) != 0 && !half;  // aggregation is fp32

  WorkerOptions o;
  o.job = kFuzzJob;
  o.rank = (config & kWorkerRank1) != 0 ? 1 : 0;
  o.world_size = kFuzzWorld;
  o.step_timeout = absl::Seconds(1);
  JobContext ctx(o);
  ctx.epoch = kFuzzEpoch;
  absl::StatusOr<Layout> layout =
      Layout::Create({{"w", {kFuzzElements}}}, kFuzzWorkerShards, kFuzzAlign, kFuzzBucketElements);
  FUZZ_CHECK(layout.ok(), layout.status().ToString());
  ctx.layout = std::make_unique<Layout>(*std::move(layout));
  if (half) ctx.half = HalfType::kBF16;

  auto owned_transport = std::make_unique<FakeTransport>();
  FakeTransport& transport = *owned_transport;
  DataChannel channel(&ctx, std::move(owned_transport));
  channel.SetShards(kFuzzWorkerShards);
  // The peers' keys (runtime/rank_keys.h): each shard server's, and those
  // of the other rank of this host (rank secret and the host group's).
  const int me = o.rank;
  const int other = 1 - me;
  std::vector<std::shared_ptr<JobFrameKeys>> servers(kFuzzWorkerShards);
  std::vector<std::shared_ptr<const RankFrameKeys>> other_keys(kFuzzWorkerShards);
  std::vector<FrameKeyGrant> grants(kFuzzWorkerShards);
  for (int s = 0; s < kFuzzWorkerShards; ++s) {
    channel.SetPeer(s, *transport.Connect(""));
    if (!auth_on) continue;
    servers[static_cast<size_t>(s)] = *JobFrameKeys::Create(Secret(s), ctx.job_id, s);
    JobFrameKeys& server = *servers[static_cast<size_t>(s)];
    const std::string host = host_group ? server.HostSecret(0, kFuzzEpoch) : "";
    grants[static_cast<size_t>(s)] = {server.RankSecret(me, kFuzzEpoch), host};
    other_keys[static_cast<size_t>(s)] = *RankFrameKeys::Create(
        {server.RankSecret(other, kFuzzEpoch), host}, ctx.job_id, s, other, kFuzzEpoch);
  }
  if (auth_on) {
    absl::Status set = channel.SetFrameKeys(grants);
    FUZZ_CHECK(set.ok(), set.ToString());
  }
  HostAggregator aggregator(&ctx, &channel);
  aggregator.Configure(host_group ? std::vector<int>{0, 0} : std::vector<int>{});
  ScriptedSink sink(&ctx, &channel, &aggregator);
  channel.SetSink(&sink);

  bool expect_failure = false;
  std::string trace;  // shown by --repro (TESSEL_FUZZ_SHOW_INPUT)
  ForEachFrame(data, size, [&](const FuzzFrame& f) {
    std::vector<uint8_t> header = f.header;
    absl::StatusOr<FrameHeader> decoded = header.size() >= kHeaderBytes
                                              ? DecodeHeader(header.data(), kHeaderBytes)
                                              : absl::InvalidArgumentError("short");
    // Sealed as its legitimate sender would: a server's PARAMS or ERROR to
    // this rank under the down key, the host's other rank's PUSH, PULL,
    // READY or forwarded PARAMS under the host key; nothing else has a key
    // (another job, shard, epoch or rank).
    bool sealable = false;
    if (auth_on && f.seal() && decoded.ok() && decoded->job_id == ctx.job_id &&
        decoded->shard >= 0 && decoded->shard < kFuzzWorkerShards && decoded->epoch == kFuzzEpoch) {
      const size_t s = static_cast<size_t>(decoded->shard);
      const bool from_server =
          (decoded->type == FrameType::kParams || decoded->type == FrameType::kError) &&
          decoded->rank == me;
      const bool from_host = host_group && decoded->rank == other &&
                             decoded->type != FrameType::kError &&
                             decoded->type != FrameType::kInit;
      if (from_server || from_host) {
        const SealedHeader wire = from_server ? servers[s]->SealToWorker(*decoded)
                                              : other_keys[s]->Seal(*decoded, /*to_worker=*/true);
        header.assign(wire.begin(), wire.end());
        sealable = true;
      }
    }
    const uint64_t payload_bytes = f.PayloadBytes(decoded.ok() ? decoded->payload_bytes : 0);
    // The header DataChannel decodes: the first 64 bytes of 64 or 80.
    absl::StatusOr<FrameHeader> wire_header = DecodeWireHeader(absl::MakeConstSpan(header));
    const bool authentic = wire_header.ok() && (!auth_on || sealable);

    const int64_t refused_before = channel.refused();
    const int64_t unauthenticated_before = channel.unauthenticated();
    const FakeTransport::Outcome out =
        transport.Deliver(f.target_bits() + 1, header, payload_bytes, f.content, f.in_place());
    const int64_t refused = channel.refused() - refused_before;
    const int64_t unauthenticated = channel.unauthenticated() - unauthenticated_before;
    absl::StrAppend(&trace, wire_header.ok() ? DescribeHeader(*wire_header) : "(undecodable)",
                    sealable ? " sealed" : "", " payload ", payload_bytes,
                    f.in_place() ? " in place" : "", ": ",
                    out.written     ? "written"
                    : out.borrowed  ? "borrowed"
                    : out.too_large ? "too large"
                                    : "no payload taken",
                    refused > 0 ? ", refused" : "", unauthenticated > 0 ? ", unauthenticated" : "",
                    "\n");

    if (wire_header.ok() && auth_on && !sealable) {
      FUZZ_CHECK(unauthenticated == 1 && !out.written && !out.borrowed,
                 absl::StrCat("a frame without its shard's key was not refused as such: ",
                              DescribeHeader(*wire_header)));
    }
    if (!authentic) return;
    const FrameHeader& h = *wire_header;
    const bool size_lies = payload_bytes != h.payload_bytes;
    const bool long_error = h.type == FrameType::kError && payload_bytes > kMaxErrorTextBytes;
    if (size_lies || long_error) {
      FUZZ_CHECK(refused == 1 && !out.written && !out.borrowed,
                 absl::StrCat(DescribeHeader(h), " with ", payload_bytes,
                              " payload bytes was not refused and counted once (refused ", refused,
                              ", unauthenticated ", unauthenticated, ")"));
      return;
    }
    FUZZ_CHECK(refused == 0, absl::StrCat(DescribeHeader(h), " counted as refused"));
    if (h.type == FrameType::kError && h.epoch == kFuzzEpoch && h.code != 0) {
      expect_failure = true;
    }
    if (out.too_large) expect_failure = true;
  });
  if (host_group && (config & kWorkerOwnReady) != 0) {
    // This worker's own gradients: the aggregator sums every bucket whose
    // member pushes are in (reading borrowed ones in place) and pushes it.
    std::vector<float> grads(static_cast<size_t>(kFuzzElements), 0.5f);
    for (int s = 0; s < kFuzzWorkerShards; ++s) {
      for (int b = 0; b < ctx.layout->num_buckets(s); ++b) {
        if (aggregator.Aggregates(s, b)) {
          aggregator.OwnReady(s, b, grads.data() + ctx.layout->bucket_range(s, b).begin);
        }
      }
    }
    transport.RunCompletions();
  }
  const absl::Status step =
      channel.WaitFor([] { return true; }, [] { return std::string("fuzz"); });
  ShowGeneratedInput(absl::StrCat("config ", static_cast<int>(config), "\n", trace, "stale ",
                                  channel.stale_dropped(), ", sent ", transport.sent_count(),
                                  ", step: ", step.ToString()));
  FUZZ_CHECK(step.ok() != expect_failure,
             absl::StrCat("the step ", step.ok() ? "did not fail" : "failed", " (", step.ToString(),
                          "), but ", expect_failure ? "a" : "no",
                          " refusal of the current epoch or failed receive came"));
  return 0;
}
