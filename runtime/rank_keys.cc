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

// `generation` 0 appends nothing (rank_keys.h: the secrets from before
// handovers).
std::string Derive(absl::string_view secret, absl::string_view label, uint64_t job_id,
                   int32_t shard, int32_t who, int64_t epoch, int32_t generation = 0) {
  std::string info(label);
  Append(&info, job_id);
  Append(&info, shard);
  Append(&info, who);
  Append(&info, epoch);
  if (generation != 0) Append(&info, generation);
  return Hmac(secret, info);
}

constexpr char kUp[] = "tessel frame key v2 up";
constexpr char kDown[] = "tessel frame key v2 down";
constexpr char kHost[] = "tessel frame key v2 host";
// Payload integrity: the payload keys of the same secrets.
constexpr char kPayloadUp[] = "tessel payload key v1 up";
constexpr char kPayloadDown[] = "tessel payload key v1 down";
constexpr char kPayloadHost[] = "tessel payload key v1 host";

// The sealed header's size in a mode: 96 with payload tags, 80 without.
size_t SealedSize(bool payload) { return payload ? kPayloadSealedHeaderBytes : kSealedHeaderBytes; }

}  // namespace

absl::StatusOr<std::shared_ptr<JobFrameKeys>> JobFrameKeys::Create(absl::string_view secret,
                                                                   uint64_t job_id, int32_t shard,
                                                                   bool payload) {
  if (secret.size() != kJobSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame key secret is ", kJobSecretBytes, " bytes; got ", secret.size()));
  }
  return std::shared_ptr<JobFrameKeys>(
      new JobFrameKeys(std::string(secret), job_id, shard, payload));
}

std::string JobFrameKeys::RankSecret(int32_t rank, int64_t epoch, int32_t generation) const {
  return Derive(secret_, "tessel rank secret v2", job_id_, shard_, rank, epoch, generation);
}

int32_t JobFrameKeys::Generation(int32_t rank, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  auto it = generations_.find({rank, epoch});
  return it == generations_.end() ? 0 : it->second;
}

void JobFrameKeys::SetGeneration(int32_t rank, int64_t epoch, int32_t generation) {
  absl::MutexLock lock(&mu_);
  generations_[{rank, epoch}] = generation;
  // The keys derived for the earlier generation go: KeysOf derives anew.
  for (auto& [e, ranks] : epochs_) {
    if (e == epoch) ranks.erase(rank);
  }
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
    auto handed = generations_.find({rank, epoch});
    keys.generation = handed == generations_.end() ? 0 : handed->second;
    std::string secret = RankSecret(rank, epoch, keys.generation);
    keys.up = std::make_shared<const MacKey>(secret, kUp);
    keys.down = std::make_shared<const MacKey>(secret, kDown);
    if (payload_) {
      keys.up_payload = std::make_shared<const PayloadKey>(secret, kPayloadUp);
      keys.down_payload = std::make_shared<const PayloadKey>(secret, kPayloadDown);
    }
    OPENSSL_cleanse(secret.data(), secret.size());
  }
  return keys;
}

bool JobFrameKeys::VerifyFromWorker(absl::Span<const uint8_t> am_header, const FrameHeader& h,
                                    int32_t* generation) {
  if (am_header.size() != SealedSize(payload_) || h.job_id != job_id_ || h.shard != shard_ ||
      h.rank < 0) {
    return false;
  }
  const RankKeys keys = KeysOf(h.rank, h.epoch);
  if (generation != nullptr) *generation = keys.generation;
  return keys.up->Verify(am_header);
}

bool JobFrameKeys::VerifyPayloadFromWorker(absl::Span<const uint8_t> am_header,
                                           const FrameHeader& h, const void* payload) {
  if (!payload_) return true;
  if (am_header.size() != kPayloadSealedHeaderBytes || h.rank < 0) return false;
  return KeysOf(h.rank, h.epoch).up_payload->Verify(am_header, payload, h.payload_bytes);
}

SealedHeader JobFrameKeys::SealToWorker(const FrameHeader& h) {
  return KeysOf(h.rank, h.epoch).down->Seal(h);
}

WireHeader JobFrameKeys::SealFrameToWorker(const FrameHeader& h, const void* payload) {
  const RankKeys keys = KeysOf(h.rank, h.epoch);
  return SealFrame(*keys.down, keys.down_payload.get(), h, payload);
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
  if (grant.payload) {
    k->up_payload_ = std::make_unique<const PayloadKey>(grant.rank_secret, kPayloadUp);
    k->down_payload_ = std::make_unique<const PayloadKey>(grant.rank_secret, kPayloadDown);
    if (!grant.host_secret.empty())
      k->host_payload_ = std::make_unique<const PayloadKey>(grant.host_secret, kPayloadHost);
  }
  return std::shared_ptr<const RankFrameKeys>(std::move(k));
}

SealedHeader RankFrameKeys::Seal(const FrameHeader& h, bool to_worker) const {
  return (to_worker && host_ != nullptr ? *host_ : *up_).Seal(h);
}

WireHeader RankFrameKeys::SealFrame(const FrameHeader& h, bool to_worker,
                                    const void* payload) const {
  const bool host = to_worker && host_ != nullptr;
  return ::tessel::SealFrame(host ? *host_ : *up_, host ? host_payload_.get() : up_payload_.get(),
                             h, payload);
}

bool RankFrameKeys::VerifyPayload(absl::Span<const uint8_t> am_header, const FrameHeader& h,
                                  const void* bytes) const {
  if (up_payload_ == nullptr) return true;
  // The direction Verify took the header tag in: this rank's down key, else the
  // host group's.
  const PayloadKey* key = h.rank == rank_ ? down_payload_.get() : host_payload_.get();
  return key != nullptr && key->Verify(am_header, bytes, h.payload_bytes);
}

bool RankFrameKeys::Verify(absl::Span<const uint8_t> am_header, const FrameHeader& h) const {
  if (h.job_id != job_id_ || h.shard != shard_ || h.epoch != epoch_) return false;
  if (am_header.size() != SealedSize(payload())) return false;
  if (h.rank == rank_) {
    // Only a server addresses this rank, with PARAMS, ERROR or NORM.
    return (h.type == FrameType::kParams || h.type == FrameType::kError ||
            h.type == FrameType::kNorm) &&
           down_->Verify(am_header);
  }
  // Another rank: a worker of this host group (an ERROR is only a server's).
  return host_ != nullptr &&
         (h.type == FrameType::kParams || h.type == FrameType::kPush ||
          h.type == FrameType::kPull || h.type == FrameType::kReady) &&
         host_->Verify(am_header);
}

}  // namespace tessel
