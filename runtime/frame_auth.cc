#include "runtime/frame_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

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

}  // namespace

// A SipHash-2-4-128 context initialised with one epoch's key; every tag is
// made on a copy, so the context itself is only read.
struct FrameAuth::Key {
  EVP_MAC_CTX* ctx = nullptr;
  ~Key() { EVP_MAC_CTX_free(ctx); }
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
  std::string info = "tessel frame key v1";
  Append(&info, job_id_);
  Append(&info, shard_);
  Append(&info, epoch);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(info.data()), info.size(), digest, &digest_len);
  static EVP_MAC* const siphash = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  auto key = std::make_shared<Key>();
  key->ctx = siphash != nullptr ? EVP_MAC_CTX_new(siphash) : nullptr;
  size_t size = kFrameTagBytes;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                         OSSL_PARAM_construct_end()};
  if (key->ctx == nullptr || EVP_MAC_init(key->ctx, digest, kKeyBytes, params) != 1) {
    std::abort();  // OpenSSL 3 always has SipHash; without it nothing can be keyed
  }
  OPENSSL_cleanse(digest, sizeof(digest));
  keys_.emplace_front(epoch, key);
  if (keys_.size() > kKeepKeys) keys_.pop_back();
  return key;
}

std::array<uint8_t, kFrameTagBytes> FrameAuth::Tag(const uint8_t* header, int64_t epoch) {
  return TagOf(absl::MakeConstSpan(header, kHeaderBytes), epoch);
}

std::array<uint8_t, kFrameTagBytes> FrameAuth::TagOf(absl::Span<const uint8_t> bytes,
                                                     int64_t epoch) {
  std::shared_ptr<Key> key = KeyOf(epoch);
  std::array<uint8_t, kFrameTagBytes> tag{};
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(key->ctx);
  size_t len = 0;
  if (ctx == nullptr || EVP_MAC_update(ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_MAC_final(ctx, tag.data(), &len, tag.size()) != 1 || len != tag.size()) {
    std::abort();  // out of memory
  }
  EVP_MAC_CTX_free(ctx);
  return tag;
}

SealedHeader FrameAuth::Seal(const FrameHeader& h) {
  SealedHeader out{};
  const HeaderBytes header = EncodeHeader(h);
  std::memcpy(out.data(), header.data(), kHeaderBytes);
  const std::array<uint8_t, kFrameTagBytes> tag = Tag(header.data(), h.epoch);
  std::memcpy(out.data() + kHeaderBytes, tag.data(), kFrameTagBytes);
  return out;
}

bool FrameAuth::Verify(absl::Span<const uint8_t> am_header, const FrameHeader& h) {
  if (am_header.size() != kSealedHeaderBytes || h.job_id != job_id_ || h.shard != shard_) {
    return false;
  }
  const std::array<uint8_t, kFrameTagBytes> want = Tag(am_header.data(), h.epoch);
  return CRYPTO_memcmp(want.data(), am_header.data() + kHeaderBytes, kFrameTagBytes) == 0;
}

bool FrameAuth::VerifyTag(absl::Span<const uint8_t> bytes, absl::Span<const uint8_t> tag,
                          int64_t epoch) {
  if (tag.size() != kFrameTagBytes) return false;
  const std::array<uint8_t, kFrameTagBytes> want = TagOf(bytes, epoch);
  return CRYPTO_memcmp(want.data(), tag.data(), kFrameTagBytes) == 0;
}

WireHeader ToWire(FrameAuth* auth, const FrameHeader& h) {
  WireHeader w;
  if (auth != nullptr) {
    w.bytes = auth->Seal(h);
    w.size = kSealedHeaderBytes;
  } else {
    const HeaderBytes b = EncodeHeader(h);
    std::memcpy(w.bytes.data(), b.data(), kHeaderBytes);
    w.size = kHeaderBytes;
  }
  return w;
}

absl::StatusOr<FrameHeader> DecodeWireHeader(absl::Span<const uint8_t> am_header) {
  const size_t n = am_header.size() == kSealedHeaderBytes ? kHeaderBytes : am_header.size();
  return DecodeHeader(am_header.data(), n);
}

}  // namespace tessel
