// Fuzz target: tessel::ParseManifest, a checkpoint's MANIFEST.json (read on
// restore, verify and list; the file may be damaged or hand-edited).
//
// Inputs are JSON text, or (first byte kStructuredTag) bytes that
// checkpoint_json_gen.h turns into a document with every key.
//
// Invariants:
//   - rejection is InvalidArgument, never a crash or an escaping exception;
//   - an accepted manifest lists num_shards consistent entries, sorted, whose
//     ranges tile [0, num_params), and holds exactly the numbers the JSON has;
//   - it round-trips: ManifestToJson then ParseManifest gives it back, and
//     printing that again gives the same text;
//   - ReslicePlan tiles any target range exactly.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint_manifest.h"
#include "fuzz/checkpoint_json_gen.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/manifest_check.h"
#include "nlohmann/json.hpp"

namespace {

void CheckPlanTiles(const tessel::Manifest& m, tessel::Range target) {
  const std::vector<tessel::Piece> plan = tessel::ReslicePlan(m, target);
  int64_t dst = 0;
  for (const tessel::Piece& p : plan) {
    FUZZ_CHECK(p.old_shard >= 0 && p.old_shard < m.num_shards && p.count > 0,
               absl::StrCat("bad piece from shard ", p.old_shard, " of ", p.count, " elements"));
    const tessel::ShardEntry& e = m.shards[p.old_shard];
    FUZZ_CHECK(p.dst_offset == dst, absl::StrCat("gap or overlap at ", dst));
    FUZZ_CHECK(p.src_offset >= 0 && p.src_offset + p.count <= e.range_end - e.range_begin,
               absl::StrCat("piece reads outside shard ", e.shard));
    FUZZ_CHECK(e.range_begin + p.src_offset == target.begin + p.dst_offset,
               "piece copies the wrong elements");
    dst += p.count;
  }
  FUZZ_CHECK(dst == target.size(),
             absl::StrCat("plan fills ", dst, " of ", target.size(), " elements"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = tessel::fuzz::InputText(data, size, tessel::fuzz::FuzzedManifestJson);
  absl::StatusOr<tessel::Manifest> m = tessel::ParseManifest(text);
  if (!m.ok()) {
    tessel::fuzz::CheckRefusal(m.status());
    return 0;
  }
  FUZZ_CHECK(!m->job.empty() && m->step >= 0 && m->num_params >= 1 && m->num_shards >= 1 &&
                 static_cast<int>(m->shards.size()) == m->num_shards,
             "accepted manifest has no job, a negative step or a wrong shard count");
  int64_t expect = 0;
  for (int s = 0; s < m->num_shards; ++s) {
    const tessel::ShardEntry& e = m->shards[s];
    tessel::fuzz::CheckEntry(e);
    FUZZ_CHECK(e.shard == s && e.range_begin == expect && e.state_slots == m->state_slots,
               absl::StrCat("shard ", s, " does not continue the ranges at ", expect));
    expect = e.range_end;
  }
  FUZZ_CHECK(expect == m->num_params,
             absl::StrCat("ranges end at ", expect, ", not at ", m->num_params));
  const nlohmann::json j = nlohmann::json::parse(text);
  tessel::fuzz::CheckExact(j, "version", tessel::kCheckpointFormatVersion, "manifest");
  tessel::fuzz::CheckExact(j, "step", m->step, "manifest");
  tessel::fuzz::CheckExact(j, "epoch", m->epoch, "manifest");
  tessel::fuzz::CheckExact(j, "num_shards", m->num_shards, "manifest");
  tessel::fuzz::CheckExact(j, "num_params", m->num_params, "manifest");
  tessel::fuzz::CheckExact(j, "state_slots", m->state_slots, "manifest");
  tessel::fuzz::CheckExact(j, "created_unix_ms", m->created_unix_ms, "manifest");
  for (const nlohmann::json& entry_json : j.at("shards")) {
    absl::StatusOr<tessel::ShardEntry> e = tessel::ParseShardEntry(entry_json.dump());
    FUZZ_CHECK(e.ok(), absl::StrCat("an entry of an accepted manifest is rejected alone: ",
                                    e.status().ToString()));
    tessel::fuzz::CheckEntryExact(entry_json, *e);
  }

  tessel::fuzz::CheckJsonRoundTrip(*m, tessel::ManifestToJson, tessel::ParseManifest,
                                   tessel::fuzz::SameManifest, "manifest");

  CheckPlanTiles(*m, tessel::Range{0, m->num_params});
  CheckPlanTiles(*m, tessel::Range{m->num_params / 3, m->num_params - m->num_params / 4});
  return 0;
}
