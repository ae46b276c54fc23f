#include "runtime/frame_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

constexpr size_t kKeyBytes = 16;  // SipHash's key
constexpr size_t kKeepKeys = 4;   // epochs whose keys stay derived

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

using Digest = std::array<uint8_t, 32>;

// HMAC-SHA256(key, a | b).
Digest Hmac(const void* key, size_t key_len, absl::Span<const uint8_t> a, const void* b,
            size_t b_len) {
  Digest out{};
  HMAC_CTX* ctx = HMAC_CTX_new();
  unsigned int len = 0;
  if (ctx == nullptr ||
      HMAC_Init_ex(ctx, key, static_cast<int>(key_len), EVP_sha256(), nullptr) != 1 ||
      HMAC_Update(ctx, a.data(), a.size()) != 1 ||
      (b_len > 0 && HMAC_Update(ctx, static_cast<const unsigned char*>(b), b_len) != 1) ||
      HMAC_Final(ctx, out.data(), &len) != 1 || len != out.size()) {
    std::abort();  // out of memory: nothing can be keyed
  }
  HMAC_CTX_free(ctx);
  return out;
}

Digest Hmac(absl::string_view key, absl::string_view info) {
  return Hmac(key.data(), key.size(),
              absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(info.data()), info.size()),
              nullptr, 0);
}

// Poly1305 of `n` bytes at `data` under the 32-byte one-time `key`.
PayloadTag Poly1305(const Digest& key, const void* data, size_t n) {
  static EVP_MAC* const poly = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
  PayloadTag tag{};
  EVP_MAC_CTX* ctx = poly != nullptr ? EVP_MAC_CTX_new(poly) : nullptr;
  size_t len = 0;
  if (ctx == nullptr || EVP_MAC_init(ctx, key.data(), key.size(), nullptr) != 1 ||
      (n > 0 && EVP_MAC_update(ctx, static_cast<const unsigned char*>(data), n) != 1) ||
      EVP_MAC_final(ctx, tag.data(), &len, tag.size()) != 1 || len != tag.size()) {
    std::abort();  // OpenSSL 3 always has Poly1305; out of memory otherwise
  }
  EVP_MAC_CTX_free(ctx);
  return tag;
}

}  // namespace

// A SipHash-2-4-128 context initialised with one key; every tag is made on
// a copy, so the context itself is only read.
struct MacKey::Ctx {
  EVP_MAC_CTX* ctx = nullptr;
  ~Ctx() { EVP_MAC_CTX_free(ctx); }
};

MacKey::MacKey(absl::string_view secret, absl::string_view label) : ctx_(std::make_unique<Ctx>()) {
  Digest digest = Hmac(secret, label);
  static EVP_MAC* const siphash = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  ctx_->ctx = siphash != nullptr ? EVP_MAC_CTX_new(siphash) : nullptr;
  size_t size = kFrameTagBytes;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                         OSSL_PARAM_construct_end()};
  if (ctx_->ctx == nullptr || EVP_MAC_init(ctx_->ctx, digest.data(), kKeyBytes, params) != 1) {
    std::abort();  // OpenSSL 3 always has SipHash; without it nothing can be keyed
  }
  OPENSSL_cleanse(digest.data(), digest.size());
}

MacKey::~MacKey() = default;

std::array<uint8_t, kFrameTagBytes> MacKey::Tag(absl::Span<const uint8_t> bytes) const {
  std::array<uint8_t, kFrameTagBytes> tag{};
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(ctx_->ctx);
  size_t len = 0;
  if (ctx == nullptr || EVP_MAC_update(ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_MAC_final(ctx, tag.data(), &len, tag.size()) != 1 || len != tag.size()) {
    std::abort();  // out of memory
  }
  EVP_MAC_CTX_free(ctx);
  return tag;
}

bool MacKey::VerifyTag(absl::Span<const uint8_t> bytes, absl::Span<const uint8_t> tag) const {
  if (tag.size() != kFrameTagBytes) return false;
  const auto want = Tag(bytes);
  return CRYPTO_memcmp(want.data(), tag.data(), kFrameTagBytes) == 0;
}

SealedHeader MacKey::Seal(const FrameHeader& h) const {
  SealedHeader out{};
  const HeaderBytes header = EncodeHeader(h);
  std::memcpy(out.data(), header.data(), kHeaderBytes);
  const auto tag = Tag(absl::MakeConstSpan(header.data(), kHeaderBytes));
  std::memcpy(out.data() + kHeaderBytes, tag.data(), kFrameTagBytes);
  return out;
}

bool MacKey::Verify(absl::Span<const uint8_t> am_header) const {
  if (am_header.size() != kSealedHeaderBytes && am_header.size() != kPayloadSealedHeaderBytes) {
    return false;
  }
  const size_t covered = am_header.size() - kFrameTagBytes;
  return VerifyTag(am_header.subspan(0, covered), am_header.subspan(covered));
}

PayloadKey::PayloadKey(absl::string_view secret, absl::string_view label)
    : key_(Hmac(secret, label)) {}

PayloadKey::~PayloadKey() { OPENSSL_cleanse(key_.data(), key_.size()); }

PayloadTag PayloadKey::Tag(absl::Span<const uint8_t> header, const void* payload, size_t n) const {
  header = header.subspan(0, kHeaderBytes);
  uint16_t type = 0;
  std::memcpy(&type, header.data() + 6, sizeof(type));  // core/wire.h: u16 type at 6
  if (type == static_cast<uint16_t>(FrameType::kError)) {
    // A text: a PRF over header and text, so two texts under one header
    // never share a one-time key.
    const Digest d = Hmac(key_.data(), key_.size(), header, payload, n);
    PayloadTag tag{};
    std::memcpy(tag.data(), d.data(), tag.size());
    return tag;
  }
  // Poly1305's key is used once: for this header, which names the payload
  // (job, shard, epoch, step, rank, bucket, part, type, size).
  Digest one_time = Hmac(key_.data(), key_.size(), header, nullptr, 0);
  const PayloadTag tag = Poly1305(one_time, payload, n);
  OPENSSL_cleanse(one_time.data(), one_time.size());
  return tag;
}

bool PayloadKey::Verify(absl::Span<const uint8_t> am_header, const void* payload, size_t n) const {
  if (am_header.size() != kPayloadSealedHeaderBytes) return false;
  const PayloadTag want = Tag(am_header.subspan(0, kHeaderBytes), payload, n);
  return CRYPTO_memcmp(want.data(), am_header.data() + kHeaderBytes, kPayloadTagBytes) == 0;
}

// An epoch's key of the job-wide scheme.
struct FrameAuth::Key {
  Key(absl::string_view secret, absl::string_view info) : mac(secret, info) {}
  MacKey mac;
};

std::string NewJobSecret() {
  std::string s(kJobSecretBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(s.size())) != 1) {
    // RAND_bytes fails only without an entropy source: never train unkeyed.
    std::abort();
  }
  return s;
}

absl::StatusOr<std::shared_ptr<FrameAuth>> FrameAuth::Create(absl::string_view secret,
                                                             uint64_t job_id, int32_t shard) {
  if (secret.size() != kJobSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame key secret is ", kJobSecretBytes, " bytes; got ", secret.size()));
  }
  return std::shared_ptr<FrameAuth>(new FrameAuth(std::string(secret), job_id, shard));
}

FrameAuth::~FrameAuth() = default;

std::shared_ptr<FrameAuth::Key> FrameAuth::KeyOf(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  for (const auto& [e, key] : keys_) {
    if (e == epoch) return key;
  }
  // The first 16 bytes of HMAC-SHA256(secret, "tessel frame key v1" | job
  // id | shard | epoch): MacKey's derivation with this label.
  std::string info = "tessel frame key v1";
  Append(&info, job_id_);
  Append(&info, shard_);
  Append(&info, epoch);
  auto key = std::make_shared<Key>(secret_, info);
  keys_.emplace_front(epoch, key);
  if (keys_.size() > kKeepKeys) keys_.pop_back();
  return key;
}

std::array<uint8_t, kFrameTagBytes> FrameAuth::Tag(const uint8_t* header, int64_t epoch) {
  return TagOf(absl::MakeConstSpan(header, kHeaderBytes), epoch);
}

std::array<uint8_t, kFrameTagBytes> FrameAuth::TagOf(absl::Span<const uint8_t> bytes,
                                                     int64_t epoch) {
  return KeyOf(epoch)->mac.Tag(bytes);
}

SealedHeader FrameAuth::Seal(const FrameHeader& h) { return KeyOf(h.epoch)->mac.Seal(h); }

bool FrameAuth::Verify(absl::Span<const uint8_t> am_header, const FrameHeader& h) {
  if (am_header.size() != kSealedHeaderBytes || h.job_id != job_id_ || h.shard != shard_) {
    return false;
  }
  return KeyOf(h.epoch)->mac.Verify(am_header);
}

bool FrameAuth::VerifyTag(absl::Span<const uint8_t> bytes, absl::Span<const uint8_t> tag,
                          int64_t epoch) {
  return KeyOf(epoch)->mac.VerifyTag(bytes, tag);
}

WireHeader ToWire(FrameAuth* auth, const FrameHeader& h) {
  if (auth != nullptr) return ToWire(auth->Seal(h));
  WireHeader w;
  const HeaderBytes b = EncodeHeader(h);
  std::memcpy(w.bytes.data(), b.data(), kHeaderBytes);
  w.size = kHeaderBytes;
  return w;
}

WireHeader ToWire(const SealedHeader& sealed) {
  WireHeader w;
  std::memcpy(w.bytes.data(), sealed.data(), kSealedHeaderBytes);
  w.size = kSealedHeaderBytes;
  return w;
}

WireHeader SealFrame(const MacKey& mac, const PayloadKey* payload_key, const FrameHeader& h,
                     const void* payload) {
  if (payload_key == nullptr) return ToWire(mac.Seal(h));
  WireHeader w;
  const HeaderBytes header = EncodeHeader(h);
  std::memcpy(w.bytes.data(), header.data(), kHeaderBytes);
  const PayloadTag ptag =
      payload_key->Tag(header, h.payload_bytes > 0 ? payload : nullptr, h.payload_bytes);
  std::memcpy(w.bytes.data() + kHeaderBytes, ptag.data(), kPayloadTagBytes);
  const size_t covered = kHeaderBytes + kPayloadTagBytes;
  const auto tag = mac.Tag(absl::MakeConstSpan(w.bytes.data(), covered));
  std::memcpy(w.bytes.data() + covered, tag.data(), kFrameTagBytes);
  w.size = kPayloadSealedHeaderBytes;
  return w;
}

absl::StatusOr<FrameHeader> DecodeWireHeader(absl::Span<const uint8_t> am_header) {
  const size_t n =
      am_header.size() == kSealedHeaderBytes || am_header.size() == kPayloadSealedHeaderBytes
          ? kHeaderBytes
          : am_header.size();
  return DecodeHeader(am_header.data(), n);
}

}  // namespace tessel
