// tesselctl: operate a Tessel cluster. kubectl-style subcommands over the
// registry and shard-server gRPC APIs; `--help` on every level.
//
// Exit codes: 0 ok; 1 the operation failed; 2 usage error; 3 not found;
// 4 unreachable or timed out; 5 not authorized (admin token, or the TLS
// handshake refused); 6 checkpoint damaged.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "proto/registry.grpc.pb.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "rpc/registry_client.h"
#include "rpc/tls.h"

namespace tessel {
namespace {

using nlohmann::json;

enum ExitCode {
  kOk = 0,
  kFailed = 1,
  kUsage = 2,
  kNotFound = 3,
  kUnavailable = 4,
  kAuth = 5,
  kDamaged = 6
};

struct Globals {
  std::string registry = "127.0.0.1:7070";
  std::string pool = "default";
  std::string output = "table";
  std::string token_file;
  int timeout_s = 10;
  std::string token;
  TlsOptions tls;                 // --tls_* (env TESSEL_TLS_*)
  ClientCredentials credentials;  // loaded from tls
};

// FromGrpc's TLS hints (rpc/tls.cc): the connection was refused for its
// credentials, not because nobody listens.
bool IsTlsRefusal(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable &&
         (absl::StrContains(s.message(), "TLS handshake failed") ||
          absl::StrContains(s.message(), "refused this client's certificate"));
}

int ExitFor(const absl::Status& s) {
  if (IsTlsRefusal(s)) return kAuth;
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kOk;
    case absl::StatusCode::kNotFound:
      return kNotFound;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kAuth;
    case absl::StatusCode::kDataLoss:
      return kDamaged;
    case absl::StatusCode::kInvalidArgument:
      return kUsage;
    default:
      return kFailed;
  }
}

int Fail(const absl::Status& s) {
  std::cerr << "tesselctl: " << s.message() << "\n";
  if ((s.code() == absl::StatusCode::kUnavailable ||
       s.code() == absl::StatusCode::kDeadlineExceeded) &&
      !IsTlsRefusal(s)) {
    std::cerr << "hint: is the registry at --registry (or $TESSEL_REGISTRY) running, and are "
                 "the shard servers up? `tesselctl members` lists who is alive.\n";
  }
  return ExitFor(s);
}

// A table printed with aligned columns.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t c = 0; c < r.size(); ++c) {
      out += r[c];
      if (c + 1 < r.size()) out += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / double(1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.2f MiB", b / double(1 << 20));
  if (b >= (1 << 10)) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

json ProtoJson(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  auto st = google::protobuf::util::MessageToJsonString(m, &text, opts);
  (void)st;
  return json::parse(text, nullptr, false);
}

// The cluster as the CLI sees it: the registry and the pool's shard servers.
class Cluster {
 public:
  explicit Cluster(const Globals& g) : g_(g), registry_(g.registry, g.credentials, g.token) {}

  RegistryClient& registry() { return registry_; }

  absl::StatusOr<std::vector<v1::Member>> Servers() {
    auto view = registry_.GetView(g_.pool);
    if (!view.ok()) return view.status();
    std::vector<v1::Member> out;
    for (const auto& m : view->members()) {
      if (m.role() == v1::ROLE_SERVER) out.push_back(m);
    }
    if (out.empty()) {
      return absl::NotFoundError(absl::StrCat("no shard servers registered in pool '", g_.pool,
                                              "' at registry ", g_.registry));
    }
    std::sort(out.begin(), out.end(),
              [](const v1::Member& a, const v1::Member& b) { return a.rank() < b.rank(); });
    return out;
  }

  v1::ShardServer::Stub* Stub(const std::string& address) {
    auto& stub = stubs_[address];
    if (stub == nullptr) stub = v1::ShardServer::NewStub(MakeChannel(address, g_.credentials));
    return stub.get();
  }

  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout = absl::ZeroDuration()) {
    SetDeadline(ctx, timeout > absl::ZeroDuration() ? timeout : absl::Seconds(g_.timeout_s));
    if (!g_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + g_.token);
  }

  // The first shard server that answers; checkpoint reads go there (every
  // server of a pool shares the checkpoint store).
  absl::StatusOr<v1::Member> AnyServer() {
    auto servers = Servers();
    if (!servers.ok()) return servers.status();
    return servers->front();
  }

 private:
  const Globals& g_;
  RegistryClient registry_;
  std::map<std::string, std::unique_ptr<v1::ShardServer::Stub>> stubs_;
};

std::string RoleName(v1::Role r) {
  return r == v1::ROLE_SERVER ? "server" : r == v1::ROLE_WORKER ? "worker" : "?";
}

int Members(Globals& g, const std::string& group) {
  Cluster c(g);
  std::vector<v1::View> views;
  if (!group.empty()) {
    auto v = c.registry().GetView(group);
    if (!v.ok()) return Fail(v.status());
    views.push_back(*v);
  } else {
    auto all = c.registry().ListGroups();
    if (!all.ok()) return Fail(all.status());
    views = *all;
  }
  if (g.output == "json") {
    json out = json::array();
    for (const auto& v : views) out.push_back(ProtoJson(v));
    std::cout << out.dump(2) << "\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& v : views) {
    for (const auto& m : v.members()) {
      rows.push_back({v.group(), absl::StrCat(v.epoch()), RoleName(m.role()),
                      absl::StrCat(m.rank()), m.grpc_address().empty() ? "-" : m.grpc_address(),
                      m.host(), absl::StrCat(m.pid())});
    }
  }
  PrintTable({"GROUP", "EPOCH", "ROLE", "RANK", "GRPC", "HOST", "PID"}, rows);
  return kOk;
}

struct ShardRow {
  v1::Member server;
  absl::StatusOr<v1::ShardStats> stats;
};

absl::StatusOr<std::vector<ShardRow>> CollectShards(Cluster& c, const std::string& job) {
  auto servers = c.Servers();
  if (!servers.ok()) return servers.status();
  std::vector<ShardRow> rows;
  bool any = false;
  for (const auto& m : *servers) {
    v1::JobRef ref;
    ref.set_job(job);
    v1::ShardStats st;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    absl::Status s = FromGrpc(c.Stub(m.grpc_address())->GetStats(&ctx, ref, &st),
                              absl::StrCat("shard ", m.rank(), " (", m.grpc_address(), ")"));
    any = any || s.ok();
    rows.push_back(
        {m, s.ok() ? absl::StatusOr<v1::ShardStats>(st) : absl::StatusOr<v1::ShardStats>(s)});
  }
  if (!any && !rows.empty()) return rows.front().stats.status();
  return rows;
}

int Jobs(Globals& g) {
  Cluster c(g);
  auto servers = c.Servers();
  if (!servers.ok()) return Fail(servers.status());
  std::map<std::string, std::vector<v1::ShardStats>> jobs;
  absl::Status last_error;
  int answered = 0;
  for (const auto& m : *servers) {
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    absl::Status s = FromGrpc(c.Stub(m.grpc_address())->ListJobs(&ctx, req, &resp),
                              absl::StrCat("shard ", m.rank()));
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
    json out = json::array();
    for (const auto& [name, shards] : jobs) {
      json j = {{"job", name}, {"shards", json::array()}};
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

int Shards(Globals& g, const std::string& job) {
  Cluster c(g);
  auto rows = CollectShards(c, job);
  if (!rows.ok()) return Fail(rows.status());
  if (g.output == "json") {
    json out = json::array();
    for (const auto& r : *rows) {
      json j = {{"shard", r.server.rank()}, {"address", r.server.grpc_address()}};
      if (r.stats.ok()) {
        j["stats"] = ProtoJson(*r.stats);
        j["health"] = r.stats->checkpoint_error().empty() ? "ok" : "degraded";
      } else {
        j["health"] = "unreachable";
        j["error"] = std::string(r.stats.status().message());
      }
      out.push_back(j);
    }
    std::cout << out.dump(2) << "\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> table;
  int unhealthy = 0;
  for (const auto& r : *rows) {
    if (!r.stats.ok()) {
      ++unhealthy;
      table.push_back({absl::StrCat(r.server.rank()), r.server.grpc_address(), "-", "-", "-", "-",
                       "-", "-", absl::StrCat("unreachable: ", r.stats.status().message())});
      continue;
    }
    const auto& st = *r.stats;
    std::string health = "ok";
    if (!st.checkpoint_error().empty()) health = "degraded: " + st.checkpoint_error();
    table.push_back({absl::StrCat(st.shard_index()), r.server.grpc_address(),
                     absl::StrCat("[", st.range_begin(), ", ", st.range_end(), ")"),
                     Bytes(st.memory().params_bytes()), Bytes(st.memory().optimizer_bytes()),
                     Bytes(st.memory().grad_buffer_bytes()), absl::StrCat(st.step()),
                     absl::StrCat(st.epoch()), health});
  }
  PrintTable({"SHARD", "ADDRESS", "RANGE", "PARAMS", "OPTIMIZER", "GRAD_BUFFERS", "STEP", "EPOCH",
              "HEALTH"},
             table);
  return unhealthy ? kUnavailable : kOk;
}

int Stats(Globals& g, const std::string& job) {
  Cluster c(g);
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
    lo = std::min(lo, st.step());
    hi = std::max(hi, st.step());
    ckpt = std::min(ckpt, st.last_checkpoint_step());
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
  if (g.output == "json") {
    std::cout << j.dump(2) << "\n";
  } else {
    std::vector<std::vector<std::string>> table;
    for (auto& [k, v] : j.items()) {
      std::string value = v.is_string() ? v.get<std::string>() : v.dump();
      if (k.size() > 6 && k.substr(k.size() - 6) == "_bytes") {
        value = absl::StrCat(Bytes(v.get<int64_t>()), " (", v.dump(), ")");
      }
      table.push_back({k, value});
    }
    PrintTable({"STAT", "VALUE"}, table);
  }
  return reachable == static_cast<int>(rows->size()) ? kOk : kUnavailable;
}

// --- checkpoints -----------------------------------------------------------

absl::StatusOr<v1::CheckpointInfo> GetCheckpoint(Cluster& c, const std::string& job, int64_t step) {
  auto server = c.AnyServer();
  if (!server.ok()) return server.status();
  v1::CheckpointRef ref;
  ref.set_job(job);
  ref.set_step(step);
  v1::CheckpointInfo info;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  absl::Status s =
      FromGrpc(c.Stub(server->grpc_address())->GetCheckpoint(&ctx, ref, &info), "GetCheckpoint");
  if (!s.ok()) return s;
  return info;
}

int CheckpointSave(Globals& g, const std::string& job, bool wait, int wait_s) {
  Cluster c(g);
  auto servers = c.Servers();
  if (!servers.ok()) return Fail(servers.status());
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
    std::vector<const v1::Member*> asked;
    absl::Status failure;
    bool immediate_all = true;
    for (const auto& m : *servers) {
      v1::SaveCheckpointRequest req;
      req.set_job(job);
      req.set_step(target);
      v1::SaveCheckpointResponse resp;
      grpc::ClientContext ctx;
      c.Prepare(&ctx);
      failure = FromGrpc(c.Stub(m.grpc_address())->SaveCheckpoint(&ctx, req, &resp),
                         absl::StrCat("shard ", m.rank()));
      if (!failure.ok()) break;
      immediate_all = immediate_all && resp.immediate();
      asked.push_back(&m);
    }
    if (!failure.ok()) {
      for (const v1::Member* m : asked) {  // withdraw
        v1::SaveCheckpointRequest req;
        req.set_job(job);
        req.set_step(target);
        req.set_cancel(true);
        v1::SaveCheckpointResponse resp;
        grpc::ClientContext ctx;
        c.Prepare(&ctx);
        c.Stub(m->grpc_address())->SaveCheckpoint(&ctx, req, &resp);
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
        int64_t pause = 0;
        for (int64_t p : info->snapshot_pause_us()) pause = std::max(pause, p);
        if (g.output == "json") {
          std::cout << ProtoJson(*info).dump(2) << "\n";
        } else {
          std::cout << "checkpoint of job '" << job << "' at step " << target
                    << " complete: " << info->num_shards() << " shards, " << Bytes(info->bytes())
                    << ", training paused at most " << pause << " us for the copy\n";
        }
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

int CheckpointList(Globals& g, const std::string& job) {
  Cluster c(g);
  auto server = c.AnyServer();
  if (!server.ok()) return Fail(server.status());
  v1::JobRef ref;
  ref.set_job(job);
  v1::ListCheckpointsResponse resp;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  absl::Status s = FromGrpc(c.Stub(server->grpc_address())->ListCheckpoints(&ctx, ref, &resp),
                            "ListCheckpoints");
  if (!s.ok()) return Fail(s);
  if (g.output == "json") {
    std::cout << ProtoJson(resp).dump(2) << "\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& cp : resp.checkpoints()) {
    int64_t pause = 0;
    for (int64_t p : cp.snapshot_pause_us()) pause = std::max(pause, p);
    rows.push_back(
        {absl::StrCat(cp.step()), absl::StrCat(cp.epoch()), absl::StrCat(cp.num_shards()),
         absl::StrCat(cp.num_params()), Bytes(cp.bytes()),
         absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(cp.created_unix_ms()),
                          absl::UTCTimeZone()),
         absl::StrCat(pause)});
  }
  PrintTable({"STEP", "EPOCH", "SHARDS", "PARAMS", "BYTES", "CREATED (UTC)", "PAUSE_US"}, rows);
  return kOk;
}

int CheckpointShow(Globals& g, const std::string& job, int64_t step) {
  Cluster c(g);
  auto info = GetCheckpoint(c, job, step);
  if (!info.ok()) return Fail(info.status());
  std::cout << info->manifest_json();
  return kOk;
}

int CheckpointVerify(Globals& g, const std::string& job, int64_t step) {
  Cluster c(g);
  auto server = c.AnyServer();
  if (!server.ok()) return Fail(server.status());
  v1::CheckpointRef ref;
  ref.set_job(job);
  ref.set_step(step);
  v1::VerifyCheckpointResponse resp;
  grpc::ClientContext ctx;
  c.Prepare(&ctx, absl::Minutes(10));
  absl::Status s = FromGrpc(c.Stub(server->grpc_address())->VerifyCheckpoint(&ctx, ref, &resp),
                            "VerifyCheckpoint");
  if (!s.ok()) return Fail(s);
  if (g.output == "json") {
    std::cout << ProtoJson(resp).dump(2) << "\n";
  } else if (resp.ok()) {
    std::cout << "checkpoint of job '" << job << "' at step "
              << (step < 0 ? std::string("latest") : absl::StrCat(step))
              << ": every file matches its checksum\n";
  } else {
    for (const auto& p : resp.problems()) std::cout << "DAMAGED: " << p << "\n";
  }
  return resp.ok() ? kOk : kDamaged;
}

int CheckpointRestore(Globals& g, const std::string& job, int64_t step, int servers_wanted,
                      int workers) {
  Cluster c(g);
  auto info = GetCheckpoint(c, job, step);
  if (!info.ok()) return Fail(info.status());
  json manifest = json::parse(info->manifest_json(), nullptr, false);
  v1::JobSpec spec;
  if (manifest.is_discarded() ||
      !google::protobuf::util::JsonStringToMessage(manifest["spec"].dump(), &spec).ok()) {
    return Fail(absl::DataLossError("the checkpoint's manifest has no readable job spec"));
  }
  auto servers = c.Servers();
  if (!servers.ok()) return Fail(servers.status());
  {
    // Check every file before touching any server: a damaged checkpoint
    // changes nothing.
    v1::CheckpointRef ref;
    ref.set_job(job);
    ref.set_step(info->step());
    v1::VerifyCheckpointResponse verified;
    grpc::ClientContext ctx;
    c.Prepare(&ctx, absl::Minutes(10));
    absl::Status s =
        FromGrpc(c.Stub(servers->front().grpc_address())->VerifyCheckpoint(&ctx, ref, &verified),
                 "VerifyCheckpoint");
    if (!s.ok()) return Fail(s);
    if (!verified.ok()) {
      return Fail(absl::DataLossError(absl::StrCat(
          "checkpoint of job '", job, "' at step ", info->step(),
          " is damaged; nothing restored: ", absl::StrJoin(verified.problems(), "; "))));
    }
  }
  const int s_count = servers_wanted > 0 ? servers_wanted : static_cast<int>(servers->size());
  if (s_count > static_cast<int>(servers->size())) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("--servers=", s_count, " but only ", servers->size(),
                     " shard servers are registered in pool '", g.pool, "'")));
  }
  spec.set_num_shards(s_count);
  if (workers > 0) spec.set_world_size(workers);
  auto view = c.registry().GetView(job);
  const int64_t epoch = view.ok() ? view->epoch() : 0;
  for (int i = 0; i < s_count; ++i) {
    const v1::Member& m = (*servers)[i];
    if (m.rank() != i) {
      return Fail(absl::FailedPreconditionError(absl::StrCat("pool has no shard server ", i)));
    }
    v1::CreateJobRequest req;
    *req.mutable_spec() = spec;
    req.set_shard_index(i);
    req.set_epoch(epoch);
    req.set_restore(true);
    req.set_restore_step(info->step());
    v1::CreateJobResponse resp;
    grpc::ClientContext ctx;
    c.Prepare(&ctx, absl::Minutes(10));
    absl::Status s = FromGrpc(c.Stub(m.grpc_address())->CreateJob(&ctx, req, &resp),
                              absl::StrCat("restoring shard ", i, " (", m.grpc_address(), ")"));
    if (!s.ok()) return Fail(s);
  }
  std::cout << "job '" << job << "' restored at step " << info->step() << " onto " << s_count
            << " shard servers (checkpoint written by " << info->num_shards() << "); start its "
            << spec.world_size() << " workers with --resume to continue training\n";
  return kOk;
}

int CheckpointDelete(Globals& g, const std::string& job, int64_t step) {
  Cluster c(g);
  auto server = c.AnyServer();
  if (!server.ok()) return Fail(server.status());
  v1::CheckpointRef ref;
  ref.set_job(job);
  ref.set_step(step);
  v1::DeleteCheckpointResponse resp;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  absl::Status s = FromGrpc(c.Stub(server->grpc_address())->DeleteCheckpoint(&ctx, ref, &resp),
                            "DeleteCheckpoint");
  if (!s.ok()) return Fail(s);
  std::cout << "deleted checkpoint of job '" << job << "' at step " << step << "\n";
  return kOk;
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  using tessel::Globals;
  Globals g;
  if (const char* r = std::getenv("TESSEL_REGISTRY")) g.registry = r;
  if (const char* p = std::getenv("TESSEL_POOL")) g.pool = p;
  if (const char* v = std::getenv("TESSEL_TLS_CA")) g.tls.ca_file = v;
  if (const char* v = std::getenv("TESSEL_TLS_CERT")) g.tls.cert_file = v;
  if (const char* v = std::getenv("TESSEL_TLS_KEY")) g.tls.key_file = v;
  if (const char* v = std::getenv("TESSEL_TLS_SERVER_NAME")) g.tls.server_name = v;
  CLI::App app{
      "tesselctl: operate a Tessel cluster (members, jobs, shards, stats, checkpoints).\n"
      "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 unreachable, 5 not authorized "
      "(token or TLS), 6 checkpoint damaged."};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  app.add_option("--registry", g.registry, "registry host:port (env TESSEL_REGISTRY)")
      ->capture_default_str();
  app.add_option("--pool", g.pool, "shard server pool (env TESSEL_POOL)")->capture_default_str();
  app.add_option("-o,--output", g.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--token_file", g.token_file,
                 "file with the admin token (env TESSEL_TOKEN); needed for changes when the "
                 "servers require it");
  app.add_option("--timeout", g.timeout_s, "seconds per RPC")->capture_default_str();
  app.add_option("--tls_ca", g.tls.ca_file,
                 "mutual TLS: PEM file of the cluster's CA (env TESSEL_TLS_CA); with --tls_cert "
                 "and --tls_key, talk TLS to the registry and the shard servers");
  app.add_option("--tls_cert", g.tls.cert_file,
                 "mutual TLS: PEM client certificate (env TESSEL_TLS_CERT)");
  app.add_option("--tls_key", g.tls.key_file,
                 "mutual TLS: PEM private key of --tls_cert (env TESSEL_TLS_KEY)");
  app.add_option("--tls_server_name", g.tls.server_name,
                 "mutual TLS: name the servers' certificates carry, if not the host dialed "
                 "(env TESSEL_TLS_SERVER_NAME)");

  std::string group, job;
  int64_t step = -1;
  int servers = 0, workers = 0, wait_s = 120;
  bool wait = true;

  auto* members = app.add_subcommand("members", "registry members: groups, epochs, roles, ranks");
  members->add_option("--group", group, "only this group (a job or a server pool)");
  auto* jobs = app.add_subcommand("jobs", "jobs on the pool's shard servers");
  auto* shards = app.add_subcommand("shards", "per shard: range, bytes, step, epoch, health");
  shards->add_option("--job", job, "job name")->required();
  auto* stats = app.add_subcommand("stats", "totals for a job across its shards");
  stats->add_option("--job", job, "job name")->required();

  auto* cp = app.add_subcommand("checkpoint", "save, list, show, verify, restore, delete");
  cp->require_subcommand(1);
  cp->fallthrough();
  auto* save = cp->add_subcommand("save", "snapshot every shard at the same step boundary");
  save->add_option("--job", job, "job name")->required();
  save->add_option("--wait", wait, "wait until the checkpoint is complete")->capture_default_str();
  save->add_option("--wait_s", wait_s, "seconds to wait")->capture_default_str();
  auto* list = cp->add_subcommand("list", "complete checkpoints of a job");
  list->add_option("--job", job, "job name")->required();
  auto* show = cp->add_subcommand("show", "print a checkpoint's manifest");
  show->add_option("--job", job, "job name")->required();
  show->add_option("--step", step, "step (-1 = latest)")->capture_default_str();
  auto* verify = cp->add_subcommand("verify", "recompute every file's checksum");
  verify->add_option("--job", job, "job name")->required();
  verify->add_option("--step", step, "step (-1 = latest)")->capture_default_str();
  auto* restore = cp->add_subcommand(
      "restore",
      "load a checkpoint onto the shard servers (any shard count); then start the "
      "workers with --resume");
  restore->add_option("--job", job, "job name")->required();
  restore->add_option("--step", step, "step (-1 = latest)")->capture_default_str();
  restore->add_option("--servers", servers, "shard servers to restore onto (0 = all in the pool)")
      ->capture_default_str();
  restore->add_option("--workers", workers, "data-parallel workers from now on (0 = as saved)")
      ->capture_default_str();
  auto* del = cp->add_subcommand("delete", "delete a checkpoint (manifest first)");
  del->add_option("--job", job, "job name")->required();
  del->add_option("--step", step, "step")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : tessel::kUsage;
  }
  if (!g.token_file.empty()) {
    auto token = tessel::ReadTokenFile("--token_file", g.token_file);
    if (!token.ok()) {
      std::cerr << "tesselctl: " << token.status().message() << "\n";
      return tessel::kUsage;
    }
    g.token = *token;
  } else if (const char* t = std::getenv("TESSEL_TOKEN")) {
    g.token = t;
  }
  if (auto credentials = tessel::LoadClientCredentials(g.tls); credentials.ok()) {
    g.credentials = *std::move(credentials);
  } else {
    std::cerr << "tesselctl: " << credentials.status().message() << "\n";
    return tessel::kUsage;
  }
  if (*members) return tessel::Members(g, group);
  if (*jobs) return tessel::Jobs(g);
  if (*shards) return tessel::Shards(g, job);
  if (*stats) return tessel::Stats(g, job);
  if (*save) return tessel::CheckpointSave(g, job, wait, wait_s);
  if (*list) return tessel::CheckpointList(g, job);
  if (*show) return tessel::CheckpointShow(g, job, step);
  if (*verify) return tessel::CheckpointVerify(g, job, step);
  if (*restore) return tessel::CheckpointRestore(g, job, step, servers, workers);
  if (*del) return tessel::CheckpointDelete(g, job, step);
  return tessel::kUsage;
}
