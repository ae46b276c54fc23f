// `tesselctl shards` and `tesselctl stats`: a job's shards, one by one and in
// total.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"

namespace tessel::ctl {
namespace {

using nlohmann::json;

int Shards(const Globals& g, const std::string& job) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  auto rows = CollectShards(c, job);
  if (!rows.ok()) return Fail(rows.status());
  json out = json::array();
  int unhealthy = 0;
  for (const auto& r : *rows) {
    json j = {{"shard", r.shard}, {"address", r.address}};
    if (r.stats.ok()) {
      j["stats"] = ProtoJson(*r.stats);
      j["health"] = r.stats->checkpoint_error().empty() ? "ok" : "degraded";
    } else {
      ++unhealthy;
      j["health"] = "unreachable";
      j["error"] = std::string(r.stats.status().message());
    }
    out.push_back(j);
  }
  Render(
      g, out,
      [&](std::ostream& o) {
        std::vector<std::vector<std::string>> table;
        for (const auto& r : *rows) {
          if (!r.stats.ok()) {
            table.push_back({absl::StrCat(r.shard), r.address, "-", "-", "-", "-", "-", "-",
                             absl::StrCat("unreachable: ", r.stats.status().message())});
            continue;
          }
          const auto& st = *r.stats;
          std::string health = "ok";
          if (!st.checkpoint_error().empty()) health = "degraded: " + CheckpointHealth(st);
          table.push_back({absl::StrCat(st.shard_index()), r.address,
                           absl::StrCat("[", st.range_begin(), ", ", st.range_end(), ")"),
                           Bytes(st.memory().params_bytes()), Bytes(st.memory().optimizer_bytes()),
                           Bytes(st.memory().grad_buffer_bytes()), ShardStep(st),
                           absl::StrCat(st.epoch()), health});
        }
        PrintTable({"SHARD", "ADDRESS", "RANGE", "PARAMS", "OPTIMIZER", "GRAD_BUFFERS", "STEP",
                    "EPOCH", "HEALTH"},
                   table, o);
      },
      std::cout);
  return unhealthy ? kUnavailable : kOk;
}

int Stats(const Globals& g, const std::string& job) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  auto rows = CollectShards(c, job);
  if (!rows.ok()) return Fail(rows.status());
  int64_t params = 0, opt = 0, grad = 0, pushed = 0, pulled = 0, rejected = 0, pause = 0;
  int64_t stale = 0, applied = 0, recoveries = 0;
  int64_t lo = INT64_MAX, hi = 0, ckpt = INT64_MAX;
  int reachable = 0;
  for (const auto& r : *rows) {
    if (!r.stats.ok()) continue;
    ++reachable;
    const auto& st = *r.stats;
    params += st.memory().params_bytes();
    opt += st.memory().optimizer_bytes();
    grad += st.memory().grad_buffer_bytes();
    pushed += st.pushed_bytes();
    pulled += st.pulled_bytes();
    rejected += st.rejected_frames();
    stale += st.stale_epoch_frames();
    applied += st.applied_steps();
    recoveries += st.recoveries();
    pause = std::max(pause, st.last_snapshot_pause_us());
    if (!HoldsNoElements(st)) {  // shard 0 writes its checkpoint parts
      lo = std::min(lo, st.step());
      hi = std::max(hi, st.step());
      ckpt = std::min(ckpt, st.last_checkpoint_step());
    }
  }
  json j = {{"job", job},
            {"shards_reachable", reachable},
            {"shards", rows->size()},
            {"step_min", lo},
            {"step_max", hi},
            {"params_bytes", params},
            {"optimizer_bytes", opt},
            {"grad_buffer_bytes", grad},
            {"pushed_bytes", pushed},
            {"pulled_bytes", pulled},
            {"rejected_frames", rejected},
            {"stale_epoch_frames", stale},
            {"applied_steps", applied},
            {"recoveries", recoveries},
            {"last_checkpoint_step", ckpt == INT64_MAX ? -1 : ckpt},
            {"max_snapshot_pause_us", pause}};
  Render(
      g, j,
      [&](std::ostream& o) {
        std::vector<std::vector<std::string>> table;
        for (auto& [k, v] : j.items()) {
          std::string value = v.is_string() ? v.get<std::string>() : v.dump();
          if (k.size() > 6 && k.substr(k.size() - 6) == "_bytes") {
            value = absl::StrCat(Bytes(v.get<int64_t>()), " (", v.dump(), ")");
          }
          table.push_back({k, value});
        }
        PrintTable({"STAT", "VALUE"}, table, o);
      },
      std::cout);
  return reachable == static_cast<int>(rows->size()) ? kOk : kUnavailable;
}

}  // namespace

void AddShardCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  auto job = std::make_shared<std::string>();
  CLI::App* shards = app.add_subcommand("shards", "per shard: range, bytes, step, epoch, health");
  shards->add_option("--job", *job, "job name")->required();
  commands->push_back({shards, [&g, job] { return Shards(g, *job); }});
  CLI::App* stats = app.add_subcommand("stats", "totals for a job across its shards");
  stats->add_option("--job", *job, "job name")->required();
  commands->push_back({stats, [&g, job] { return Stats(g, *job); }});
}

}  // namespace tessel::ctl
