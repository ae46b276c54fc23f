#!/usr/bin/env bash
# Regenerates the seed corpora under fuzz/corpus/ (they are committed; run this
# only to refresh them, then review the diff). See fuzz/README.md.
#
# Usage: fuzz/make_corpus.sh [CHECKPOINT_STEP_DIR]
#   CHECKPOINT_STEP_DIR  a real checkpoint, e.g. ckpt/mlp/step-0000000020: its
#                        MANIFEST.json and shard-*.json become the manifest and
#                        shard-entry seeds. Without it the committed
#                        fuzz/corpus/manifest/real_manifest.json is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=fuzz/corpus
mkdir -p "$corpus"/{wire_header,npy,manifest,shard_entry,job_spec,ucx_descriptor,data_plane,worker_frames,peer_group,ucx_receiver}

if [ $# -ge 1 ]; then
  cp "$1/MANIFEST.json" "$corpus/manifest/real_manifest.json"
  for f in "$1"/shard-*.json; do cp "$f" "$corpus/shard_entry/real_$(basename "$f")"; done
fi
real="$corpus/manifest/real_manifest.json"
[ -f "$real" ] || { echo "make_corpus: no $real; pass a checkpoint folder" >&2; exit 1; }

# Invalid manifests and entries: one defect each, from the real ones.
sed 's/"version": 1/"version": 2/' "$real" >"$corpus/manifest/bad_version.json"
sed -e '0,/"range_end": 320/s//"range_end": 300/' -e '0,/"bytes": 3840/s//"bytes": 3600/' "$real" \
  >"$corpus/manifest/bad_range_gap.json"
sed 's/"num_shards": 2,/"num_shards": 3,/' "$real" >"$corpus/manifest/bad_shard_count.json"
head -c 200 "$real" >"$corpus/manifest/bad_truncated.json"
entries=("$corpus"/shard_entry/real_shard-*.json)
entry="${entries[0]}"
sed 's/"bytes": [0-9]*/"bytes": 12/' "$entry" >"$corpus/shard_entry/bad_bytes.json"
sed 's/"xxh64": "[0-9a-f]*"/"xxh64": "C59671CBED04CE7D"/' "$entry" >"$corpus/shard_entry/bad_checksum.json"
sed 's/"file": "shard-0000\([0-9]\).bin"/"file": "..\/shard-0000\1.bin"/' "$entry" \
  >"$corpus/shard_entry/bad_file.json"

# numpy's own files (/usr/bin/python3 has numpy): the layouts we read, and
# ones we must refuse.
/usr/bin/python3 - "$corpus/npy" <<'EOF'
import sys
import numpy as np
d = sys.argv[1]
ramp = lambda n: np.arange(n, dtype=np.float32) * np.float32(0.25) - np.float32(3)
np.save(f"{d}/numpy_0.npy", ramp(0))
np.save(f"{d}/numpy_5.npy", ramp(5))
np.save(f"{d}/numpy_special.npy", np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], dtype=np.float32))
np.save(f"{d}/bad_numpy_f8.npy", ramp(3).astype(np.float64))
np.save(f"{d}/bad_numpy_2d.npy", ramp(6).reshape(2, 3))
np.save(f"{d}/bad_numpy_fortran.npy", np.asfortranarray(ramp(6).reshape(2, 3)))
np.save(f"{d}/bad_numpy_big_endian.npy", ramp(3).astype(">f4"))
with open(f"{d}/numpy_5.npy", "rb") as f:
    good = f.read()
open(f"{d}/bad_truncated.npy", "wb").write(good[:-3])
open(f"{d}/bad_trailing.npy", "wb").write(good + b"xy")
# Another legal spelling of the header dict (double quotes, key order, no padding).
hdr = b'{"shape": (2, ), "fortran_order": False, "descr": "<f4"}\n'
open(f"{d}/other_spelling.npy", "wb").write(
    b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr + ramp(2).tobytes())
EOF

# Structure-aware seeds (first byte 0x01: the target generates its input from
# the bytes after it; see checkpoint_json_gen.h and npy_fuzzer.cc).
/usr/bin/python3 - "$corpus" <<'EOF'
import random, sys
r = random.Random(1)
for t in ("npy", "manifest", "shard_entry", "job_spec"):
    for i in range(3):
        with open(f"{sys.argv[1]}/{t}/structured_{i}", "wb") as f:
            f.write(b"\x01" + bytes(r.randrange(256) for _ in range(96)))
EOF

# Our encoders: frame headers, WriteNpyF32 files, serialized JobSpecs, UCX
# descriptors and releases, frame sequences (fuzz/frame_seeds.h).
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
protoc --proto_path=. --cpp_out="$tmp" proto/shard.proto
# shellcheck disable=SC2046
"${CXX:-g++}" -std=c++17 -O1 -I. -I"$tmp" fuzz/make_corpus.cc core/wire.cc core/npy.cc \
  core/checkpoint_manifest.cc core/layout.cc core/optimizer.cc core/optimizer_params.cc \
  core/optimizer_scalars.cc core/topk.cc \
  transport/ucx/internal/descriptor_codec.cc worker/peer_message.cc "$tmp/proto/shard.pb.cc" \
  -o "$tmp/make_corpus" $(pkg-config --cflags --libs absl_strings absl_str_format absl_status \
  absl_statusor absl_synchronization absl_hash absl_raw_hash_set protobuf libxxhash)
"$tmp/make_corpus" "$corpus" "$real"
for d in "$corpus"/*/; do echo "make_corpus: $d $(find "$d" -type f | wc -l) seeds"; done
