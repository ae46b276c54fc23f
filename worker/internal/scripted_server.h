// ScriptedServer: a stand-in for a shard server (or another worker) in the
// data-path unit tests of worker/internal: a bare in-process endpoint
// (transport/inproc) that records every frame it gets, with its sender and
// payload, and answers only what the test tells it to. Test-only.
//
// Contract:
//   - Every frame that decodes is recorded in arrival order with its sender
//     and payload; Await(n) returns once n have arrived.
//   - Reply sends a frame (sealed with a frame key if given) and its
//     payload back to a sender; the payload lives until the send completed.
//   - ConnectChannel points a DataChannel's shards at servers: shard s at
//     servers[s], with its address as the shard's name in messages.
//   - DataPathContext makes a worker's context with its layout; a layout
//     the arguments do not allow fails the test.
//
// Threads: the test's threads call everything; frames are recorded on the
// endpoint's progress thread, under a mutex.
//
// Example:
//   auto fabric = std::make_shared<InProcFabric>();
//   ScriptedServer server(fabric);
//   auto ctx = DataPathContext(WorkerOptions(), /*epoch=*/3, {{"w", {100}}}, 1, 40);
//   DataChannel channel(ctx.get(), InProcTransport::Create(fabric));
//   ASSERT_TRUE(ConnectChannel(&channel, {&server}).ok());
//   channel.Send(channel.Header(FrameType::kPull, 1, 0, 0), nullptr);
//   ScriptedServer::Frame pull = server.Await(1)[0];
//   server.Reply(pull.from, ParamsHeader(*ctx, 0, 0, 1, 160), FloatBytes(40, 1.f));
#ifndef TESSEL_WORKER_INTERNAL_SCRIPTED_SERVER_H_
#define TESSEL_WORKER_INTERNAL_SCRIPTED_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/wire.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class ScriptedServer {
 public:
  struct Frame {
    FrameHeader header;
    PeerId from = 0;
    size_t header_bytes = 0;           // kHeaderBytes, or kSealedHeaderBytes when tagged
    std::vector<uint8_t> wire_header;  // the active-message header as it came
    std::vector<uint8_t> payload;
  };

  explicit ScriptedServer(std::shared_ptr<InProcFabric> fabric);
  ~ScriptedServer();
  std::string address() const { return transport_->address(); }

  // Waits for `n` frames (or `timeout`); returns those that came.
  std::vector<Frame> Await(size_t n, absl::Duration timeout = absl::Seconds(10));
  // Sends `h` with `payload` to `to`, sealed with `auth`'s key for h.rank
  // (server to worker) if given.
  void Reply(PeerId to, const FrameHeader& h, std::vector<uint8_t> payload,
             JobFrameKeys* auth = nullptr);
  // Sends `header` as it is (a forger's bytes) with `payload` to `to`.
  void SendRaw(PeerId to, absl::Span<const uint8_t> header, std::vector<uint8_t> payload);

 private:
  std::unique_ptr<InProcTransport> transport_;
  absl::Mutex mu_;
  std::vector<Frame> frames_ ABSL_GUARDED_BY(mu_);
};

// A worker's context for the data-path tests: `o` with recovery on and a
// step timeout of 2 s, at fencing epoch `epoch`, with the layout of
// `tensors` over `shards` (alignment 4, buckets of `bucket_elems`).
std::unique_ptr<JobContext> DataPathContext(WorkerOptions o, int64_t epoch,
                                            const std::vector<TensorDesc>& tensors, int shards,
                                            int64_t bucket_elems);

// Shard s of `channel` is servers[s].
absl::Status ConnectChannel(DataChannel* channel, const std::vector<ScriptedServer*>& servers);

// A PARAMS frame of ctx's job for (shard, bucket) of `step` in the current
// epoch, `bytes` long; without bytes, the notice that the shard is at
// `step` (bucket_count 0: FsdpUnits::Barrier).
FrameHeader ParamsHeader(const JobContext& ctx, int shard, int bucket, int64_t step,
                         uint64_t bytes);
// `n` floats of value `v`, as bytes.
std::vector<uint8_t> FloatBytes(size_t n, float v);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_SCRIPTED_SERVER_H_
