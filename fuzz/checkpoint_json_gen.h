// Structure-aware inputs for the checkpoint JSON targets (manifest,
// shard_entry). Byte-level mutation of JSON text rarely produces a document
// that is well-formed, has every key and carries an unusual number in one of
// them, which is where the bugs of a JSON *reader* live (float-to-int
// conversions, products that overflow). So an input whose first byte is
// kStructuredTag is not JSON: FuzzedDataProvider turns the remaining bytes
// into a document with the checkpoint's keys, each value plausible (a
// consistent checkpoint) or, field by field, replaced by an edge number, a
// float or a value of the wrong type. Every other input is parsed as text.
//
// Example:
//   FuzzedDataProvider fdp(data + 1, size - 1);
//   std::string text = tessel::fuzz::FuzzedManifestJson(fdp);
#ifndef TESSEL_FUZZ_CHECKPOINT_JSON_GEN_H_
#define TESSEL_FUZZ_CHECKPOINT_JSON_GEN_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

#include "core/checkpoint_manifest.h"
#include "fuzz/fuzz_check.h"
#include "nlohmann/json.hpp"

namespace tessel::fuzz {

inline constexpr uint8_t kStructuredTag = 0x01;

// Random strings need not be UTF-8; nlohmann would throw on printing them.
inline std::string Dump(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Replaces a plausible value, about half the time, by something at an edge.
inline nlohmann::json Fuzzed(FuzzedDataProvider& fdp, const nlohmann::json& plausible) {
  using nlohmann::json;
  static constexpr int64_t kIntEdges[] = {0,
                                          1,
                                          -1,
                                          3,
                                          4,
                                          255,
                                          65536,
                                          int64_t{1} << 31,
                                          (int64_t{1} << 31) - 1,
                                          -(int64_t{1} << 31) - 1,
                                          int64_t{1} << 32,
                                          int64_t{1} << 40,
                                          int64_t{1} << 61,
                                          std::numeric_limits<int64_t>::max(),
                                          std::numeric_limits<int64_t>::min(),
                                          std::numeric_limits<int64_t>::max() / 4 + 1};
  static constexpr double kFloatEdges[] = {0.5,    -0.0,         1e300, -1e300,
                                           9.3e18, 2147483648.0, 4e9,   1e-300};
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 9:
      return kIntEdges[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kIntEdges) - 1)];
    case 10:
      return fdp.ConsumeIntegral<int64_t>();
    case 11:
      return fdp.ConsumeIntegral<uint64_t>();
    case 12:
      return kFloatEdges[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kFloatEdges) - 1)];
    case 13:
      return fdp.ConsumeRandomLengthString(24);
    case 14:
      return fdp.ConsumeBool() ? json(fdp.ConsumeBool()) : json(nullptr);
    case 15:
      return json::array({plausible});
    default:
      return plausible;
  }
}

inline nlohmann::json FuzzedEntry(FuzzedDataProvider& fdp, int shard, int64_t begin, int64_t end,
                                  int slots) {
  nlohmann::json e = {{"shard", Fuzzed(fdp, shard)},
                      {"file", Fuzzed(fdp, ShardFileName(shard))},
                      {"range_begin", Fuzzed(fdp, begin)},
                      {"range_end", Fuzzed(fdp, end)},
                      {"state_slots", Fuzzed(fdp, slots)},
                      {"bytes", Fuzzed(fdp, (1 + slots) * (end - begin) * 4)},
                      {"xxh64", Fuzzed(fdp, "c59671cbed04ce7d")}};
  if (fdp.ConsumeBool()) e["snapshot_pause_us"] = Fuzzed(fdp, 20);
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {  // a missing key
    auto it = e.begin();
    std::advance(it, fdp.ConsumeIntegralInRange<size_t>(0, e.size() - 1));
    e.erase(it);
  }
  return e;
}

inline std::string FuzzedShardEntryJson(FuzzedDataProvider& fdp) {
  const int shard = fdp.ConsumeIntegralInRange<int>(0, 3);
  const int64_t begin = fdp.ConsumeIntegralInRange<int64_t>(0, 1000);
  return Dump(FuzzedEntry(fdp, shard, begin, begin + fdp.ConsumeIntegralInRange<int64_t>(0, 1000),
                          fdp.ConsumeIntegralInRange<int>(0, 3)),
              -1);
}

// Any JSON value, nested up to `depth`: what a manifest's "spec" may hold.
inline nlohmann::json FuzzedValue(FuzzedDataProvider& fdp, int depth) {
  using nlohmann::json;
  switch (fdp.ConsumeIntegralInRange<int>(0, depth > 0 ? 5 : 3)) {
    case 0:
      return fdp.ConsumeIntegral<int64_t>();
    case 1:
      return fdp.ConsumeFloatingPointInRange<double>(-1e308, 1e308);
    case 2:
      return fdp.ConsumeRandomLengthString(16);
    case 3:
      return fdp.ConsumeBool() ? json(fdp.ConsumeBool()) : json(nullptr);
    case 4: {
      json a = json::array();
      for (int i = fdp.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) {
        a.push_back(FuzzedValue(fdp, depth - 1));
      }
      return a;
    }
    default: {
      json o = json::object();
      for (int i = fdp.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) {
        o[fdp.ConsumeRandomLengthString(8)] = FuzzedValue(fdp, depth - 1);
      }
      return o;
    }
  }
}

inline std::string FuzzedManifestJson(FuzzedDataProvider& fdp) {
  const int num_shards = fdp.ConsumeIntegralInRange<int>(1, 4);
  const int slots = fdp.ConsumeIntegralInRange<int>(0, 3);
  nlohmann::json shards = nlohmann::json::array();
  int64_t begin = 0;
  for (int s = 0; s < num_shards; ++s) {
    const int64_t end = begin + fdp.ConsumeIntegralInRange<int64_t>(0, 1000);
    shards.push_back(FuzzedEntry(fdp, s, begin, end, slots));
    begin = end;
  }
  nlohmann::json m = {{"format", Fuzzed(fdp, "tessel-checkpoint")},
                      {"version", Fuzzed(fdp, kCheckpointFormatVersion)},
                      {"job", Fuzzed(fdp, "mlp")},
                      {"step", Fuzzed(fdp, 20)},
                      {"epoch", Fuzzed(fdp, 2)},
                      {"num_shards", Fuzzed(fdp, num_shards)},
                      {"num_params", Fuzzed(fdp, begin)},
                      {"state_slots", Fuzzed(fdp, slots)},
                      {"created_unix_ms", Fuzzed(fdp, int64_t{1795312842737})},
                      {"spec", FuzzedValue(fdp, 3)},
                      {"shards", shards}};
  return Dump(m, fdp.ConsumeBool() ? 2 : -1);
}

// The text a target parses: the input itself, or a generated document.
inline std::string InputText(const uint8_t* data, size_t size,
                             std::string (*generate)(FuzzedDataProvider&)) {
  if (size > 0 && data[0] == kStructuredTag) {
    FuzzedDataProvider fdp(data + 1, size - 1);
    std::string text = generate(fdp);
    ShowGeneratedInput(text);
    return text;
  }
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_CHECKPOINT_JSON_GEN_H_
