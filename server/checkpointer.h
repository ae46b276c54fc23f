// Checkpointer: writes shard snapshots in the background, finalizes
// checkpoints (shard 0 writes the manifest once every shard's file is in),
// keeps the last K, and reads checkpoints back: list, verify, and load a
// range re-sliced from whatever shard count wrote it.
//
// Writing order for step N of job J, per shard s: `shard-s.bin` (params then
// optimizer state), then `shard-s.json` (its checksum and range); shard 0
// writes those of the shards holding no element too (empty files: they take
// no part in the steps, core/layout.h). Shard 0 then waits for every shard's
// meta, writes `MANIFEST.json` last, and prunes old checkpoints. Each file
// goes through CheckpointStore::Put (temporary name, fsync, rename, fsync of
// the directory), so a crash leaves at worst a directory without a manifest,
// which List ignores and pruning removes.
//
// A checkpoint that fails (a shard's write: a full or failing disk; or its
// finalization: an error, or a shard's file missing at the deadline) is
// removed whole: the failing shard removes the step's directory at once,
// and shard 0 again when it gives the step up (at once when its own file is
// gone, else at the finalize deadline: a late shard may have written into
// it). Unfinished directories older than a complete checkpoint are pruned
// as before. So no partial checkpoint stays, filling a full disk further,
// and the last complete one stays to roll back to. Progress() says since
// which step checkpoints have been failing, and why.
//
// Threads: Submit from any thread; one writer thread and one finalizer
// thread; the read side is called from gRPC threads. Thread-safe.
#ifndef TESSEL_SERVER_CHECKPOINTER_H_
#define TESSEL_SERVER_CHECKPOINTER_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/checkpoint_manifest.h"
#include "core/layout.h"
#include "server/checkpoint_store.h"

namespace tessel {

// One shard's state at a step boundary, copied out of the live job.
struct ShardSnapshot {
  std::string job;
  int shard = 0;
  int num_shards = 1;
  int64_t num_params = 0;
  int64_t step = 0;
  int64_t epoch = 0;
  Range range;
  std::string spec_json;
  int keep_last = 3;
  std::vector<float> values;
  std::vector<std::vector<float>> state;
  int64_t pause_us = 0;
  std::vector<int64_t> tensor_skips;  // per tensor, steps that skipped it; empty if none
  std::string creator;                // the job's creator (ShardJob::creator); shard 0's is kept
  // Shard 0 only: the shards whose range is empty, which take no part in the
  // steps (core/layout.h): shard 0 writes their parts (no data, an entry),
  // so every checkpoint it snapshots can complete.
  std::vector<std::pair<int, Range>> empty_shards;
};

struct CheckpointProgress {
  int64_t last_step = -1;  // last checkpoint this server's shard file was written for
  std::string error;       // the last failure while checkpoints fail; "" once one succeeds
  // The first step whose checkpoint failed since the last that succeeded
  // (shard 0: was finalized; other shards: their file was written); -1 if
  // the last one succeeded.
  int64_t failing_since = -1;
};

class Checkpointer {
 public:
  // `store` may be null: checkpoints are then refused with a message saying
  // how to enable them (--checkpoint_dir). At most `max_queued` snapshots
  // wait for the writer (0 = no bound): each is a copy of a shard's state,
  // so an unbounded backlog behind a slow disk grows memory without limit
  // and makes recoveries roll back ever further.
  Checkpointer(std::unique_ptr<CheckpointStore> store,
               absl::Duration finalize_timeout = absl::Minutes(10), int max_queued = 8);
  ~Checkpointer();

  bool enabled() const { return store_ != nullptr; }
  // Queues a snapshot for the writer. With `wait` (the server's compute
  // thread), first waits while max_queued snapshots are queued: backpressure,
  // the step's parameters are served once the disk has caught up, so
  // training runs at the speed checkpoints can be written. Every shard
  // writes every snapshot it takes (skipping one would leave checkpoints
  // that never complete). Without `wait` (threads that must not block: the
  // transport's, RPC handlers) it queues at once. Fails only when the
  // checkpointer is disabled or shutting down.
  absl::Status Submit(ShardSnapshot snapshot, bool wait = true);
  // Times Submit waited for room, and for how long in all.
  // Snapshots queued or being written.
  int64_t queued();
  int64_t backpressure_waits();
  absl::Duration backpressure_time();
  // This process's shards of `job` together: the newest step written, and
  // while any fails, the earliest failing_since and its error.
  CheckpointProgress Progress(const std::string& job);
  // Blocks until every submitted snapshot is written (tests, shutdown).
  void Drain();
  // Recovery rolled `job` back to `step`: snapshots of later steps that are
  // still queued or waiting for their manifest are dropped (a replay writes
  // them again). Returns how many were dropped.
  int Forget(const std::string& job, int64_t step);

  // Complete checkpoints of a job, oldest first.
  absl::StatusOr<std::vector<Manifest>> List(const std::string& job);
  // step -1 = latest. NotFound names the job, step and store location.
  absl::StatusOr<Manifest> Read(const std::string& job, int64_t step);
  // Recomputes every file's checksum; one line per problem, naming the file.
  absl::StatusOr<std::vector<std::string>> Verify(const Manifest& m);
  absl::Status Delete(const std::string& job, int64_t step);
  // Fills [target.begin, target.end) of params (values) and each state slot
  // from the checkpoint, verifying the checksum of every file it reads.
  absl::Status Load(const Manifest& m, Range target, float* values,
                    const std::vector<float*>& state);
  // Fills `values` with [target.begin, target.end) of the checkpoint's
  // parameters (no optimizer state), reading only those bytes: checksums are
  // not checked here (Verify first). OutOfRange if `target` is not inside
  // [0, m.num_params).
  absl::Status ReadParams(const Manifest& m, Range target, float* values);

 private:
  struct Pending {
    std::string job;
    int64_t step;
    int num_shards;
    int keep_last;
    Manifest manifest;  // filled as metas arrive
    absl::Time deadline;
    absl::Status failed;  // shard 0's own write failed: only the removal is left
  };
  void WriterLoop();
  void FinalizerLoop();
  absl::Status WriteShard(const ShardSnapshot& s);
  // One shard's data file (`chunks`) and then its entry, `e` (shard, range,
  // slots, pause and skips given; file, bytes and checksum filled in).
  absl::Status WritePart(const std::string& dir, const std::vector<Chunk>& chunks, ShardEntry* e);
  absl::Status TryFinalize(Pending& p, bool* done);
  // Keeps the newest `keep_last` complete checkpoints; removes unfinished
  // directories of steps before the newest complete one.
  void Prune(const std::string& job, int keep_last);
  // A checkpoint of `step` failed: the whole directory goes (best effort).
  void RemoveFailed(const std::string& job, int64_t step);
  // Records a failure of `step` (under mu_).
  void FailedLocked(const std::string& job, int shard, int64_t step, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> FileChecksum(const std::string& path, int64_t bytes);
  absl::Status NotEnabled() const;

  std::unique_ptr<CheckpointStore> store_;
  const absl::Duration finalize_timeout_;
  const int max_queued_;
  absl::Mutex mu_;
  int64_t backpressure_waits_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration backpressure_time_ ABSL_GUARDED_BY(mu_);
  std::deque<ShardSnapshot> queue_ ABSL_GUARDED_BY(mu_);
  int writing_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  size_t finalizing_ ABSL_GUARDED_BY(mu_) = 0;  // taken out of pending_ by the finalizer
  // By (job, shard): a process may hold several shards of a job.
  std::map<std::pair<std::string, int>, CheckpointProgress> progress_ ABSL_GUARDED_BY(mu_);
  // By job: the newest step shard 0 finalized; an older one still pending
  // can no longer complete (pruning removed its directory).
  std::map<std::string, int64_t> resolved_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
  std::thread finalizer_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_CHECKPOINTER_H_
