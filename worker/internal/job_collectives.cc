#include "worker/internal/job_collectives.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel::internal {
namespace {

// Bytes as 16-bit words (little-endian pairs), one float each.
void PutBytes(absl::string_view bytes, float* out) {
  for (size_t i = 0; i < bytes.size(); i += 2) {
    uint32_t w = static_cast<uint8_t>(bytes[i]);
    if (i + 1 < bytes.size()) w |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out[i / 2] = static_cast<float>(w);
  }
}

// The words of one rank back from a mean over `world` ranks.
void GetBytes(const float* in, int world, std::string* bytes) {
  for (size_t i = 0; i < bytes->size(); i += 2) {
    const uint32_t w =
        static_cast<uint32_t>(std::nearbyint(static_cast<double>(in[i / 2]) * world));
    (*bytes)[i] = static_cast<char>(w & 0xff);
    if (i + 1 < bytes->size()) (*bytes)[i + 1] = static_cast<char>(w >> 8);
  }
}

}  // namespace

absl::Status JobCollectives::AllReduceMean(absl::Span<float> data) {
  if (data.empty())
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": empty vector"));
  if (ctx_->world_size == 1) return absl::OkStatus();  // the mean of one
  std::unique_ptr<Reducer>& reducer = reducers_[data.size()];
  if (reducer == nullptr) {
    auto made = factory_(data.size());
    if (!made.ok()) {
      reducers_.erase(data.size());
      return made.status();
    }
    reducer = std::move(*made);
  }
  absl::Status s = reducer->Mean(data);
  if (!s.ok()) reducers_.erase(data.size());  // its job is mid-step: start over next time
  return s;
}

absl::StatusOr<std::vector<std::string>> JobCollectives::AllGather(absl::string_view mine) {
  const int world = ctx_->world_size;
  const size_t words = WordsFor(mine.size());
  std::vector<float> wire(static_cast<size_t>(world) * words, 0.f);
  PutBytes(mine, wire.data() + static_cast<size_t>(ctx_->rank.load()) * words);
  TESSEL_RETURN_IF_ERROR(AllReduceMean(absl::MakeSpan(wire)));
  std::vector<std::string> all(static_cast<size_t>(world), std::string(mine.size(), '\0'));
  for (int r = 0; r < world; ++r) GetBytes(wire.data() + r * words, world, &all[r]);
  return all;
}

absl::StatusOr<std::vector<uint64_t>> JobCollectives::AllGatherWords(
    absl::Span<const uint64_t> mine) {
  std::string bytes(mine.size() * sizeof(uint64_t), '\0');
  for (size_t i = 0; i < mine.size(); ++i) {
    for (int b = 0; b < 8; ++b) bytes[i * 8 + b] = static_cast<char>((mine[i] >> (8 * b)) & 0xff);
  }
  TESSEL_ASSIGN_OR_RETURN(const std::vector<std::string> all, AllGather(bytes));
  std::vector<uint64_t> out;
  out.reserve(all.size() * mine.size());
  for (const std::string& rank : all) {
    for (size_t i = 0; i < mine.size(); ++i) {
      uint64_t v = 0;
      for (int b = 0; b < 8; ++b) {
        v |= static_cast<uint64_t>(static_cast<uint8_t>(rank[i * 8 + b])) << (8 * b);
      }
      out.push_back(v);
    }
  }
  return out;
}

absl::Status JobCollectives::Broadcast(int root, std::string* bytes) {
  std::vector<float> wire(WordsFor(bytes->size()), 0.f);
  if (ctx_->rank.load() == root) PutBytes(*bytes, wire.data());
  TESSEL_RETURN_IF_ERROR(AllReduceMean(absl::MakeSpan(wire)));
  GetBytes(wire.data(), ctx_->world_size, bytes);
  return absl::OkStatus();
}

absl::Status JobCollectives::AgreeOk(bool ok, const std::string& what) {
  std::vector<float> flag = {ok ? 0.f : 1.f};
  TESSEL_RETURN_IF_ERROR(AllReduceMean(absl::MakeSpan(flag)));
  if (flag[0] != 0.f) {
    return absl::AbortedError(absl::StrCat(
        ctx_->Where(), ": ", what, " failed on another rank (see its log); nothing changed"));
  }
  return absl::OkStatus();
}

absl::Status JobCollectives::Release(size_t size) {
  auto it = reducers_.find(size);
  if (it == reducers_.end()) return absl::OkStatus();
  // Nobody may still be pulling from its job when rank 0 deletes it.
  TESSEL_RETURN_IF_ERROR(AgreeOk(true, "releasing a reducer"));
  if (ctx_->rank.load() == 0) it->second->DeleteJob();
  reducers_.erase(it);
  return absl::OkStatus();
}

absl::Status JobCollectives::ReleaseBytes(size_t bytes, int ranks) {
  return Release(WordsFor(bytes) * static_cast<size_t>(ranks));
}

void JobCollectives::DropAll() {
  for (auto& [size, reducer] : reducers_) {
    if (reducer != nullptr) reducer->DeleteJob();
  }
  reducers_.clear();
}

}  // namespace tessel::internal
