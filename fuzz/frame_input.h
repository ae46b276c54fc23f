// The input format of the frame-handler fuzz targets (data_plane,
// worker_frames, peer_group): a configuration byte, then frames, each as a
// hostile peer could send it. Shared by the targets, which read it, and by
// make_corpus.cc, which writes the seeds (valid frames from the real
// encoders, so the fuzzer starts past the header checks).
//
// Layout: u8 config (the target's own bits), then until the input ends:
//   u8  flags   kSeal: the target seals the header with the key a legitimate
//                      peer holds (only where it authenticates frames);
//               kInPlace: the payload is offered in place (Incoming::in_place,
//                      as UCX shared memory is), not copied;
//               kOwnSize: payload_bytes follows as u64; otherwise it is the
//                      size the (decodable) header announces, 0 if none;
//               kTarget: bits the target gives a meaning of its own (e.g.
//                      which rank the frame comes from).
//   u8  L, then L header bytes (the active-message header, as sent);
//   [u64 payload_bytes]  with kOwnSize (little-endian);
//   u16 C, then C content bytes: the payload, repeated up to payload_bytes.
// A truncated frame at the end is read as if the input ended with zeros.
//
// Example:
//   const uint8_t config = ConfigByte(data, size);
//   ForEachFrame(data, size, [&](const FuzzFrame& f) {
//     Deliver(f.header, f.PayloadBytes(announced_by_the_header), f.content);
//   });
#ifndef TESSEL_FUZZ_FRAME_INPUT_H_
#define TESSEL_FUZZ_FRAME_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::fuzz {

inline constexpr uint8_t kSeal = 1;
inline constexpr uint8_t kInPlace = 2;
inline constexpr uint8_t kOwnSize = 4;
inline constexpr uint8_t kTargetShift = 4;  // bits 4-7: the target's own

// Reads little-endian values from the front of the input; past its end, zeros.
class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  uint8_t U8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{U8()} << (8 * i);
    return v;
  }
  std::vector<uint8_t> Bytes(size_t n) {
    const size_t k = std::min(n, n_);
    std::vector<uint8_t> out(p_, p_ + k);
    p_ += k;
    n_ -= k;
    return out;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

struct FuzzFrame {
  uint8_t flags = 0;
  std::vector<uint8_t> header;
  bool own_size = false;
  uint64_t payload_bytes = 0;  // with own_size
  std::vector<uint8_t> content;
  // The payload size to deliver: the frame's own with kOwnSize, else the
  // size its header announces (`announced`: 0 where the header does not
  // decode).
  uint64_t PayloadBytes(uint64_t announced) const { return own_size ? payload_bytes : announced; }
  bool seal() const { return (flags & kSeal) != 0; }
  bool in_place() const { return (flags & kInPlace) != 0; }
  uint8_t target_bits() const { return static_cast<uint8_t>(flags >> kTargetShift); }
};

// False once the input is used up.
inline bool ReadFrame(FrameReader* r, FuzzFrame* f) {
  if (r->empty()) return false;
  f->flags = r->U8();
  f->header = r->Bytes(r->U8());
  f->own_size = (f->flags & kOwnSize) != 0;
  f->payload_bytes = f->own_size ? r->U64() : 0;
  f->content = r->Bytes(r->U16());
  return true;
}

// The input's configuration byte, its first (0 if the input is empty).
inline uint8_t ConfigByte(const uint8_t* data, size_t size) { return size > 0 ? data[0] : 0; }

// Calls `on_frame(const FuzzFrame&)` for each frame of the input after its
// configuration byte, in order, until the input is used up. What a target
// does with a frame is its own; the reading is here, once.
template <typename OnFrame>
void ForEachFrame(const uint8_t* data, size_t size, OnFrame&& on_frame) {
  FrameReader reader(data, size);
  reader.U8();  // the configuration byte: ConfigByte
  FuzzFrame f;
  while (ReadFrame(&reader, &f)) on_frame(static_cast<const FuzzFrame&>(f));
}

// For make_corpus.cc: appends one frame in the format above; with
// `own_size`, its payload_bytes is that, not the header's.
inline void WriteFrame(std::string* out, uint8_t flags, const uint8_t* header, size_t header_bytes,
                       const void* content, size_t content_bytes,
                       const uint64_t* own_size = nullptr) {
  flags = static_cast<uint8_t>(own_size != nullptr ? flags | kOwnSize : flags & ~kOwnSize);
  out->push_back(static_cast<char>(flags));
  out->push_back(static_cast<char>(header_bytes));
  out->append(reinterpret_cast<const char*>(header), header_bytes);
  for (int i = 0; own_size != nullptr && i < 8; ++i) {
    out->push_back(static_cast<char>((*own_size >> (8 * i)) & 0xff));
  }
  out->push_back(static_cast<char>(content_bytes & 0xff));
  out->push_back(static_cast<char>((content_bytes >> 8) & 0xff));
  out->append(static_cast<const char*>(content), content_bytes);
}

// `n` bytes of `content` repeated (zeros if it is empty).
inline std::vector<uint8_t> Materialize(const std::vector<uint8_t>& content, size_t n) {
  std::vector<uint8_t> out(n);
  if (!content.empty()) {
    for (size_t i = 0; i < n; ++i) out[i] = content[i % content.size()];
  }
  return out;
}

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_FRAME_INPUT_H_
