// The small jobs the frame-handler fuzz targets run (data_plane,
// worker_frames), in one place for the targets and make_corpus.cc, which
// writes their seeds: one tensor of kFuzzElements fp32 (or half) elements,
// buckets of kFuzzBucketElements, alignment 4, kFuzzWorld ranks, epoch
// kFuzzEpoch.
#ifndef TESSEL_FUZZ_FRAME_JOBS_H_
#define TESSEL_FUZZ_FRAME_JOBS_H_

#include <cstdint>

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

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_FRAME_JOBS_H_
