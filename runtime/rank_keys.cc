#include "runtime/rank_keys.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

constexpr size_t kKeyBytes = 16;   // SipHash's key
constexpr size_t kKeepEpochs = 4;  // epochs whose keys a server keeps derived

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string Hmac(absl::string_view secret, absl::string_view info) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(info.data()), info.size(), digest, &len);
  std::string out(reinterpret_cast<const char*>(digest), len);
  OPENSSL_cleanse(digest, sizeof(digest));
  return out;
}

std::string Derive(absl::string_view secret, absl::string_view label, uint64_t job_id,
                   int32_t shard, int32_t who, int64_t epoch) {
  std::string info(label);
  Append(&info, job_id);
  Append(&info, shard);
  Append(&info, who);
  Append(&info, epoch);
  return Hmac(secret, info);
}

constexpr char kUp[] = "tessel frame key v2 up";
constexpr char kDown[] = "tessel frame key v2 down";
constexpr char kHost[] = "tessel frame key v2 host";

}  // namespace

struct MacKey::Ctx {
  EVP_MAC_CTX* ctx = nullptr;
  ~Ctx() { EVP_MAC_CTX_free(ctx); }
};

MacKey::MacKey(absl::string_view secret, absl::string_view label) : ctx_(std::make_unique<Ctx>()) {
  std::string digest = Hmac(secret, label);
  static EVP_MAC* const siphash = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  ctx_->ctx = siphash != nullptr ? EVP_MAC_CTX_new(siphash) : nullptr;
  size_t size = kFrameTagBytes;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                         OSSL_PARAM_construct_end()};
  if (ctx_->ctx == nullptr ||
      EVP_MAC_init(ctx_->ctx, reinterpret_cast<const unsigned char*>(digest.data()), kKeyBytes,
                   params) != 1) {
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

SealedHeader MacKey::Seal(const FrameHeader& h) const {
  SealedHeader out{};
  const HeaderBytes header = EncodeHeader(h);
  std::memcpy(out.data(), header.data(), kHeaderBytes);
  const auto tag = Tag(absl::MakeConstSpan(header.data(), kHeaderBytes));
  std::memcpy(out.data() + kHeaderBytes, tag.data(), kFrameTagBytes);
  return out;
}

bool MacKey::Verify(absl::Span<const uint8_t> am_header) const {
  if (am_header.size() != kSealedHeaderBytes) return false;
  const auto want = Tag(am_header.subspan(0, kHeaderBytes));
  return CRYPTO_memcmp(want.data(), am_header.data() + kHeaderBytes, kFrameTagBytes) == 0;
}

absl::StatusOr<std::shared_ptr<JobFrameKeys>> JobFrameKeys::Create(absl::string_view secret,
                                                                   uint64_t job_id, int32_t shard) {
  if (secret.size() != kJobSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame key secret is ", kJobSecretBytes, " bytes; got ", secret.size()));
  }
  return std::shared_ptr<JobFrameKeys>(new JobFrameKeys(std::string(secret), job_id, shard));
}

std::string JobFrameKeys::RankSecret(int32_t rank, int64_t epoch) const {
  return Derive(secret_, "tessel rank secret v2", job_id_, shard_, rank, epoch);
}

std::string JobFrameKeys::HostSecret(int32_t group, int64_t epoch) const {
  return Derive(secret_, "tessel host secret v2", job_id_, shard_, group, epoch);
}

JobFrameKeys::RankKeys JobFrameKeys::KeysOf(int32_t rank, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  auto at = epochs_.begin();
  while (at != epochs_.end() && at->first != epoch) ++at;
  if (at == epochs_.end()) {
    epochs_.emplace_front(epoch, absl::flat_hash_map<int32_t, RankKeys>());
    if (epochs_.size() > kKeepEpochs) epochs_.pop_back();
    at = epochs_.begin();
  }
  RankKeys& keys = at->second[rank];
  if (keys.up == nullptr) {
    std::string secret = RankSecret(rank, epoch);
    keys.up = std::make_shared<const MacKey>(secret, kUp);
    keys.down = std::make_shared<const MacKey>(secret, kDown);
    OPENSSL_cleanse(secret.data(), secret.size());
  }
  return keys;
}

bool JobFrameKeys::VerifyFromWorker(absl::Span<const uint8_t> am_header, const FrameHeader& h) {
  if (am_header.size() != kSealedHeaderBytes || h.job_id != job_id_ || h.shard != shard_ ||
      h.rank < 0) {
    return false;
  }
  return KeysOf(h.rank, h.epoch).up->Verify(am_header);
}

SealedHeader JobFrameKeys::SealToWorker(const FrameHeader& h) {
  return KeysOf(h.rank, h.epoch).down->Seal(h);
}

absl::StatusOr<std::shared_ptr<const RankFrameKeys>> RankFrameKeys::Create(
    const FrameKeyGrant& grant, uint64_t job_id, int32_t shard, int32_t rank, int64_t epoch) {
  if (grant.rank_secret.size() != kJobSecretBytes ||
      (!grant.host_secret.empty() && grant.host_secret.size() != kJobSecretBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a rank's frame key secret is ", kJobSecretBytes, " bytes; got ", grant.rank_secret.size(),
        grant.host_secret.empty() ? ""
                                  : absl::StrCat(" (host secret ", grant.host_secret.size(), ")")));
  }
  std::shared_ptr<RankFrameKeys> k(new RankFrameKeys(job_id, shard, rank, epoch));
  k->up_ = std::make_unique<const MacKey>(grant.rank_secret, kUp);
  k->down_ = std::make_unique<const MacKey>(grant.rank_secret, kDown);
  if (!grant.host_secret.empty())
    k->host_ = std::make_unique<const MacKey>(grant.host_secret, kHost);
  return std::shared_ptr<const RankFrameKeys>(std::move(k));
}

SealedHeader RankFrameKeys::Seal(const FrameHeader& h, bool to_worker) const {
  return (to_worker && host_ != nullptr ? *host_ : *up_).Seal(h);
}

bool RankFrameKeys::Verify(absl::Span<const uint8_t> am_header, const FrameHeader& h) const {
  if (h.job_id != job_id_ || h.shard != shard_ || h.epoch != epoch_) return false;
  if (h.rank == rank_) {
    // Only a server addresses this rank, with PARAMS or ERROR.
    return (h.type == FrameType::kParams || h.type == FrameType::kError) &&
           down_->Verify(am_header);
  }
  // Another rank: a worker of this host group (an ERROR is only a server's).
  return host_ != nullptr &&
         (h.type == FrameType::kParams || h.type == FrameType::kPush ||
          h.type == FrameType::kPull || h.type == FrameType::kReady) &&
         host_->Verify(am_header);
}

}  // namespace tessel
