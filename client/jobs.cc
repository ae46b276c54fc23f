// `tesselctl jobs`, `describe job NAME`, `delete job NAME`: the jobs on the
// pool's shard servers.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"
#include "proto/shard.grpc.pb.h"
#include "runtime/log.h"

namespace tessel::ctl {
namespace {

using nlohmann::json;

// "-" when no shard with elements answered (lo > hi).
std::string StepRange(int64_t lo, int64_t hi) {
  if (lo > hi) return "-";
  return lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "-", hi);
}

int Jobs(const Globals& g, std::ostream& out) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  const ShardFleet& fleet = c.fleet();
  std::map<std::string, std::vector<v1::ShardStats>> jobs;
  absl::Status last_error;
  int answered = 0;
  // A shard that does not answer is a warning as long as another one does.
  for (int shard : fleet.shards()) {
    v1::ListJobsResponse resp;
    absl::Status s =
        fleet.CallWithPrefix(shard, &v1::ShardServer::Stub::ListJobs, v1::ListJobsRequest(), &resp,
                             absl::StrCat("shard ", shard));
    if (!s.ok()) {
      std::cerr << "tesselctl: warning: " << s.message() << "\n";
      last_error = s;
      continue;
    }
    ++answered;
    for (const auto& st : resp.jobs()) {
      jobs[st.job()].push_back(st);
      // The server process's CPU time is for benchmarks (a difference of two
      // reads), not a property of the job: left out of the job's listing.
      jobs[st.job()].back().clear_process_cpu_us();
    }
  }
  if (answered == 0) return Fail(last_error);
  json data = json::array();
  for (const auto& [name, shards] : jobs) {
    json j = {{"job", name}, {"shards", json::array()}};
    for (const auto& st : shards) j["shards"].push_back(ProtoJson(st));
    data.push_back(j);
  }
  Render(
      g, data,
      [&](std::ostream& o) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& [name, shards] : jobs) {
          int64_t lo = INT64_MAX, hi = 0, failing = -1;
          for (const auto& st : shards) {
            if (!HoldsNoElements(st)) {
              lo = std::min(lo, st.step());
              hi = std::max(hi, st.step());
            }
            if (st.checkpoint_failing_since() >= 0) {
              failing = failing < 0 ? st.checkpoint_failing_since()
                                    : std::min(failing, st.checkpoint_failing_since());
            }
          }
          const auto& f = shards.front();
          rows.push_back(
              {name, f.strategy(), absl::StrCat(f.world_size()),
               absl::StrCat(shards.size(), "/", f.num_shards()), absl::StrCat(f.num_params()),
               StepRange(lo, hi), absl::StrCat(f.epoch()),
               failing < 0 ? "ok" : absl::StrCat("checkpoints failing since step ", failing)});
        }
        PrintTable({"JOB", "STRATEGY", "WORKERS", "SHARDS", "PARAMS", "STEP", "EPOCH", "HEALTH"},
                   rows, o);
      },
      out);
  return kOk;
}

// Everything about one job: its shards, its workers in the registry, its
// checkpoints and recoveries.
int Describe(const Globals& g, const std::string& job) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  auto rows = CollectShards(c, job);
  if (!rows.ok()) return Fail(rows.status());
  const v1::ShardStats* first = nullptr;
  int64_t lo = INT64_MAX, hi = 0, recoveries = 0, refused = 0, stale = 0, restored = -1;
  int64_t bytes = 0;
  json shards = json::array();
  for (const auto& r : *rows) {
    json s = {{"shard", r.shard}, {"address", r.address}};
    if (!r.stats.ok()) {
      s["health"] = "unreachable";
      s["error"] = std::string(r.stats.status().message());
      shards.push_back(s);
      continue;
    }
    const v1::ShardStats& st = *r.stats;
    if (first == nullptr) first = &st;
    if (!HoldsNoElements(st)) {
      lo = std::min(lo, st.step());
      hi = std::max(hi, st.step());
    }
    recoveries = std::max<int64_t>(recoveries, st.recoveries());
    refused += st.rejected_frames();
    stale += st.stale_epoch_frames();
    restored = std::max(restored, st.restored_from_step());
    const int64_t b = st.memory().params_bytes() + st.memory().optimizer_bytes() +
                      st.memory().grad_buffer_bytes();
    bytes += b;
    s["health"] = st.checkpoint_error().empty() ? "ok" : "degraded: " + CheckpointHealth(st);
    if (st.checkpoint_failing_since() >= 0) {
      s["checkpoints_failing_since"] = st.checkpoint_failing_since();
    }
    s["range"] = {st.range_begin(), st.range_end()};
    s["step"] = st.step();
    s["epoch"] = st.epoch();
    s["memory_bytes"] = b;
    shards.push_back(s);
  }
  if (first == nullptr) return Fail(absl::UnavailableError("no shard server answered"));
  // Workers: the job's registry group.
  json workers = json::array();
  int64_t group_epoch = 0;
  auto view = c.registry().GetView(job);
  if (view.ok()) {
    group_epoch = view->epoch();
    for (const auto& m : view->members()) {
      workers.push_back({{"rank", m.rank()}, {"host", m.host()}, {"pid", m.pid()}});
    }
  }
  // Checkpoints: the pool shares one store.
  json checkpoints = json::array();
  v1::JobRef ref;
  ref.set_job(job);
  v1::ListCheckpointsResponse list;
  absl::Status ls = c.fleet().CallWithPrefix(c.AnyShard(), &v1::ShardServer::Stub::ListCheckpoints,
                                             ref, &list, "ListCheckpoints");
  if (ls.ok()) {
    for (const auto& cp : list.checkpoints()) {
      checkpoints.push_back(
          {{"step", cp.step()},
           {"epoch", cp.epoch()},
           {"bytes", cp.bytes()},
           {"created", FormatRfc3339Utc(absl::FromUnixMillis(cp.created_unix_ms()))}});
    }
  }
  json data = {{"job", job},
               {"strategy", first->strategy()},
               {"world_size", first->world_size()},
               {"num_shards", first->num_shards()},
               {"num_params", first->num_params()},
               {"step", {{"min", lo}, {"max", hi}}},
               {"epoch", first->epoch()},
               {"registry_epoch", group_epoch},
               {"recoveries", recoveries},
               {"restored_from_step", restored},
               {"refused_frames", refused},
               {"stale_epoch_frames", stale},
               {"memory_bytes", bytes},
               {"shards", shards},
               {"workers", workers},
               {"checkpoints", checkpoints}};
  Render(
      g, data,
      [&](std::ostream& o) {
        o << "Name:         " << job << "\n"
          << "Strategy:     " << first->strategy() << "\n"
          << "Workers:      " << workers.size() << " of " << first->world_size()
          << " in the registry (group epoch " << group_epoch << ")\n"
          << "Shards:       " << first->num_shards() << " (" << first->num_params()
          << " parameters, " << Bytes(bytes) << " held)\n"
          << "Step:         " << StepRange(lo, hi) << "\n"
          << "Epoch:        " << first->epoch() << "\n"
          << "Recoveries:   " << recoveries
          << (restored >= 0 ? absl::StrCat(" (last restored from step ", restored, ")") : "")
          << "\n"
          << "Refused:      " << refused << " frames (" << stale << " from an old epoch)\n"
          << "Checkpoints:  ";
        if (!ls.ok()) {
          o << "unknown (" << ls.message() << ")\n";
        } else if (checkpoints.empty()) {
          o << "none\n";
        } else {
          const json& last = checkpoints.back();
          o << checkpoints.size() << ", newest step " << last["step"].get<int64_t>() << " at "
            << last["created"].get<std::string>() << "\n";
        }
        o << "\nShards:\n";
        std::vector<std::vector<std::string>> t;
        for (const json& s : shards) {
          if (s["health"] == "unreachable") {
            t.push_back({absl::StrCat("  ", s["shard"].get<int>()), s["address"], "-", "-", "-",
                         "unreachable"});
            continue;
          }
          t.push_back({absl::StrCat("  ", s["shard"].get<int>()), s["address"],
                       absl::StrCat(s["step"].get<int64_t>()),
                       absl::StrCat(s["epoch"].get<int64_t>()),
                       Bytes(s["memory_bytes"].get<int64_t>()), s["health"]});
        }
        PrintTable({"  SHARD", "ADDRESS", "STEP", "EPOCH", "MEMORY", "HEALTH"}, t, o);
        o << "\nWorkers:\n";
        std::vector<std::vector<std::string>> w;
        for (const json& m : workers) {
          w.push_back({absl::StrCat("  ", m["rank"].get<int>()), m["host"],
                       absl::StrCat(m["pid"].get<int64_t>())});
        }
        PrintTable({"  RANK", "HOST", "PID"}, w, o);
      },
      std::cout);
  return kOk;
}

int Delete(const Globals& g, const std::string& job) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  v1::JobRef ref;
  ref.set_job(job);
  int deleted = 0, missing = 0;
  absl::Status failure;
  for (int shard : c.fleet().shards()) {
    v1::DeleteJobResponse resp;
    absl::Status s = c.fleet().CallWithPrefix(shard, &v1::ShardServer::Stub::DeleteJob, ref, &resp,
                                              absl::StrCat("shard ", shard));
    if (s.ok()) {
      ++deleted;
    } else if (absl::IsNotFound(s)) {
      ++missing;
    } else if (failure.ok()) {
      failure = s;
    }
  }
  if (!failure.ok()) return Fail(failure);
  if (deleted == 0) {
    return Fail(absl::NotFoundError(absl::StrCat("job '", job, "' is on no shard server of pool '",
                                                 g.pool, "' (`tesselctl jobs` lists them)")));
  }
  std::cout << "job '" << job << "' deleted from " << deleted << " shard server"
            << (deleted == 1 ? "" : "s") << " (its checkpoints are kept)\n";
  return kOk;
}

}  // namespace

void AddJobCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  CLI::App* jobs = app.add_subcommand("jobs", "jobs on the pool's shard servers");
  AddWatchFlags(jobs, g);
  commands->push_back(
      {jobs, [&g] { return Watchable(g, [&](std::ostream& o) { return Jobs(g, o); }); }});

  auto name = std::make_shared<std::string>();
  CLI::App* describe =
      app.add_subcommand("describe",
                         "one object in detail: describe job NAME (shards, workers, step, epoch, "
                         "checkpoints, recoveries)");
  describe->require_subcommand(1);
  CLI::App* djob =
      describe->add_subcommand("job", "a job: shards, workers, checkpoints, recoveries");
  djob->add_option("name", *name, "the job")->required();
  commands->push_back({djob, [&g, name] { return Describe(g, *name); }});

  CLI::App* del = app.add_subcommand("delete", "delete an object: delete job NAME");
  del->require_subcommand(1);
  CLI::App* deljob = del->add_subcommand(
      "job",
      "a job, from every shard server of the pool (admin; checkpoints are kept; running "
      "workers fail their next step)");
  deljob->add_option("name", *name, "the job")->required();
  commands->push_back({deljob, [&g, name] { return Delete(g, *name); }});
}

}  // namespace tessel::ctl
