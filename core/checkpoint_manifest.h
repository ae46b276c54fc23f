// Checkpoint manifest: what a complete checkpoint contains, and how to cut
// its shard files into the ranges of a different shard count.
//
// A checkpoint of job J at step N is a directory `J/step-NNNNNNNNNN/` holding
// one data file per shard (`shard-SSSSS.bin`: the shard's params, then each
// optimizer state slot, float32 little-endian, each `range_end -
// range_begin` elements), one small meta file per shard (`shard-SSSSS.json`,
// that shard's entry below), and `MANIFEST.json`, written last. A directory
// without a valid manifest is not a checkpoint. See docs/checkpoints.md.
//
// Pure logic: JSON in and out, validation, re-slicing plans; no I/O.
//
// Example:
//   absl::StatusOr<Manifest> m = ParseManifest(text);
//   std::vector<Piece> plan = ReslicePlan(*m, Range{1000, 2000});
#ifndef TESSEL_CORE_CHECKPOINT_MANIFEST_H_
#define TESSEL_CORE_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/layout.h"

namespace tessel {

inline constexpr char kManifestName[] = "MANIFEST.json";
inline constexpr int kCheckpointFormatVersion = 1;

struct ShardEntry {
  int shard = 0;
  std::string file;  // data file name within the checkpoint directory
  int64_t range_begin = 0;
  int64_t range_end = 0;
  int state_slots = 0;
  int64_t bytes = 0;              // = (1 + state_slots) * (range_end - range_begin) * 4
  std::string xxh64;              // 16 hex digits over the whole data file
  int64_t snapshot_pause_us = 0;  // time training paused for the in-memory copy
  // This shard's per-tensor skips (right for the tensors in its range); the
  // manifest's tensor_skips merges them. Empty (absent in the JSON) if none.
  std::vector<int64_t> tensor_skips;
};

struct Manifest {
  std::string job;
  int64_t step = 0;   // updates applied when the snapshot was taken
  int64_t epoch = 0;  // membership epoch at the snapshot
  int num_shards = 0;
  int64_t num_params = 0;
  int state_slots = 0;
  std::string spec_json;  // the JobSpec (protobuf JSON), layout and optimizer
  int64_t created_unix_ms = 0;
  // Who created the job (rpc/caller.h Caller::Identity: a token's
  // fingerprint or a certificate's subject, never a secret); "creator" in
  // the JSON only when known, absent ("" here) otherwise.
  std::string creator;
  std::vector<ShardEntry> shards;  // sorted by shard, contiguous ranges
  // Per tensor, the steps that left it without an update (no gradient on any
  // rank: core/tensor_steps.h); "tensor_skips" in the JSON only when some
  // tensor was skipped, absent (empty here) otherwise.
  std::vector<int64_t> tensor_skips;
};

std::string CheckpointDir(const std::string& job, int64_t step);
std::string ShardFileName(int shard);
std::string ShardMetaName(int shard);

std::string ShardEntryToJson(const ShardEntry& e);
absl::StatusOr<ShardEntry> ParseShardEntry(const std::string& json);
std::string ManifestToJson(const Manifest& m);
// Validates everything: format and version, types, shard files named as
// expected, ranges contiguous from 0 to num_params, byte counts consistent.
absl::StatusOr<Manifest> ParseManifest(const std::string& json);

// One contiguous copy from an old shard file into a new range.
struct Piece {
  int old_shard = 0;
  int64_t src_offset = 0;  // element offset within the old shard's range
  int64_t dst_offset = 0;  // element offset within the new range
  int64_t count = 0;
};
// The pieces that fill `target` (a range of the flat vector) from the
// manifest's shards, in order; they tile `target` exactly.
std::vector<Piece> ReslicePlan(const Manifest& m, Range target);

// 16 hex digits of XXH64 (seed 0) of a byte string.
std::string Xxh64Hex(const void* data, size_t size);

}  // namespace tessel

#endif  // TESSEL_CORE_CHECKPOINT_MANIFEST_H_
