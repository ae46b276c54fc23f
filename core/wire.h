// Data-path frame header: the fixed 64-byte header every UCX data message
// carries in front of (not inside) its payload.
//
// Layout (little-endian, offsets in bytes):
//    0 u32 magic 'TSL1'      4 u16 version (1)    6 u16 type (FrameType)
//    8 u64 job_id            16 i64 epoch         24 i64 step
//   32 i32 rank              36 i32 shard         40 i32 bucket
//   44 i32 code (ERROR: absl::StatusCode; else 0)
//   48 u64 payload_bytes     56 u32 bucket_count (PULL, PARAMS, PUSH, RELEASE)
//   60 u32 flags (PUSH: kFrameHoldUpdate; else 0)
//
// job_id is JobId(job name), so the header stays fixed-size. Decode checks
// only the header's own consistency; whether it fits a job (epoch, step, size)
// is the receiver's business. See docs/wire-protocol.md.
//
// Example:
//   FrameHeader h{FrameType::kPush, JobId("mlp"), epoch, step, rank, shard, b};
//   h.payload_bytes = n * sizeof(float);
//   HeaderBytes bytes = EncodeHeader(h);
//   absl::StatusOr<FrameHeader> back = DecodeHeader(bytes.data(), bytes.size());
#ifndef TESSEL_CORE_WIRE_H_
#define TESSEL_CORE_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

enum class FrameType : uint16_t {
  kPush = 1,    // worker -> server: gradient bucket for (step, rank, shard, bucket)
  kPull = 2,    // worker -> server: send me shard's params once `step` updates are applied
  kParams = 3,  // server -> worker: parameter bucket after `step` updates
  kInit = 4,    // worker rank 0 -> server: initial parameter bucket (step 0)
  kError = 5,   // either way: the frame named by the header was refused; payload = message
  kReady = 6,   // worker -> worker of its host: takes host-aggregation pushes of `epoch`
  // Clipping by the job-wide gradient norm (server/step_hold.h): a step whose
  // pushes carry kFrameHoldUpdate is reduced but not applied until RELEASE.
  kNormAsk = 7,  // worker -> server: this shard's share of the norm of held step `step`
  kNorm = 8,     // server -> worker: the answer, payload = GradNormStats (kNormPayloadBytes)
  kRelease = 9,  // worker -> server: apply held step `step`; bucket_count = the
                 // float bits of its gradient multiplier (0: the step's settings)
};

// FrameHeader::flags of a PUSH: the step's update waits for a RELEASE (every
// push of a step carries the same flags). No other bit is defined.
inline constexpr uint32_t kFrameHoldUpdate = 1;
// A NORM frame's payload: sum of squares, sum of magnitudes and largest
// magnitude of the shard's share of the step's mean gradient (3 x f64).
inline constexpr uint64_t kNormPayloadBytes = 24;

inline constexpr uint32_t kFrameMagic = 0x314C5354;  // "TSL1" little-endian
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kHeaderBytes = 64;
// The longest ERROR text (its payload) a sender writes and a receiver
// takes: servers cut longer messages to this, workers drop an ERROR frame
// announcing more (docs/wire-protocol.md).
inline constexpr uint64_t kMaxErrorTextBytes = 4096;
// FrameHeader::bucket_count of a PUSH that is a micro-batch part: kPushPart
// + the part's index in its step (0, 1, ...; at most kMaxPushParts parts a
// step), so a server takes each part once (a replayed part is refused).
inline constexpr uint32_t kPushPart = 1;
inline constexpr uint32_t kMaxPushParts = 4096;
inline constexpr uint32_t PushPartCount(uint32_t index) { return kPushPart + index; }

struct FrameHeader {
  FrameType type = FrameType::kPush;
  uint64_t job_id = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int32_t rank = 0;
  int32_t shard = 0;
  int32_t bucket = 0;
  int32_t code = 0;
  uint64_t payload_bytes = 0;
  // PULL: buckets [bucket, bucket + bucket_count) of the shard; 0 asks only
  // to be told (an empty PARAMS frame) when the shard reaches `step`.
  // PARAMS: echoes the PULL's count. PUSH: 0 is the push itself;
  // PushPartCount(i) marks micro-batch part i of the step (summed on the
  // server into the rank's push of that bucket and step, which completes
  // nothing). RELEASE: the gradient multiplier's float bits (0: keep the
  // step's). Zero in every other frame.
  uint32_t bucket_count = 0;
  // PUSH: kFrameHoldUpdate or 0. Zero in every other frame.
  uint32_t flags = 0;
};

// Whether `h` is a micro-batch part, and its index in the step.
inline bool IsPushPart(const FrameHeader& h) {
  return h.type == FrameType::kPush && h.bucket_count >= kPushPart;
}
inline uint32_t PushPartIndex(const FrameHeader& h) { return h.bucket_count - kPushPart; }

using HeaderBytes = std::array<uint8_t, kHeaderBytes>;

// A header of `type` about (job, epoch, step, rank, shard, bucket), every
// other field zero: the one place workers and servers assemble headers.
FrameHeader MakeHeader(FrameType type, uint64_t job_id, int64_t epoch, int64_t step, int32_t rank,
                       int32_t shard, int32_t bucket);

// Bytes of one element of a dense payload: PUSH gradients and PARAMS
// parameters travel in the job's precision (2 for fp16/bf16, 4 for fp32);
// INIT and state frames carry fp32 masters (half = false).
inline constexpr uint64_t WireElementBytes(bool half) { return half ? 2 : 4; }
// Bytes of a dense payload of `elements` elements.
inline constexpr uint64_t DensePayloadBytes(int64_t elements, bool half) {
  return static_cast<uint64_t>(elements) * WireElementBytes(half);
}

HeaderBytes EncodeHeader(const FrameHeader& h);

// InvalidArgument for a wrong size, magic, version, unknown type, unknown
// flags (or flags on a frame other than PUSH) or an error code out of range.
absl::StatusOr<FrameHeader> DecodeHeader(const void* data, size_t size);

// Stable 64-bit id of a job name (FNV-1a); the same in every process and build.
uint64_t JobId(absl::string_view job);

const char* FrameTypeName(FrameType t);
std::string DescribeHeader(const FrameHeader& h);

}  // namespace tessel

#endif  // TESSEL_CORE_WIRE_H_
