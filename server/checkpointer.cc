#include "server/checkpointer.h"

#include <xxhash.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/tensor_steps.h"
#include "runtime/log.h"
#include "server/checkpoint_metrics.h"

namespace tessel {
namespace {

Chunk AsChunk(const std::vector<float>& v) {
  return Chunk(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
}

int64_t StepOfDir(const std::string& name) {
  int64_t step = -1;
  if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) return -1;
  return step;
}

}  // namespace

Checkpointer::Checkpointer(std::unique_ptr<CheckpointStore> store, absl::Duration finalize_timeout,
                           int max_queued)
    : store_(std::move(store)), finalize_timeout_(finalize_timeout), max_queued_(max_queued) {
  if (store_ == nullptr) return;
  writer_ = std::thread([this] { WriterLoop(); });
  finalizer_ = std::thread([this] { FinalizerLoop(); });
}

Checkpointer::~Checkpointer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (writer_.joinable()) writer_.join();
  if (finalizer_.joinable()) finalizer_.join();
}

absl::Status Checkpointer::NotEnabled() const {
  return absl::FailedPreconditionError(
      "checkpoints are not enabled on this shard server; start it with "
      "--checkpoint_dir=DIR (a directory every shard server of the pool shares)");
}

absl::Status Checkpointer::Submit(ShardSnapshot snapshot, bool wait) {
  if (!enabled()) return NotEnabled();
  absl::MutexLock lock(&mu_);
  if (wait && max_queued_ > 0 && static_cast<int>(queue_.size()) >= max_queued_ && !stop_) {
    TESSEL_LOG(WARNING) << "checkpoint writer is " << queue_.size()
                        << " snapshot(s) behind; holding step " << snapshot.step << " of job '"
                        << snapshot.job
                        << "' until it catches up (checkpoints are taken faster than the disk "
                           "writes them: raise --checkpoint_every_steps)";
    const absl::Time start = absl::Now();
    mu_.Await(absl::Condition(
        +[](Checkpointer* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->stop_ || static_cast<int>(c->queue_.size()) < c->max_queued_;
        },
        this));
    ++backpressure_waits_;
    backpressure_time_ += absl::Now() - start;
  }
  if (stop_) {
    return absl::UnavailableError(absl::StrCat("checkpoint of job '", snapshot.job, "' step ",
                                               snapshot.step,
                                               " not taken: the server is shutting down"));
  }
  queue_.push_back(std::move(snapshot));
  return absl::OkStatus();
}

int64_t Checkpointer::queued() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size()) + writing_;
}

int64_t Checkpointer::backpressure_waits() {
  absl::MutexLock lock(&mu_);
  return backpressure_waits_;
}

absl::Duration Checkpointer::backpressure_time() {
  absl::MutexLock lock(&mu_);
  return backpressure_time_;
}

CheckpointProgress Checkpointer::Progress(const std::string& job) {
  absl::MutexLock lock(&mu_);
  CheckpointProgress all;
  for (auto it = progress_.lower_bound({job, 0}); it != progress_.end() && it->first.first == job;
       ++it) {
    const CheckpointProgress& p = it->second;
    all.last_step = std::max(all.last_step, p.last_step);
    if (p.failing_since < 0) continue;
    all.failing_since =
        all.failing_since < 0 ? p.failing_since : std::min(all.failing_since, p.failing_since);
    absl::StrAppend(&all.error, all.error.empty() ? "" : "; ", "shard ", it->first.second, ": ",
                    p.error);
  }
  return all;
}

void Checkpointer::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Checkpointer* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
        return c->queue_.empty() && c->writing_ == 0 && c->pending_.empty() && c->finalizing_ == 0;
      },
      this));
}

int Checkpointer::Forget(const std::string& job, int64_t step) {
  absl::MutexLock lock(&mu_);
  const size_t before = queue_.size() + pending_.size();
  queue_.erase(
      std::remove_if(queue_.begin(), queue_.end(),
                     [&](const ShardSnapshot& s) { return s.job == job && s.step > step; }),
      queue_.end());
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Pending& p) { return p.job == job && p.step > step; }),
                 pending_.end());
  return static_cast<int>(before - queue_.size() - pending_.size());
}

void Checkpointer::WriterLoop() {
  for (;;) {
    ShardSnapshot s;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Checkpointer* c)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->stop_ || !c->queue_.empty(); },
          this));
      if (queue_.empty()) return;
      s = std::move(queue_.front());
      queue_.pop_front();
      ++writing_;
    }
    const absl::Time t0 = absl::Now();
    absl::Status st = WriteShard(s);
    int64_t bytes = static_cast<int64_t>(s.values.size());
    for (const auto& slot : s.state) bytes += static_cast<int64_t>(slot.size());
    CheckpointWritten(s.job, s.shard, absl::ToDoubleSeconds(absl::Now() - t0),
                      bytes * static_cast<int64_t>(sizeof(float)), st.ok());
    if (!st.ok()) RemoveFailed(s.job, s.step);  // whoever wrote into it: the step failed
    absl::MutexLock lock(&mu_);
    --writing_;
    CheckpointProgress& p = progress_[{s.job, s.shard}];
    if (st.ok()) {
      p.last_step = s.step;
      if (s.shard != 0) {  // shard 0's succeeds once finalized
        p.error.clear();
        p.failing_since = -1;
      }
      TESSEL_LOG(INFO) << "checkpoint " << s.job << " step " << s.step << " shard " << s.shard
                       << " written in " << absl::FormatDuration(absl::Now() - t0)
                       << " (training paused " << s.pause_us << " us for the copy)";
      if (s.shard == 0) {
        Pending pending{s.job,           s.step,     s.num_shards,
                        s.keep_last,     Manifest{}, absl::Now() + finalize_timeout_,
                        absl::OkStatus()};
        pending.manifest.job = s.job;
        pending.manifest.step = s.step;
        pending.manifest.epoch = s.epoch;
        pending.manifest.num_shards = s.num_shards;
        pending.manifest.num_params = s.num_params;
        pending.manifest.state_slots = static_cast<int>(s.state.size());
        pending.manifest.spec_json = s.spec_json;
        pending.manifest.creator = s.creator;
        pending_.push_back(std::move(pending));
      }
    } else {
      FailedLocked(s.job, s.shard, s.step, std::string(st.message()));
      TESSEL_LOG(ERROR) << "checkpoint " << s.job << " step " << s.step << " shard " << s.shard
                        << " failed: " << st << "; its directory was removed, so no partial "
                        << "checkpoint stays (checkpoints failing since step " << p.failing_since
                        << ")";
      if (s.shard == 0) {  // still resolves the step: the other shards' files go too
        Pending failed{s.job, s.step, s.num_shards, s.keep_last, Manifest{}, absl::Now(), st};
        pending_.push_back(std::move(failed));
      }
    }
  }
}

absl::Status Checkpointer::WriteShard(const ShardSnapshot& s) {
  const std::string dir = CheckpointDir(s.job, s.step);
  std::vector<Chunk> chunks = {AsChunk(s.values)};
  for (const auto& slot : s.state) chunks.push_back(AsChunk(slot));
  ShardEntry e;
  e.shard = s.shard;
  e.range_begin = s.range.begin;
  e.range_end = s.range.end;
  e.state_slots = static_cast<int>(s.state.size());
  e.snapshot_pause_us = s.pause_us;
  e.tensor_skips = s.tensor_skips;
  TESSEL_RETURN_IF_ERROR(WritePart(dir, chunks, &e));
  // The shards without elements take no part in the steps (core/layout.h):
  // their parts (no data, the entry) are written here, with the manifest
  // writer's, exactly as they would write them.
  for (const auto& [shard, range] : s.empty_shards) {
    ShardEntry empty;
    empty.shard = shard;
    empty.range_begin = range.begin;
    empty.range_end = range.end;
    empty.state_slots = static_cast<int>(s.state.size());
    TESSEL_RETURN_IF_ERROR(WritePart(dir, {}, &empty));
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::WritePart(const std::string& dir, const std::vector<Chunk>& chunks,
                                     ShardEntry* e) {
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  int64_t bytes = 0;
  for (const Chunk& c : chunks) {
    XXH64_update(h, c.data(), c.size());
    bytes += static_cast<int64_t>(c.size());
  }
  const std::string sum = absl::StrFormat("%016x", XXH64_digest(h));
  XXH64_freeState(h);
  e->file = ShardFileName(e->shard);
  e->bytes = bytes;
  e->xxh64 = sum;
  TESSEL_RETURN_IF_ERROR(store_->Put(dir + "/" + e->file, chunks));
  const std::string meta = ShardEntryToJson(*e);
  return store_->Put(dir + "/" + ShardMetaName(e->shard),
                     {Chunk(reinterpret_cast<const uint8_t*>(meta.data()), meta.size())});
}

void Checkpointer::FailedLocked(const std::string& job, int shard, int64_t step,
                                const std::string& why) {
  CheckpointProgress& p = progress_[{job, shard}];
  p.error = absl::StrCat("step ", step, ": ", why);
  if (p.failing_since < 0) p.failing_since = step;
}

void Checkpointer::RemoveFailed(const std::string& job, int64_t step) {
  absl::Status s = store_->RemoveAll(CheckpointDir(job, step));
  if (!s.ok() && !absl::IsNotFound(s)) {
    TESSEL_LOG(WARNING) << "removing the failed checkpoint of step " << step << ": " << s;
  }
}

absl::Status Checkpointer::TryFinalize(Pending& p, bool* done) {
  *done = false;
  if (!p.failed.ok()) {  // shard 0's own write failed: give the step up now
    RemoveFailed(p.job, p.step);
    *done = true;
    return absl::OkStatus();
  }
  const std::string dir = CheckpointDir(p.job, p.step);
  std::vector<ShardEntry> entries;
  for (int s = 0; s < p.num_shards; ++s) {
    auto meta = store_->Get(dir + "/" + ShardMetaName(s));
    if (!meta.ok()) {
      // Shard 0's own file is gone: a shard whose write failed removed the
      // step. Give it up now rather than at the deadline.
      if (absl::IsNotFound(meta.status()) && s == 0) {
        return absl::AbortedError("another shard's write failed and removed the step");
      }
      if (absl::IsNotFound(meta.status())) return absl::OkStatus();  // not yet
      return meta.status();
    }
    TESSEL_ASSIGN_OR_RETURN(auto e, ParseShardEntry(*meta));
    entries.push_back(e);
  }
  p.manifest.shards = entries;
  p.manifest.tensor_skips.clear();
  for (const ShardEntry& e : entries) MergeSkips(e.tensor_skips, &p.manifest.tensor_skips);
  if (NoSkips(p.manifest.tensor_skips)) p.manifest.tensor_skips.clear();
  p.manifest.created_unix_ms = absl::ToUnixMillis(absl::Now());
  const std::string text = ManifestToJson(p.manifest);
  TESSEL_RETURN_IF_ERROR(ParseManifest(text));
  TESSEL_RETURN_IF_ERROR(
      store_->Put(dir + "/" + kManifestName,
                  {Chunk(reinterpret_cast<const uint8_t*>(text.data()), text.size())}));
  *done = true;
  CheckpointFinalized(p.job, p.step);
  TESSEL_LOG(INFO) << "checkpoint " << p.job << " step " << p.step << " complete (" << p.num_shards
                   << " shards)";
  {
    absl::MutexLock lock(&mu_);
    resolved_[p.job] = std::max(resolved_[p.job], p.step);
    CheckpointProgress& progress = progress_[{p.job, 0}];
    // An older step finalized late says nothing of the newer ones that failed.
    if (progress.failing_since >= 0 && p.step > progress.failing_since) {
      TESSEL_LOG(WARNING) << "checkpoint " << p.job << ": complete again at step " << p.step
                          << " after failing since step " << progress.failing_since;
      progress.error.clear();
      progress.failing_since = -1;
    }
  }
  Prune(p.job, p.keep_last);
  return absl::OkStatus();
}

void Checkpointer::FinalizerLoop() {
  for (;;) {
    std::vector<Pending> work;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ && pending_.empty()) return;
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](Checkpointer* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->stop_; },
              this),
          absl::Milliseconds(50));
      if (stop_) {
        pending_.clear();
        return;
      }
      work.swap(pending_);
      finalizing_ = work.size();
    }
    std::vector<Pending> keep;
    for (Pending& p : work) {
      {
        absl::MutexLock lock(&mu_);
        auto r = resolved_.find(p.job);
        if (r != resolved_.end() && p.step < r->second) continue;  // overtaken: pruned
      }
      bool done = false;
      absl::Status st = TryFinalize(p, &done);
      if (done) continue;
      if (!st.ok() || absl::Now() > p.deadline) {
        RemoveFailed(p.job, p.step);
        absl::MutexLock lock(&mu_);
        FailedLocked(
            p.job, 0, p.step,
            absl::StrCat("not finalized: ", st.ok() ? "not every shard wrote its file in time"
                                                    : std::string(st.message())));
        const CheckpointProgress& now = progress_[{p.job, 0}];
        TESSEL_LOG(ERROR) << "checkpoint " << p.job << " " << now.error
                          << "; its directory was removed (checkpoints failing since step "
                          << now.failing_since << ")";
        continue;
      }
      keep.push_back(std::move(p));
    }
    absl::MutexLock lock(&mu_);
    for (Pending& p : keep) pending_.push_back(std::move(p));
    finalizing_ = 0;
  }
}

void Checkpointer::Prune(const std::string& job, int keep_last) {
  if (keep_last <= 0) keep_last = 3;
  auto names = store_->List(job);
  if (!names.ok()) return;
  std::vector<int64_t> complete, incomplete;
  for (const std::string& n : *names) {
    const int64_t step = StepOfDir(n);
    if (step < 0) continue;
    auto size = store_->Size(CheckpointDir(job, step) + "/" + kManifestName);
    (size.ok() ? complete : incomplete).push_back(step);
  }
  std::sort(complete.begin(), complete.end());
  const int64_t newest = complete.empty() ? -1 : complete.back();
  for (size_t i = 0; i + keep_last < complete.size(); ++i) {
    absl::Status s = store_->RemoveAll(CheckpointDir(job, complete[i]));
    if (!s.ok()) TESSEL_LOG(WARNING) << "pruning: " << s;
  }
  // Leftovers of interrupted or failed checkpoints older than the newest
  // complete one.
  for (int64_t step : incomplete) {
    if (step < newest) {
      absl::Status s = store_->RemoveAll(CheckpointDir(job, step));
      if (!s.ok()) TESSEL_LOG(WARNING) << "removing an interrupted checkpoint: " << s;
    }
  }
}

absl::StatusOr<std::vector<Manifest>> Checkpointer::List(const std::string& job) {
  if (!enabled()) return NotEnabled();
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(job));
  TESSEL_ASSIGN_OR_RETURN(auto names, store_->List(job));
  std::vector<Manifest> out;
  for (const std::string& n : names) {
    const int64_t step = StepOfDir(n);
    if (step < 0) continue;
    auto text = store_->Get(CheckpointDir(job, step) + "/" + kManifestName);
    if (!text.ok()) continue;  // incomplete: not a checkpoint
    auto m = ParseManifest(*text);
    if (m.ok() && m->job == job && m->step == step) out.push_back(std::move(*m));
  }
  std::sort(out.begin(), out.end(),
            [](const Manifest& a, const Manifest& b) { return a.step < b.step; });
  return out;
}

absl::StatusOr<Manifest> Checkpointer::Read(const std::string& job, int64_t step) {
  if (!enabled()) return NotEnabled();
  if (step < 0) {
    TESSEL_ASSIGN_OR_RETURN(auto all, List(job));
    if (all.empty()) {
      return absl::NotFoundError(
          absl::StrCat("job '", job, "' has no complete checkpoint in ", store_->Describe(job)));
    }
    return all.back();
  }
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(job));
  const std::string path = CheckpointDir(job, step) + "/" + kManifestName;
  auto text = store_->Get(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("no complete checkpoint of job '", job, "' at step ",
                                            step, " (", store_->Describe(path), ": ",
                                            text.status().message(), ")"));
  }
  auto m = ParseManifest(*text);
  if (!m.ok()) {
    return absl::DataLossError(
        absl::StrCat(store_->Describe(path), " is damaged: ", m.status().message()));
  }
  return m;
}

absl::StatusOr<std::string> Checkpointer::FileChecksum(const std::string& path, int64_t bytes) {
  TESSEL_ASSIGN_OR_RETURN(auto size, store_->Size(path));
  if (size != bytes) {
    return absl::DataLossError(
        absl::StrCat(store_->Describe(path), " has ", size, " bytes; the manifest says ", bytes));
  }
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  std::vector<char> buf(4 << 20);
  absl::Status st;
  for (int64_t off = 0; off < bytes && st.ok(); off += static_cast<int64_t>(buf.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), bytes - off);
    st = store_->ReadRange(path, off, n, buf.data());
    if (st.ok()) XXH64_update(h, buf.data(), static_cast<size_t>(n));
  }
  const std::string sum = absl::StrFormat("%016x", XXH64_digest(h));
  XXH64_freeState(h);
  if (!st.ok()) return st;
  return sum;
}

absl::StatusOr<std::vector<std::string>> Checkpointer::Verify(const Manifest& m) {
  if (!enabled()) return NotEnabled();
  std::vector<std::string> problems;
  const std::string dir = CheckpointDir(m.job, m.step);
  for (const ShardEntry& e : m.shards) {
    const std::string path = dir + "/" + e.file;
    auto sum = FileChecksum(path, e.bytes);
    if (!sum.ok()) {
      problems.push_back(std::string(sum.status().message()));
    } else if (*sum != e.xxh64) {
      problems.push_back(absl::StrCat(store_->Describe(path), ": checksum ", *sum,
                                      " does not match the manifest's ", e.xxh64,
                                      " (file is damaged)"));
    }
  }
  return problems;
}

absl::Status Checkpointer::Delete(const std::string& job, int64_t step) {
  TESSEL_ASSIGN_OR_RETURN(auto m, Read(job, step));
  // Manifest first: from that instant the checkpoint no longer exists.
  const std::string dir = CheckpointDir(job, m.step);
  return store_->RemoveAll(dir);
}

absl::Status Checkpointer::Load(const Manifest& m, Range target, float* values,
                                const std::vector<float*>& state) {
  if (!enabled()) return NotEnabled();
  if (static_cast<int>(state.size()) != m.state_slots) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint has ", m.state_slots, " optimizer state slots; the job needs ", state.size()));
  }
  const std::string dir = CheckpointDir(m.job, m.step);
  std::vector<Piece> plan = ReslicePlan(m, target);
  int last_shard = -1;
  std::vector<float> file;
  for (const Piece& p : plan) {
    const ShardEntry& e = m.shards[p.old_shard];
    const std::string path = dir + "/" + e.file;
    if (p.old_shard != last_shard) {
      TESSEL_ASSIGN_OR_RETURN(auto size, store_->Size(path));
      if (size != e.bytes) {
        return absl::DataLossError(absl::StrCat(store_->Describe(path), " has ", size,
                                                " bytes; the manifest says ", e.bytes));
      }
      file.resize(static_cast<size_t>(e.bytes / 4));
      TESSEL_RETURN_IF_ERROR(store_->ReadRange(path, 0, e.bytes, file.data()));
      const std::string sum = Xxh64Hex(file.data(), static_cast<size_t>(e.bytes));
      if (sum != e.xxh64) {
        return absl::DataLossError(absl::StrCat(store_->Describe(path), ": checksum ", sum,
                                                " does not match the manifest's ", e.xxh64,
                                                "; refusing to restore from a damaged file"));
      }
      last_shard = p.old_shard;
    }
    const int64_t n = e.range_end - e.range_begin;
    std::copy_n(file.data() + p.src_offset, p.count, values + p.dst_offset);
    for (size_t k = 0; k < state.size(); ++k) {
      std::copy_n(file.data() + (k + 1) * n + p.src_offset, p.count, state[k] + p.dst_offset);
    }
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::ReadParams(const Manifest& m, Range target, float* values) {
  if (!enabled()) return NotEnabled();
  if (target.begin < 0 || target.end < target.begin || target.end > m.num_params) {
    return absl::OutOfRangeError(absl::StrCat("parameters [", target.begin, ", ", target.end,
                                              ") are outside the ", m.num_params,
                                              " of checkpoint '", m.job, "' step ", m.step));
  }
  const std::string dir = CheckpointDir(m.job, m.step);
  for (const Piece& p : ReslicePlan(m, target)) {
    const ShardEntry& e = m.shards[p.old_shard];
    TESSEL_RETURN_IF_ERROR(store_->ReadRange(dir + "/" + e.file, p.src_offset * 4, p.count * 4,
                                             values + p.dst_offset));
  }
  return absl::OkStatus();
}

}  // namespace tessel
