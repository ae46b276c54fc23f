#include "core/wire.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "wire format assumes a little-endian host");

template <typename T>
void Put(uint8_t* out, size_t offset, T v) {
  std::memcpy(out + offset, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* in, size_t offset) {
  T v;
  std::memcpy(&v, in + offset, sizeof(T));
  return v;
}

}  // namespace

FrameHeader MakeHeader(FrameType type, uint64_t job_id, int64_t epoch, int64_t step, int32_t rank,
                       int32_t shard, int32_t bucket) {
  FrameHeader h;
  h.type = type;
  h.job_id = job_id;
  h.epoch = epoch;
  h.step = step;
  h.rank = rank;
  h.shard = shard;
  h.bucket = bucket;
  return h;
}

HeaderBytes EncodeHeader(const FrameHeader& h) {
  HeaderBytes b{};
  Put<uint32_t>(b.data(), 0, kFrameMagic);
  Put<uint16_t>(b.data(), 4, kWireVersion);
  Put<uint16_t>(b.data(), 6, static_cast<uint16_t>(h.type));
  Put<uint64_t>(b.data(), 8, h.job_id);
  Put<int64_t>(b.data(), 16, h.epoch);
  Put<int64_t>(b.data(), 24, h.step);
  Put<int32_t>(b.data(), 32, h.rank);
  Put<int32_t>(b.data(), 36, h.shard);
  Put<int32_t>(b.data(), 40, h.bucket);
  Put<int32_t>(b.data(), 44, h.code);
  Put<uint64_t>(b.data(), 48, h.payload_bytes);
  Put<uint32_t>(b.data(), 56, h.bucket_count);
  Put<uint32_t>(b.data(), 60, h.flags);
  return b;
}

absl::StatusOr<FrameHeader> DecodeHeader(const void* data, size_t size) {
  if (size != kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header is ", size, " bytes; expected ", kHeaderBytes));
  }
  const uint8_t* in = static_cast<const uint8_t*>(data);
  if (Get<uint32_t>(in, 0) != kFrameMagic) {
    return absl::InvalidArgumentError("frame header has a bad magic number (not a Tessel frame)");
  }
  const uint16_t version = Get<uint16_t>(in, 4);
  if (version != kWireVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame wire version ", version, " is not supported; this build speaks ", kWireVersion));
  }
  const uint16_t type = Get<uint16_t>(in, 6);
  if (type < static_cast<uint16_t>(FrameType::kPush) ||
      type > static_cast<uint16_t>(FrameType::kRelease)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown frame type ", type));
  }
  const uint32_t flags = Get<uint32_t>(in, 60);
  if (flags != 0 &&
      (type != static_cast<uint16_t>(FrameType::kPush) || flags != kFrameHoldUpdate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header flags ", flags,
                     ": only a PUSH carries flags, and only kFrameHoldUpdate (1)"));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.job_id = Get<uint64_t>(in, 8);
  h.epoch = Get<int64_t>(in, 16);
  h.step = Get<int64_t>(in, 24);
  h.rank = Get<int32_t>(in, 32);
  h.shard = Get<int32_t>(in, 36);
  h.bucket = Get<int32_t>(in, 40);
  h.code = Get<int32_t>(in, 44);
  h.payload_bytes = Get<uint64_t>(in, 48);
  h.bucket_count = Get<uint32_t>(in, 56);
  h.flags = flags;
  if (h.type == FrameType::kPush && h.bucket_count >= PushPartCount(kMaxPushParts)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PUSH bucket count ", h.bucket_count, ": 0 (the push) or ", kPushPart,
                     " + a part index below ", kMaxPushParts, " (a part)"));
  }
  if (h.bucket_count != 0 && h.type != FrameType::kPull && h.type != FrameType::kParams &&
      h.type != FrameType::kError && h.type != FrameType::kPush && h.type != FrameType::kRelease) {
    return absl::InvalidArgumentError(
        absl::StrCat(FrameTypeName(h.type), " frames carry no bucket count"));
  }
  if (h.code < 0 || h.code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame error code ", h.code, " is out of range"));
  }
  return h;
}

uint64_t JobId(absl::string_view job) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : job) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

const char* FrameTypeName(FrameType t) {
  switch (t) {
    case FrameType::kPush:
      return "PUSH";
    case FrameType::kPull:
      return "PULL";
    case FrameType::kParams:
      return "PARAMS";
    case FrameType::kInit:
      return "INIT";
    case FrameType::kError:
      return "ERROR";
    case FrameType::kReady:
      return "READY";
    case FrameType::kNormAsk:
      return "NORM_ASK";
    case FrameType::kNorm:
      return "NORM";
    case FrameType::kRelease:
      return "RELEASE";
  }
  return "?";
}

std::string DescribeHeader(const FrameHeader& h) {
  return absl::StrCat(FrameTypeName(h.type), "(epoch=", h.epoch, " step=", h.step, " rank=", h.rank,
                      " shard=", h.shard, " bucket=", h.bucket, " bytes=", h.payload_bytes,
                      h.bucket_count ? absl::StrCat(" count=", h.bucket_count) : "",
                      h.flags ? absl::StrCat(" flags=", h.flags) : "", ")");
}

}  // namespace tessel
