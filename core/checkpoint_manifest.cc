#include "core/checkpoint_manifest.h"

#include <xxhash.h>

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/optimizer.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessel {

using nlohmann::json;

std::string CheckpointDir(const std::string& job, int64_t step) {
  return absl::StrFormat("%s/step-%010d", job, step);
}
std::string ShardFileName(int shard) { return absl::StrFormat("shard-%05d.bin", shard); }
std::string ShardMetaName(int shard) { return absl::StrFormat("shard-%05d.json", shard); }

std::string Xxh64Hex(const void* data, size_t size) {
  return absl::StrFormat("%016x", XXH64(data, size, 0));
}

namespace {

json EntryJson(const ShardEntry& e) {
  json j{{"shard", e.shard},
         {"file", e.file},
         {"range_begin", e.range_begin},
         {"range_end", e.range_end},
         {"state_slots", e.state_slots},
         {"bytes", e.bytes},
         {"xxh64", e.xxh64},
         {"snapshot_pause_us", e.snapshot_pause_us}};
  if (!e.tensor_skips.empty()) j["tensor_skips"] = e.tensor_skips;
  return j;
}

// An optional array of counts >= 0 (at most `max`).
absl::Status GetCounts(const json& j, const char* key, int64_t max, std::vector<int64_t>* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& a = j.at(key);
  if (!a.is_array()) return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not an array"));
  for (const json& s : a) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' holds ", s.dump(), ", not a count in [0, ", max, "]"));
    }
    out->push_back(s.get<int64_t>());
  }
  return absl::OkStatus();
}

// Reads an integer field strictly: it must be a JSON integer (not a float,
// bool or string) within [lo, hi]. Nothing is converted or truncated.
template <typename T>
absl::Status GetInt(const json& j, const char* key, T* out, int64_t lo, int64_t hi,
                    bool optional = false) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (optional) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("missing field '", key, "'"));
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("field '", key, "' must be an integer"));
  }
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(hi) || (lo > 0 && v < static_cast<uint64_t>(lo))) {
      return absl::InvalidArgumentError(absl::StrCat("field '", key, "' is out of range"));
    }
    *out = static_cast<T>(v);
    return absl::OkStatus();
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat("field '", key, "' is out of range"));
  }
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

constexpr int64_t kMaxElems = int64_t{1} << 40;  // Layout::kMaxParams
constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();

absl::StatusOr<ShardEntry> EntryFromJson(const json& j) {
  ShardEntry e;
  if (!j.is_object()) return absl::InvalidArgumentError("shard entry is not a JSON object");
  for (absl::Status s : {GetInt(j, "shard", &e.shard, 0, kMaxInt),
                         GetInt(j, "range_begin", &e.range_begin, 0, kMaxElems),
                         GetInt(j, "range_end", &e.range_end, 0, kMaxElems),
                         GetInt(j, "state_slots", &e.state_slots, 0, kMaxStateSlots),
                         GetInt(j, "bytes", &e.bytes, 0, kMaxI64),
                         GetInt(j, "snapshot_pause_us", &e.snapshot_pause_us, 0, kMaxI64, true)}) {
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("shard entry: ", s.message()));
  }
  if (absl::Status s = GetCounts(j, "tensor_skips", kMaxI64, &e.tensor_skips); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("shard entry: ", s.message()));
  }
  try {
    e.file = j.at("file").get<std::string>();
    e.xxh64 = j.at("xxh64").get<std::string>();
  } catch (const json::exception& ex) {
    return absl::InvalidArgumentError(absl::StrCat("shard entry: ", ex.what()));
  }
  if (e.shard < 0 || e.file != ShardFileName(e.shard)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard entry names file '", e.file, "' for shard ", e.shard));
  }
  if (e.range_begin < 0 || e.range_end < e.range_begin || e.state_slots < 0 ||
      e.state_slots > kMaxStateSlots) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", e.shard, " has a bad range or slots"));
  }
  if (e.bytes != (1 + e.state_slots) * (e.range_end - e.range_begin) * 4) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", e.shard, " claims ", e.bytes,
                                                   " bytes, inconsistent with its range"));
  }
  if (e.xxh64.size() != 16 || e.xxh64.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", e.shard, " has a bad checksum"));
  }
  return e;
}

}  // namespace

std::string ShardEntryToJson(const ShardEntry& e) { return EntryJson(e).dump(2) + "\n"; }

absl::StatusOr<ShardEntry> ParseShardEntry(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("shard meta is not a JSON object");
  }
  return EntryFromJson(j);
}

std::string ManifestToJson(const Manifest& m) {
  json shards = json::array();
  for (const ShardEntry& e : m.shards) shards.push_back(EntryJson(e));
  json spec = json::parse(m.spec_json, nullptr, false);
  json j = {{"format", "tessel-checkpoint"},
            {"version", kCheckpointFormatVersion},
            {"job", m.job},
            {"step", m.step},
            {"epoch", m.epoch},
            {"num_shards", m.num_shards},
            {"num_params", m.num_params},
            {"state_slots", m.state_slots},
            {"created_unix_ms", m.created_unix_ms},
            {"spec", spec.is_discarded() ? json(m.spec_json) : spec},
            {"shards", shards}};
  if (!m.tensor_skips.empty()) j["tensor_skips"] = m.tensor_skips;
  if (!m.creator.empty()) j["creator"] = m.creator;
  return j.dump(2) + "\n";
}

absl::StatusOr<Manifest> ParseManifest(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("manifest is not a JSON object");
  }
  Manifest m;
  try {
    if (j.at("format").get<std::string>() != "tessel-checkpoint") {
      return absl::InvalidArgumentError("manifest format is not 'tessel-checkpoint'");
    }
    int version = 0;
    absl::Status vs = GetInt(j, "version", &version, 0, kMaxInt);
    if (!vs.ok()) return absl::InvalidArgumentError(absl::StrCat("manifest: ", vs.message()));
    if (version != kCheckpointFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint format version ", version,
                                                     " is not supported (this build reads ",
                                                     kCheckpointFormatVersion, ")"));
    }
    m.job = j.at("job").get<std::string>();
    for (absl::Status s :
         {GetInt(j, "step", &m.step, 0, kMaxI64), GetInt(j, "epoch", &m.epoch, 0, kMaxI64),
          GetInt(j, "num_shards", &m.num_shards, 0, kMaxInt),
          GetInt(j, "num_params", &m.num_params, 0, kMaxElems),
          GetInt(j, "state_slots", &m.state_slots, 0, kMaxStateSlots),
          GetInt(j, "created_unix_ms", &m.created_unix_ms, 0, kMaxI64, true)}) {
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("manifest: ", s.message()));
    }
    m.spec_json = j.at("spec").dump();
    if (j.contains("creator")) m.creator = j.at("creator").get<std::string>();
    if (absl::Status s = GetCounts(j, "tensor_skips", m.step, &m.tensor_skips); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: ", s.message()));
    }
    for (const json& e : j.at("shards")) {
      TESSEL_ASSIGN_OR_RETURN(auto entry, EntryFromJson(e));
      m.shards.push_back(entry);
    }
  } catch (const json::exception& ex) {
    return absl::InvalidArgumentError(absl::StrCat("manifest: ", ex.what()));
  }
  if (m.job.empty() || m.step < 0 || m.num_shards < 1 || m.num_params < 1) {
    return absl::InvalidArgumentError("manifest has an empty job, negative step or no shards");
  }
  if (static_cast<int>(m.shards.size()) != m.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("manifest lists ", m.shards.size(),
                                                   " shard files for ", m.num_shards, " shards"));
  }
  std::sort(m.shards.begin(), m.shards.end(),
            [](const ShardEntry& a, const ShardEntry& b) { return a.shard < b.shard; });
  int64_t expect = 0;
  for (int s = 0; s < m.num_shards; ++s) {
    const ShardEntry& e = m.shards[s];
    if (e.shard != s || e.range_begin != expect || e.state_slots != m.state_slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest shard ", s, " does not continue the ranges at element ", expect));
    }
    expect = e.range_end;
  }
  if (expect != m.num_params) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest ranges end at ", expect, ", not at ", m.num_params, " parameters"));
  }
  return m;
}

std::vector<Piece> ReslicePlan(const Manifest& m, Range target) {
  std::vector<Piece> plan;
  for (const ShardEntry& e : m.shards) {
    const int64_t lo = std::max(target.begin, e.range_begin);
    const int64_t hi = std::min(target.end, e.range_end);
    if (lo >= hi) continue;
    plan.push_back(Piece{e.shard, lo - e.range_begin, lo - target.begin, hi - lo});
  }
  return plan;
}

}  // namespace tessel
