// Seeds of the frame-handler fuzz targets (data_plane, worker_frames,
// peer_group), made with the real encoders (MakeHeader, EncodeHeader,
// EncodePeerHeader) in the input format of
// fuzz/frame_input.h, for the jobs of fuzz/frame_jobs.h: complete legitimate
// steps (so the fuzzer starts past the header and size checks, and reaches
// updates and served parameters), and one defect each (bad_*). Used by
// make_corpus.cc.
#ifndef TESSEL_FUZZ_FRAME_SEEDS_H_
#define TESSEL_FUZZ_FRAME_SEEDS_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/topk.h"
#include "core/wire.h"
#include "fuzz/frame_input.h"
#include "fuzz/frame_jobs.h"
#include "transport/ucx/internal/descriptor_codec.h"
#include "worker/peer_message.h"

namespace tessel::fuzz {

// An input under construction: the config byte, then frames.
class SeedInput {
 public:
  explicit SeedInput(uint8_t config) : bytes_(1, static_cast<char>(config)) {}
  // A frame of `h` with a payload of h.payload_bytes: floats counting up
  // from `base` (as many as fit), repeated by the target.
  SeedInput& Frame(const FrameHeader& h, uint8_t flags = 0, float base = 0.25f) {
    const HeaderBytes hb = EncodeHeader(h);
    std::vector<uint8_t> content(std::min<uint64_t>(h.payload_bytes, 64));
    for (size_t i = 0; i + 4 <= content.size(); i += 4) {
      const float v = base + 0.125f * static_cast<float>(i / 4);
      std::memcpy(&content[i], &v, 4);
    }
    WriteFrame(&bytes_, flags, hb.data(), hb.size(), content.data(), content.size());
    return *this;
  }
  // A frame whose payload is `content` as given (e.g. an ERROR's text).
  SeedInput& Raw(const FrameHeader& h, const std::string& content, uint8_t flags = 0) {
    const HeaderBytes hb = EncodeHeader(h);
    WriteFrame(&bytes_, flags, hb.data(), hb.size(), content.data(), content.size());
    return *this;
  }
  // A frame of `h` whose payload is `payload_bytes` long, whatever its
  // header says.
  SeedInput& Sized(const FrameHeader& h, uint64_t payload_bytes, uint8_t flags = 0) {
    const HeaderBytes hb = EncodeHeader(h);
    const std::string content(16, 'p');
    WriteFrame(&bytes_, flags, hb.data(), hb.size(), content.data(), content.size(),
               &payload_bytes);
    return *this;
  }
  // A peer-group message (worker/peer_message.h) whose payload is `content`.
  SeedInput& Peer(const PeerMessageHeader& h, const std::string& content, uint8_t flags = 0) {
    const std::vector<uint8_t> hb = EncodePeerHeader(h);
    WriteFrame(&bytes_, flags, hb.data(), hb.size(), content.data(), content.size());
    return *this;
  }
  // Header bytes as given (malformed ones).
  SeedInput& Bytes(const std::string& header, uint8_t flags = 0) {
    WriteFrame(&bytes_, flags, reinterpret_cast<const uint8_t*>(header.data()), header.size(),
               nullptr, 0);
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

inline Layout FuzzLayout() {
  return *Layout::Create({{"w", {kFuzzElements}}}, 1, kFuzzAlign, kFuzzBucketElements);
}

inline FrameHeader FuzzHeader(FrameType type, int64_t step, int rank, int bucket,
                              uint64_t payload_bytes) {
  FrameHeader h = MakeHeader(type, JobId(kFuzzJob), kFuzzEpoch, step, rank, 0, bucket);
  h.payload_bytes = payload_bytes;
  return h;
}

// data_plane: name -> input.
inline std::map<std::string, std::string> DataPlaneSeeds() {
  const Layout layout = FuzzLayout();
  const int buckets = layout.num_buckets(0);
  auto elems = [&](int b) { return layout.bucket_range(0, b).size(); };
  // A full step of the job `config` makes: rank 0's INITs (not DDP), every
  // rank's PUSH of step 0, and both ranks' PULL of step 1.
  auto step = [&](uint8_t config, uint8_t flags) {
    SeedInput in(config);
    const int strategy = (config & kPlaneStrategy) >> 1;
    const bool half = (config & kPlaneHalf) != 0;
    const bool topk = (config & kPlaneTopk) != 0;
    if (strategy != 0) {
      for (int b = 0; b < buckets; ++b) {
        in.Frame(FuzzHeader(FrameType::kInit, 0, 0, b, DensePayloadBytes(elems(b), false)), flags);
      }
    }
    for (int b = 0; b < buckets; ++b) {
      for (int r = 0; r < kFuzzWorld; ++r) {
        const uint64_t bytes =
            topk ? SparseBytes(TopkCount(0.25, elems(b))) : DensePayloadBytes(elems(b), half);
        if (topk) {  // k rising indices, then k values
          FrameHeader h = FuzzHeader(FrameType::kPush, 0, r, b, bytes);
          std::string indices, values;
          for (uint32_t i = 0; i < bytes / 8; ++i) {
            const uint32_t index = 2 * i + static_cast<uint32_t>(r);
            const float v = 0.5f + static_cast<float>(i);
            indices.append(reinterpret_cast<const char*>(&index), 4);
            values.append(reinterpret_cast<const char*>(&v), 4);
          }
          in.Raw(h, indices + values, flags);
        } else {
          in.Frame(FuzzHeader(FrameType::kPush, 0, r, b, bytes),
                   static_cast<uint8_t>(flags | (r << kTargetShift)), 0.5f + r);
        }
      }
    }
    for (int r = 0; r < kFuzzWorld; ++r) {
      FrameHeader pull = FuzzHeader(FrameType::kPull, 1, r, 0, 0);
      pull.bucket_count = static_cast<uint32_t>(buckets);
      in.Frame(pull, static_cast<uint8_t>(flags | (r << kTargetShift)));
    }
    return in.str();
  };
  std::map<std::string, std::string> seeds;
  const uint8_t zero2 = 4 << 0, zero1 = 2, ddp = 0;
  seeds["step_ddp"] = step(ddp | kPlaneInline, 0);
  seeds["step_zero1"] = step(zero1 | kPlaneInline, 0);
  seeds["step_zero2"] = step(zero2, 0);
  seeds["step_zero2_fold"] = step(zero2 | kPlaneFold | kPlaneInline, 0);
  seeds["step_zero2_bf16"] = step(zero2 | kPlaneHalf | kPlaneInline, 0);
  seeds["step_ddp_topk"] = step(ddp | kPlaneTopk | kPlaneInline, 0);
  seeds["step_zero2_in_place"] = step(zero2 | kPlaneInline, kInPlace);
  seeds["step_zero2_auth"] = step(zero2 | kPlaneAuth | kPlaneInline, kSeal);
  seeds["step_ddp_auth_in_place"] = step(ddp | kPlaneAuth | kPlaneInline, kSeal | kInPlace);
  // Forgeries: the same step unsealed under authentication.
  seeds["bad_step_unsealed"] = step(zero2 | kPlaneAuth | kPlaneInline, 0);

  const uint64_t b0 = DensePayloadBytes(elems(0), false);
  FrameHeader error = FuzzHeader(FrameType::kError, 0, 0, 0, 17);
  error.code = 9;
  FrameHeader other_job = FuzzHeader(FrameType::kPush, 0, 0, 0, b0);
  other_job.job_id = JobId("other");
  FrameHeader old_epoch = FuzzHeader(FrameType::kPush, 0, 0, 0, b0);
  old_epoch.epoch = kFuzzEpoch - 1;
  FrameHeader bad_rank = FuzzHeader(FrameType::kPush, 0, kFuzzWorld, 0, b0);
  FrameHeader bad_bucket = FuzzHeader(FrameType::kPush, 0, 0, buckets, b0);
  FrameHeader big = FuzzHeader(FrameType::kPush, 0, 0, 0, uint64_t{1} << 40);
  FrameHeader part = FuzzHeader(FrameType::kPush, 0, 1, 0, b0);
  part.bucket_count = PushPartCount(0);
  FrameHeader params = FuzzHeader(FrameType::kParams, 0, 0, 0, b0);
  FrameHeader pull_many = FuzzHeader(FrameType::kPull, 1, 0, 0, 0);
  pull_many.bucket_count = 1u << 30;
  std::string bad_magic(reinterpret_cast<const char*>(EncodeHeader(other_job).data()),
                        kHeaderBytes);
  bad_magic[0] = 'X';
  seeds["bad_frames"] = SeedInput(ddp)
                            .Raw(error, "refused by the fuzzer")
                            .Frame(other_job)
                            .Frame(old_epoch)
                            .Frame(bad_rank)
                            .Frame(bad_bucket)
                            .Frame(big)
                            .Frame(params)
                            .Frame(pull_many)
                            .Bytes(bad_magic)
                            .Bytes(std::string(10, '\0'))
                            .str();
  seeds["bad_frames_auth"] = SeedInput(zero2 | kPlaneAuth)
                                 .Raw(error, "refused by the fuzzer", kSeal)
                                 .Frame(other_job, kSeal)
                                 .Frame(big, kSeal)
                                 .Frame(bad_rank, kSeal)
                                 .Bytes(bad_magic, kSeal)
                                 .str();
  seeds["parts_replayed"] = SeedInput(ddp | kPlaneInline)
                                .Frame(part, 1 << kTargetShift)
                                .Frame(part, 1 << kTargetShift)
                                .str();
  return seeds;
}

// worker_frames: name -> input.
inline std::map<std::string, std::string> WorkerFramesSeeds() {
  const Layout layout =
      *Layout::Create({{"w", {kFuzzElements}}}, kFuzzWorkerShards, kFuzzAlign, kFuzzBucketElements);
  auto header = [&](FrameType type, int64_t step, int rank, int shard, int bucket,
                    uint64_t payload_bytes) {
    FrameHeader h = MakeHeader(type, JobId(kFuzzJob), kFuzzEpoch, step, rank, shard, bucket);
    h.payload_bytes = payload_bytes;
    return h;
  };
  // The PARAMS of every bucket of step kFuzzParamsStep, as the servers send them.
  auto params = [&](uint8_t config, uint8_t flags) {
    SeedInput in(config);
    const bool half = (config & kWorkerHalf) != 0;
    for (int s = 0; s < kFuzzWorkerShards; ++s) {
      for (int b = 0; b < layout.num_buckets(s); ++b) {
        FrameHeader h = header(FrameType::kParams, kFuzzParamsStep, 0, s, b,
                               DensePayloadBytes(layout.bucket_range(s, b).size(), half));
        h.bucket_count = static_cast<uint32_t>(layout.num_buckets(s));
        in.Frame(h, static_cast<uint8_t>(flags | (s << kTargetShift)));
      }
    }
    return in;
  };
  // The other rank of the host: READY, its PUSH of every bucket (step 0),
  // its PULL.
  auto host = [&](uint8_t config, uint8_t flags) {
    SeedInput in(config);
    const int other = (config & kWorkerRank1) != 0 ? 0 : 1;
    const uint8_t from = static_cast<uint8_t>((kFuzzWorkerShards + other) << kTargetShift);
    in.Frame(header(FrameType::kReady, 0, other, 0, 0, 0), static_cast<uint8_t>(flags | from));
    for (int s = 0; s < kFuzzWorkerShards; ++s) {
      for (int b = 0; b < layout.num_buckets(s); ++b) {
        in.Frame(header(FrameType::kPush, 0, other, s, b,
                        DensePayloadBytes(layout.bucket_range(s, b).size(), false)),
                 static_cast<uint8_t>(flags | from), 1.5f);
      }
    }
    in.Frame(header(FrameType::kPull, kFuzzParamsStep, other, 0, 0, 0),
             static_cast<uint8_t>((flags & kSeal) | from));
    return in;
  };
  std::map<std::string, std::string> seeds;
  seeds["params"] = params(0, 0).str();
  seeds["params_bf16"] = params(kWorkerHalf, 0).str();
  seeds["params_in_place"] = params(0, kInPlace).str();
  seeds["params_auth"] = params(kWorkerAuth, kSeal).str();
  seeds["host_rank0"] = host(kWorkerHostGroup | kWorkerOwnReady, 0).str();
  seeds["host_rank0_in_place"] = host(kWorkerHostGroup | kWorkerOwnReady, kInPlace).str();
  seeds["host_rank1_auth"] =
      host(kWorkerHostGroup | kWorkerOwnReady | kWorkerRank1 | kWorkerAuth, kSeal).str();
  seeds["bad_params_unsealed"] = params(kWorkerAuth, 0).str();

  const uint64_t b0 = DensePayloadBytes(layout.bucket_range(0, 0).size(), false);
  FrameHeader error = header(FrameType::kError, kFuzzParamsStep, 0, 0, 0, 21);
  error.code = 10;  // ABORTED
  FrameHeader old_error = error;
  old_error.epoch = kFuzzEpoch - 1;
  FrameHeader long_error = error;
  long_error.payload_bytes = kMaxErrorTextBytes + 1;
  FrameHeader p0 = header(FrameType::kParams, kFuzzParamsStep, 0, 0, 0, b0);
  FrameHeader big = header(FrameType::kParams, kFuzzParamsStep, 0, 0, 0, uint64_t{1} << 40);
  FrameHeader no_shard = header(FrameType::kParams, kFuzzParamsStep, 0, kFuzzWorkerShards, 0, b0);
  FrameHeader old_step = header(FrameType::kParams, 0, 0, 0, 0, b0);
  FrameHeader other_job = p0;
  other_job.job_id = JobId("other");
  seeds["error"] = SeedInput(0).Raw(error, "the shard refused the pull").str();
  seeds["error_old_epoch"] = SeedInput(0).Raw(old_error, "the shard refused the pull").str();
  seeds["bad_error_long"] = SeedInput(0).Sized(long_error, kMaxErrorTextBytes + 1).str();
  seeds["bad_sizes"] = SeedInput(0)
                           .Sized(p0, b0 + 4)
                           .Sized(p0, b0 - 4)
                           .Sized(p0, 0)
                           .Frame(big)
                           .Sized(big, 64, kInPlace)
                           .Frame(no_shard)
                           .Frame(old_step)
                           .Frame(other_job)
                           .str();
  return seeds;
}

// peer_group: name -> input.
inline std::map<std::string, std::string> PeerGroupSeeds() {
  auto message = [](int from, PeerGeneration generation, uint64_t tag, size_t bytes) {
    PeerMessageHeader h;
    h.group_id = 0;  // the target stamps the group's own id
    h.from = from;
    h.generation = generation;
    h.tag = tag;
    h.payload_bytes = bytes;
    return h;
  };
  // Rank 0's view: messages from ranks 1 and 2 (activations, gradients, text).
  auto exchange = [&](uint8_t config, uint8_t flags, PeerGeneration generation) {
    SeedInput in(config);
    const std::string acts(48, 'a'), grads(32, 'g'), text = "config of stage 1";
    in.Peer(message(1, generation, 0x100000001, acts.size()), acts, flags);
    in.Peer(message(2, generation, 0x100000002, grads.size()), grads, flags);
    in.Peer(message(1, generation, 7, text.size()), text, flags);
    in.Peer(message(2, generation, 8, 0), "", flags);
    return in.str();
  };
  std::map<std::string, std::string> seeds;
  seeds["exchange"] = exchange(0, 0, {});
  seeds["exchange_small_bounds"] = exchange(kPeerSmallBounds, 0, {});
  seeds["exchange_auth"] = exchange(kPeerAuth, kSeal, {});
  seeds["exchange_reset"] = exchange(kPeerReset | kPeerAuth, kSeal, kFuzzPeerReset);
  seeds["exchange_rank2"] = SeedInput(static_cast<uint8_t>(2 << 2))
                                .Peer(message(0, {}, 3, 5), "hello")
                                .Peer(message(1, {}, 3, 5), "hello")
                                .str();
  seeds["bad_unsealed"] = exchange(kPeerAuth, 0, {});
  seeds["bad_old_generation"] = exchange(kPeerReset, 0, {kFuzzPeerReset.epoch, 0});
  PeerMessageHeader other_group = message(1, {}, 1, 4);
  other_group.group_id = JobId("other.mesh");
  seeds["bad_messages"] = SeedInput(kPeerSmallBounds)
                              .Peer(other_group, "abcd", kForeignGroup << kTargetShift)
                              .Peer(message(0, {}, 1, 4), "self")
                              .Peer(message(3, {}, 1, 4), "none")
                              .Peer(message(1, {}, 1, 5), "four")
                              .Peer(message(1, {}, 2, kFuzzPeerMaxMessage + 1), "big")
                              .Peer(message(1, {}, 3, kFuzzPeerMaxMessage), "full")
                              .Peer(message(2, {}, 3, kFuzzPeerMaxMessage), "full")
                              .Peer(message(1, {}, 4, kFuzzPeerMaxMessage), "over the inbox")
                              .Peer(message(1, {}, 3, 4), "again")
                              .str();
  return seeds;
}

// ucx_receiver: name -> input. A frame's target bits: operation | endpoint << 2
// (see ucx_receiver_fuzzer.cc).
inline std::map<std::string, std::string> UcxReceiverSeeds() {
  auto frame = [](std::string* out, int op, int endpoint, uint8_t flags,
                  const std::vector<uint8_t>& am_header) {
    WriteFrame(out, static_cast<uint8_t>(flags | ((op | endpoint << 2) << kTargetShift)),
               am_header.data(), am_header.size(), nullptr, 0);
  };
  const FrameHeader push = FuzzHeader(FrameType::kPush, 0, 1, 0, 256);
  const HeaderBytes hb = EncodeHeader(push);
  const std::vector<uint8_t> header(hb.begin(), hb.end());
  auto descriptor = [&](uint64_t lease, uint64_t region, uint64_t region_bytes, uint64_t offset,
                        uint64_t bytes, uint8_t key = 7) {
    ucx_internal::DescriptorFields f;
    f.lease = lease;
    f.region = region;
    f.remote_base = 0x7f0000000000 + (region << 20);
    f.region_bytes = region_bytes;
    f.offset = offset;
    f.bytes = bytes;
    return ucx_internal::EncodeDescriptor(f, header, std::vector<uint8_t>(41, key));
  };
  auto release = [](uint64_t lease_or_index, ucx_internal::ReleaseStatus status) {
    return ucx_internal::EncodeRelease({lease_or_index, status});
  };
  using Status = ucx_internal::ReleaseStatus;
  std::map<std::string, std::string> seeds;
  std::string s(1, '\0');
  frame(&s, 2, 0, 0, {});                                       // this side sends to endpoint 0
  frame(&s, 0, 0, kInPlace, descriptor(11, 1, 4096, 64, 256));  // endpoint 0's push, borrowed
  frame(&s, 0, 0, 0, descriptor(12, 1, 4096, 3840, 256));       // the same region, copied
  frame(&s, 3, 0, 0, {});                                       // the borrow ends
  frame(&s, 1, 1, kSeal, release(0, Status::kReadInPlace));     // endpoint 1 releases lease 0
  frame(&s, 1, 0, kSeal, release(0, Status::kReadInPlace));     // its peer does
  frame(&s, 1, 0, kSeal, release(0, Status::kReadInPlace));     // again
  seeds["borrow_release"] = s;
  s.assign(1, '\0');
  frame(&s, 0, 1, kInPlace, descriptor(21, 5, 4096, 0, 4096));
  frame(&s, 0, 1, 0, descriptor(22, 5, 8192, 4096, 4096));  // re-described larger: refused
  frame(&s, 0, 1, 0, descriptor(23, 5, 4096, 4095, 2));     // outside: not decoded
  frame(&s, 3, 1, kSeal, {});                               // endpoint 1's worker is reset
  frame(&s, 3, 1, 0, {});                                   // the borrow ends after it
  seeds["redescribed_retired"] = s;
  s.assign(1, '\0');
  for (uint64_t r = 1; r <= 20; ++r)
    frame(&s, 0, 2, r % 5 == 0 ? kInPlace : 0, descriptor(r, r, 1024, 0, 512));
  frame(&s, 3, 2, 0, {});
  frame(&s, 3, 3, 0, {});  // time moves: idle keys go
  frame(&s, 3, 3, 0, {});
  frame(&s, 3, 3, 0, {});
  frame(&s, 3, 3, 0, {});
  frame(&s, 0, 2, 0, descriptor(40, 40, 1024, 0, 512));
  seeds["many_regions"] = s;
  s.assign(1, '\0');
  frame(&s, 0, 3, 0, descriptor(1, 1, uint64_t{1} << 40, 0, 4096));  // not mappable here
  frame(&s, 0, 3, 0, descriptor(2, 2, 4096, 0, 4096, 0xff));         // not unpackable
  frame(&s, 0, 3, 0, descriptor(3, 3, 0, 0, 0));                     // empty
  frame(&s, 1, 3, 0, release(77, Status::kDropped));                 // a lease never sent
  seeds["unmappable"] = s;
  return seeds;
}

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_FRAME_SEEDS_H_
