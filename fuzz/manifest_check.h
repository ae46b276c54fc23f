// Invariants of parsed checkpoint manifests and shard entries, shared by the
// manifest and shard-entry fuzz targets: field-by-field equality (for
// round trips) and the round trip itself, the consistency ParseShardEntry
// promises, and exactness: an
// accepted number is the number the JSON holds (not truncated, wrapped,
// rounded, or read from a boolean).
#ifndef TESSEL_FUZZ_MANIFEST_CHECK_H_
#define TESSEL_FUZZ_MANIFEST_CHECK_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint_manifest.h"
#include "core/optimizer.h"
#include "fuzz/fuzz_check.h"
#include "nlohmann/json.hpp"

namespace tessel::fuzz {

inline bool SameEntry(const ShardEntry& a, const ShardEntry& b) {
  return a.shard == b.shard && a.file == b.file && a.range_begin == b.range_begin &&
         a.range_end == b.range_end && a.state_slots == b.state_slots && a.bytes == b.bytes &&
         a.xxh64 == b.xxh64 && a.snapshot_pause_us == b.snapshot_pause_us;
}

inline bool SameManifest(const Manifest& a, const Manifest& b) {
  if (a.job != b.job || a.step != b.step || a.epoch != b.epoch || a.num_shards != b.num_shards ||
      a.num_params != b.num_params || a.state_slots != b.state_slots ||
      a.spec_json != b.spec_json || a.created_unix_ms != b.created_unix_ms ||
      a.shards.size() != b.shards.size()) {
    return false;
  }
  for (size_t i = 0; i < a.shards.size(); ++i) {
    if (!SameEntry(a.shards[i], b.shards[i])) return false;
  }
  return true;
}

// An accepted `value` (a manifest or an entry, `what`) printed as JSON
// parses back to the same, and printing that again gives the same text.
template <typename T>
void CheckJsonRoundTrip(const T& value, std::string (*print)(const T&),
                        absl::StatusOr<T> (*parse)(const std::string&),
                        bool (*same)(const T&, const T&), const char* what) {
  const std::string json = print(value);
  absl::StatusOr<T> back = parse(json);
  FUZZ_CHECK(back.ok(), absl::StrCat("printed ", what, " is rejected: ", back.status().ToString(),
                                     "\n", json));
  FUZZ_CHECK(same(value, *back), absl::StrCat(what, " changed in a round trip:\n", json));
  FUZZ_CHECK(print(*back) == json, "printing is not stable");
}

// What ParseShardEntry guarantees about an entry it accepts.
inline void CheckEntry(const ShardEntry& e) {
  FUZZ_CHECK(e.shard >= 0 && e.file == ShardFileName(e.shard),
             absl::StrCat("shard ", e.shard, " accepted with file '", e.file, "'"));
  FUZZ_CHECK(e.range_begin >= 0 && e.range_begin <= e.range_end,
             absl::StrCat("shard ", e.shard, " accepted with range [", e.range_begin, ", ",
                          e.range_end, ")"));
  FUZZ_CHECK(e.state_slots >= 0 && e.state_slots <= kMaxStateSlots,
             absl::StrCat("shard ", e.shard, " accepted with ", e.state_slots, " state slots"));
  // Recomputed in 128 bits: the true byte count, not a wrapped one.
  const __int128 bytes = static_cast<__int128>(1 + e.state_slots) *
                         (static_cast<__int128>(e.range_end) - e.range_begin) * 4;
  FUZZ_CHECK(bytes == e.bytes,
             absl::StrCat("shard ", e.shard, " accepted claiming ", e.bytes, " bytes for range [",
                          e.range_begin, ", ", e.range_end, ") with ", e.state_slots, " slots"));
  FUZZ_CHECK(
      e.xxh64.size() == 16 && e.xxh64.find_first_not_of("0123456789abcdef") == std::string::npos,
      absl::StrCat("shard ", e.shard, " accepted with checksum '", e.xxh64, "'"));
}

// True if JSON value `v` is a number equal to `x` exactly.
inline bool IsExactly(const nlohmann::json& v, int64_t x) {
  if (v.is_number_unsigned()) return x >= 0 && v.get<uint64_t>() == static_cast<uint64_t>(x);
  if (v.is_number_integer()) return v.get<int64_t>() == x;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return d >= -9223372036854775808.0 && d < 9223372036854775808.0 && std::trunc(d) == d &&
           static_cast<int64_t>(d) == x;
  }
  return false;
}

// `key` of object `j`, if present, holds exactly `x`.
inline void CheckExact(const nlohmann::json& j, const char* key, int64_t x,
                       const std::string& where) {
  if (!j.is_object() || !j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  FUZZ_CHECK(IsExactly(v, x),
             absl::StrCat(where, ": accepted ", key, " = ", x, " from JSON ",
                          v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

// Every number of an accepted entry is exactly what its JSON object says.
inline void CheckEntryExact(const nlohmann::json& j, const ShardEntry& e) {
  const std::string where = absl::StrCat("shard entry ", e.shard);
  CheckExact(j, "shard", e.shard, where);
  CheckExact(j, "range_begin", e.range_begin, where);
  CheckExact(j, "range_end", e.range_end, where);
  CheckExact(j, "state_slots", e.state_slots, where);
  CheckExact(j, "bytes", e.bytes, where);
  CheckExact(j, "snapshot_pause_us", e.snapshot_pause_us, where);
}

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_MANIFEST_CHECK_H_
