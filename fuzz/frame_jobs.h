// The small jobs the frame-handler fuzz targets run (data_plane,
// worker_frames), and their configuration bytes, in one place for the targets and make_corpus.cc,
// which writes their seeds: one tensor of kFuzzElements fp32 (or half) elements, buckets of
// kFuzzBucketElements, alignment 4, kFuzzWorld ranks, epoch kFuzzEpoch.
#ifndef TESSEL_FUZZ_FRAME_JOBS_H_
#define TESSEL_FUZZ_FRAME_JOBS_H_

#include <cstdint>

#include "worker/peer_message.h"

namespace tessel::fuzz {

inline constexpr char kFuzzJob[] = "fz";
inline constexpr int64_t kFuzzEpoch = 2;
inline constexpr int64_t kFuzzElements = 40;
inline constexpr int64_t kFuzzBucketElements = 16;  // buckets of 16, 16, 8
inline constexpr int64_t kFuzzAlign = 4;
inline constexpr int kFuzzWorld = 2;

// data_plane's configuration byte (the input's first).
inline constexpr uint8_t kPlaneAuth = 1;      // --data_auth on (FrameKeys enabled)
inline constexpr uint8_t kPlaneStrategy = 6;  // bits 1-2: 0 ddp, 1 zero1, 2-3 zero2
inline constexpr uint8_t kPlaneHalf = 8;      // bf16 tensors (mixed precision on the wire)
inline constexpr uint8_t kPlaneTopk = 16;     // top-k compressed pushes (fp32 only)
inline constexpr uint8_t kPlaneFold = 32;     // ShardJob folds ranks in prefix order
inline constexpr uint8_t kPlaneInline = 64;   // buckets update on the transport's thread

// worker_frames: the worker's layout has kFuzzWorkerShards shards (the same
// tensor and buckets), so frames can name a shard it does not have. Its
// configuration byte:
inline constexpr int kFuzzWorkerShards = 2;
inline constexpr int64_t kFuzzParamsStep = 1;   // the step whose PARAMS the worker waits for
inline constexpr uint8_t kWorkerAuth = 1;       // every shard authenticates frames
inline constexpr uint8_t kWorkerHalf = 2;       // bf16 on the wire (PARAMS in half)
inline constexpr uint8_t kWorkerHostGroup = 4;  // ranks 0 and 1 share a host (aggregation)
inline constexpr uint8_t kWorkerRank1 = 8;      // this worker is rank 1 (else 0)
inline constexpr uint8_t kWorkerOwnReady = 16;  // then its own gradients are ready (sums)

// peer_group: a group of kFuzzPeers ranks named kFuzzMesh. Its
// configuration byte:
inline constexpr char kFuzzMesh[] = "fz.mesh";
inline constexpr int kFuzzPeers = 3;
inline constexpr uint64_t kFuzzPeerMaxMessage = 64;  // the small bounds
inline constexpr uint64_t kFuzzPeerMaxInbox = 160;
inline constexpr uint64_t kFuzzPeerLargeMaxMessage = uint64_t{1} << 20;  // the larger bounds
inline constexpr uint64_t kFuzzPeerLargeMaxInbox = uint64_t{4} << 20;
inline constexpr uint8_t kPeerAuth = 1;         // SetAuth: messages carry the mesh key's tag
inline constexpr uint8_t kPeerSmallBounds = 2;  // the small bounds above, else the larger
inline constexpr uint8_t kPeerRank = 12;        // bits 2-3: this rank (3 reads as 0)
inline constexpr uint8_t kPeerReset = 16;       // Reset(kFuzzPeerReset) before the messages
// The generation kPeerReset starts: a later epoch and a later round than {0, 0}.
inline constexpr PeerGeneration kFuzzPeerReset{1, 2};
// A frame's target bit (frame_input.h): its header keeps the group id it has
// (else the target stamps the group's own).
inline constexpr uint8_t kForeignGroup = 8;

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_FRAME_JOBS_H_
