// `tesselctl jobs`: the jobs on the pool's shard servers.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/context.h"
#include "proto/shard.grpc.pb.h"

namespace tessel::ctl {
namespace {

int Jobs(const Globals& g) {
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
    for (const auto& st : resp.jobs()) jobs[st.job()].push_back(st);
  }
  if (answered == 0) return Fail(last_error);
  if (g.output == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [name, shards] : jobs) {
      nlohmann::json j = {{"job", name}, {"shards", nlohmann::json::array()}};
      for (const auto& st : shards) j["shards"].push_back(ProtoJson(st));
      out.push_back(j);
    }
    std::cout << out.dump(2) << "\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, shards] : jobs) {
    int64_t lo = INT64_MAX, hi = 0;
    for (const auto& st : shards) {
      lo = std::min(lo, st.step());
      hi = std::max(hi, st.step());
    }
    const auto& f = shards.front();
    rows.push_back({name, f.strategy(), absl::StrCat(f.world_size()),
                    absl::StrCat(shards.size(), "/", f.num_shards()), absl::StrCat(f.num_params()),
                    lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "-", hi),
                    absl::StrCat(f.epoch())});
  }
  PrintTable({"JOB", "STRATEGY", "WORKERS", "SHARDS", "PARAMS", "STEP", "EPOCH"}, rows);
  return kOk;
}

}  // namespace

void AddJobCommands(CLI::App& app, const Globals& g, std::vector<Command>* commands) {
  CLI::App* jobs = app.add_subcommand("jobs", "jobs on the pool's shard servers");
  commands->push_back({jobs, [&g] { return Jobs(g); }});
}

}  // namespace tessel::ctl
