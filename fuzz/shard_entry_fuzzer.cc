// Fuzz target: tessel::ParseShardEntry, the per-shard meta file
// (`shard-SSSSS.json`) of a checkpoint.
//
// Inputs are JSON text, or (first byte kStructuredTag) bytes that
// checkpoint_json_gen.h turns into a document with every key.
//
// Invariants:
//   - rejection is InvalidArgument, never a crash or an escaping exception;
//   - an accepted entry is consistent (file name, range, slots, byte count
//     computed without overflow, checksum spelling) and holds exactly the
//     numbers the JSON has;
//   - it round-trips: ShardEntryToJson then ParseShardEntry gives it back, and
//     printing that again gives the same text.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint_manifest.h"
#include "fuzz/checkpoint_json_gen.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/manifest_check.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = tessel::fuzz::InputText(data, size, tessel::fuzz::FuzzedShardEntryJson);
  absl::StatusOr<tessel::ShardEntry> e = tessel::ParseShardEntry(text);
  if (!e.ok()) {
    tessel::fuzz::CheckRefusal(e.status());
    return 0;
  }
  tessel::fuzz::CheckEntry(*e);
  tessel::fuzz::CheckEntryExact(nlohmann::json::parse(text), *e);
  tessel::fuzz::CheckJsonRoundTrip(*e, tessel::ShardEntryToJson, tessel::ParseShardEntry,
                                   tessel::fuzz::SameEntry, "entry");
  return 0;
}
