// `tesselctl checkpoint save|list|show|verify|restore|delete` (export:
// checkpoint_export.cc). Reads go to
// one shard server (every server of a pool shares the checkpoint store);
// save and restore address every shard.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"
#include "core/status_macros.h"
#include "proto/shard.grpc.pb.h"
#include "runtime/log.h"

namespace tessel::ctl {
namespace {

using nlohmann::json;
using Stub = v1::ShardServer::Stub;

// Reading every file of a checkpoint, or loading one, takes longer than an
// ordinary control call.
constexpr absl::Duration kCheckpointIoTimeout = absl::Minutes(10);

int64_t MaxPause(const google::protobuf::RepeatedField<int64_t>& pauses) {
  int64_t pause = 0;
  for (int64_t p : pauses) pause = std::max(pause, p);
  return pause;
}

int Save(const Globals& g, const std::string& job, bool wait, int wait_s) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  const ShardFleet& fleet = c.fleet();
  // Pick a step boundary every shard can still reach: the current step if the
  // job is idle there, else a step or two ahead; withdraw and retry if a shard
  // has already passed it.
  for (int attempt = 0; attempt < 6; ++attempt) {
    auto rows = CollectShards(c, job);
    if (!rows.ok()) return Fail(rows.status());
    int64_t hi = 0;
    bool busy = false, same = true;
    for (const auto& r : *rows) {
      if (!r.stats.ok()) return Fail(r.stats.status());
      hi = std::max(hi, r.stats->step());
      busy = busy || r.stats->step_in_progress();
      same = same && r.stats->step() == rows->front().stats->step();
    }
    const int64_t target = (same && !busy && attempt == 0) ? hi : hi + 1 + attempt;
    v1::SaveCheckpointRequest req;
    req.set_job(job);
    req.set_step(target);
    std::vector<int> asked;
    bool immediate_all = true;
    const absl::Status failure = fleet.ForEach([&](int shard) {
      v1::SaveCheckpointResponse resp;
      TESSEL_RETURN_IF_ERROR(fleet.CallWithPrefix(shard, &Stub::SaveCheckpoint, req, &resp,
                                                  absl::StrCat("shard ", shard)));
      immediate_all = immediate_all && resp.immediate();
      asked.push_back(shard);
      return absl::OkStatus();
    });
    if (!failure.ok()) {
      req.set_cancel(true);
      for (int shard : asked) {  // withdraw
        v1::SaveCheckpointResponse resp;
        fleet.Call(shard, &Stub::SaveCheckpoint, req, &resp, "SaveCheckpoint").IgnoreError();
      }
      if (failure.code() == absl::StatusCode::kFailedPrecondition &&
          failure.message().find("has passed") != absl::string_view::npos) {
        continue;
      }
      return Fail(failure);
    }
    if (!wait) {
      std::cout << "checkpoint of job '" << job << "' scheduled at step " << target
                << (immediate_all ? " (taken now)" : " (taken when every shard reaches it)")
                << "\n";
      return kOk;
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(wait_s);
    while (absl::Now() < deadline) {
      auto info = GetCheckpoint(c, job, target);
      if (info.ok()) {
        Render(
            g, ProtoJson(*info),
            [&](std::ostream& o) {
              o << "checkpoint of job '" << job << "' at step " << target
                << " complete: " << info->num_shards() << " shards, " << Bytes(info->bytes())
                << ", training paused at most " << MaxPause(info->snapshot_pause_us())
                << " us for the copy\n";
            },
            std::cout);
        return kOk;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return Fail(absl::DeadlineExceededError(absl::StrCat(
        "checkpoint of job '", job, "' at step ", target, " not complete after ", wait_s,
        " s; is training still running? (`tesselctl shards --job ", job, "`)")));
  }
  return Fail(absl::AbortedError("the job moved past every step chosen; try again"));
}

int List(const Globals& g, const std::string& job) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  v1::JobRef ref;
  ref.set_job(job);
  v1::ListCheckpointsResponse resp;
  absl::Status s =
      c.fleet().CallWithPrefix(c.AnyShard(), &Stub::ListCheckpoints, ref, &resp, "ListCheckpoints");
  if (!s.ok()) return Fail(s);
  if (g.output != "table") {
    Render(g, ProtoJson(resp), nullptr, std::cout);
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& cp : resp.checkpoints()) {
    rows.push_back(
        {absl::StrCat(cp.step()), absl::StrCat(cp.epoch()), absl::StrCat(cp.num_shards()),
         absl::StrCat(cp.num_params()), Bytes(cp.bytes()),
         absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(cp.created_unix_ms()),
                          absl::UTCTimeZone()),
         absl::StrCat(MaxPause(cp.snapshot_pause_us()))});
  }
  PrintTable({"STEP", "EPOCH", "SHARDS", "PARAMS", "BYTES", "CREATED (UTC)", "PAUSE_US"}, rows);
  return kOk;
}

int Show(const Globals& g, const std::string& job, int64_t step) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  auto info = GetCheckpoint(c, job, step);
  if (!info.ok()) return Fail(info.status());
  // -o json and yaml: the manifest itself; the table: what it says, in short.
  const nlohmann::json manifest = nlohmann::json::parse(info->manifest_json(), nullptr, false);
  if (manifest.is_discarded()) {
    return Fail(absl::DataLossError(
        absl::StrCat("the manifest of job '", job, "' step ", info->step(), " is not JSON")));
  }
  Render(
      g, manifest,
      [&](std::ostream& o) {
        o << "Job:       " << job << "\n"
          << "Step:      " << info->step() << "\n"
          << "Epoch:     " << info->epoch() << "\n"
          << "Shards:    " << info->num_shards() << "\n"
          << "Params:    " << info->num_params() << "\n"
          << "Bytes:     " << Bytes(info->bytes()) << "\n"
          << "Created:   " << FormatRfc3339Utc(absl::FromUnixMillis(info->created_unix_ms()))
          << "\n"
          << "Pause:     " << MaxPause(info->snapshot_pause_us()) << " us at most\n"
          << "(-o json or -o yaml for the whole manifest)\n";
      },
      std::cout);
  return kOk;
}

int Verify(const Globals& g, const std::string& job, int64_t step) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  v1::VerifyCheckpointResponse resp;
  absl::Status s =
      c.fleet().CallWithPrefix(c.AnyShard(), &Stub::VerifyCheckpoint, CheckpointRef(job, step),
                               &resp, "VerifyCheckpoint", kCheckpointIoTimeout);
  if (!s.ok()) return Fail(s);
  if (g.output != "table") {
    Render(g, ProtoJson(resp), nullptr, std::cout);
  } else if (resp.ok()) {
    std::cout << "checkpoint of job '" << job << "' at step "
              << (step < 0 ? std::string("latest") : absl::StrCat(step))
              << ": every file matches its checksum\n";
  } else {
    for (const auto& p : resp.problems()) std::cout << "DAMAGED: " << p << "\n";
  }
  return resp.ok() ? kOk : kDamaged;
}

int Restore(const Globals& g, const std::string& job, int64_t step, int servers_wanted,
            int workers) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  const ShardFleet& fleet = c.fleet();
  auto info = GetCheckpoint(c, job, step);
  if (!info.ok()) return Fail(info.status());
  json manifest = json::parse(info->manifest_json(), nullptr, false);
  v1::JobSpec spec;
  if (manifest.is_discarded() ||
      !google::protobuf::util::JsonStringToMessage(manifest["spec"].dump(), &spec).ok()) {
    return Fail(absl::DataLossError("the checkpoint's manifest has no readable job spec"));
  }
  {
    // Check every file before touching any server: a damaged checkpoint
    // changes nothing.
    v1::VerifyCheckpointResponse verified;
    absl::Status s = fleet.CallWithPrefix(c.AnyShard(), &Stub::VerifyCheckpoint,
                                          CheckpointRef(job, info->step()), &verified,
                                          "VerifyCheckpoint", kCheckpointIoTimeout);
    if (!s.ok()) return Fail(s);
    if (!verified.ok()) {
      return Fail(absl::DataLossError(absl::StrCat(
          "checkpoint of job '", job, "' at step ", info->step(),
          " is damaged; nothing restored: ", absl::StrJoin(verified.problems(), "; "))));
    }
  }
  const int s_count = servers_wanted > 0 ? servers_wanted : fleet.size();
  if (s_count > fleet.size()) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("--servers=", s_count, " but only ", fleet.size(),
                     " shard servers are registered in pool '", g.pool, "'")));
  }
  spec.set_num_shards(s_count);
  if (workers > 0) spec.set_world_size(workers);
  auto view = c.registry().GetView(job);
  const int64_t epoch = view.ok() ? view->epoch() : 0;
  for (int i = 0; i < s_count; ++i) {
    if (!fleet.has(i)) {
      return Fail(absl::FailedPreconditionError(absl::StrCat("pool has no shard server ", i)));
    }
    v1::CreateJobRequest req;
    *req.mutable_spec() = spec;
    req.set_shard_index(i);
    req.set_epoch(epoch);
    req.set_restore(true);
    req.set_restore_step(info->step());
    v1::CreateJobResponse resp;
    absl::Status s = fleet.CallWithPrefix(
        i, &Stub::CreateJob, req, &resp,
        absl::StrCat("restoring shard ", i, " (", fleet.address(i), ")"), kCheckpointIoTimeout);
    if (!s.ok()) return Fail(s);
  }
  std::cout << "job '" << job << "' restored at step " << info->step() << " onto " << s_count
            << " shard servers (checkpoint written by " << info->num_shards() << "); start its "
            << spec.world_size() << " workers with --resume to continue training\n";
  return kOk;
}

int Delete(const Globals& g, const std::string& job, int64_t step) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  v1::DeleteCheckpointResponse resp;
  absl::Status s = c.fleet().CallWithPrefix(c.AnyShard(), &Stub::DeleteCheckpoint,
                                            CheckpointRef(job, step), &resp, "DeleteCheckpoint");
  if (!s.ok()) return Fail(s);
  std::cout << "deleted checkpoint of job '" << job << "' at step " << step << "\n";
  return kOk;
}

// The flags of every checkpoint subcommand (one of them runs).
struct Args {
  std::string job;
  int64_t step = -1;
  int servers = 0;
  int workers = 0;
  int wait_s = 120;
  bool wait = true;
};

}  // namespace

void AddCheckpointCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  auto a = std::make_shared<Args>();
  CLI::App* cp =
      app.add_subcommand("checkpoint", "save, list, show, verify, restore, delete, export");
  cp->require_subcommand(1);
  cp->fallthrough();

  CLI::App* save = cp->add_subcommand("save", "snapshot every shard at the same step boundary");
  save->add_option("--job", a->job, "job name")->required();
  save->add_option("--wait", a->wait, "wait until the checkpoint is complete")
      ->capture_default_str();
  save->add_option("--wait_s", a->wait_s, "seconds to wait")->capture_default_str();
  commands->push_back({save, [&g, a] { return Save(g, a->job, a->wait, a->wait_s); }});

  CLI::App* list = cp->add_subcommand("list", "complete checkpoints of a job");
  list->add_option("--job", a->job, "job name")->required();
  commands->push_back({list, [&g, a] { return List(g, a->job); }});

  CLI::App* show = cp->add_subcommand("show", "print a checkpoint's manifest");
  show->add_option("--job", a->job, "job name")->required();
  show->add_option("--step", a->step, "step (-1 = latest)")->capture_default_str();
  commands->push_back({show, [&g, a] { return Show(g, a->job, a->step); }});

  CLI::App* verify = cp->add_subcommand("verify", "recompute every file's checksum");
  verify->add_option("--job", a->job, "job name")->required();
  verify->add_option("--step", a->step, "step (-1 = latest)")->capture_default_str();
  commands->push_back({verify, [&g, a] { return Verify(g, a->job, a->step); }});

  CLI::App* restore = cp->add_subcommand(
      "restore",
      "load a checkpoint onto the shard servers (any shard count); then start the "
      "workers with --resume");
  restore->add_option("--job", a->job, "job name")->required();
  restore->add_option("--step", a->step, "step (-1 = latest)")->capture_default_str();
  restore
      ->add_option("--servers", a->servers, "shard servers to restore onto (0 = all in the pool)")
      ->capture_default_str();
  restore->add_option("--workers", a->workers, "data-parallel workers from now on (0 = as saved)")
      ->capture_default_str();
  commands->push_back(
      {restore, [&g, a] { return Restore(g, a->job, a->step, a->servers, a->workers); }});

  CLI::App* del = cp->add_subcommand("delete", "delete a checkpoint (manifest first)");
  del->add_option("--job", a->job, "job name")->required();
  del->add_option("--step", a->step, "step")->required();
  commands->push_back({del, [&g, a] { return Delete(g, a->job, a->step); }});

  AddCheckpointExportCommand(cp, g, commands);
}

}  // namespace tessel::ctl
