// What tesselctl's commands share: the global flags, exit codes, output
// helpers, and the cluster as the CLI sees it (the registry and the pool's
// shard servers, through ShardFleet).
//
// Threads: tesselctl is single-threaded; everything here lives on main's.
//
// Example: a command's action:
//   Cluster c(g);
//   if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);  // exit code
//   absl::StatusOr<std::vector<ShardRow>> rows = CollectShards(c, job);
//   if (!rows.ok()) return Fail(rows.status());
//   PrintTable({"SHARD", "STEP"}, table_rows);
#ifndef TESSEL_CLIENT_CONTEXT_H_
#define TESSEL_CLIENT_CONTEXT_H_

#include <google/protobuf/message.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "proto/shard.grpc.pb.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "rpc/tls.h"

namespace tessel::ctl {

// The exit codes tesselctl documents in its --help.
enum ExitCode {
  kOk = 0,
  kFailed = 1,
  kUsage = 2,
  kNotFound = 3,
  kUnavailable = 4,
  kAuth = 5,
  kDamaged = 6
};

// The global flags, resolved by main before any command runs.
struct Globals {
  std::string registry = "127.0.0.1:7070";
  std::string pool = "default";
  std::string output = "table";  // table, json or yaml
  std::string context;           // the config file's context in use ("" = none)
  bool token_file_from_context = false;
  bool watch = false;  // --watch: jobs, members
  double watch_interval_s = 2;
  std::string token_file;
  int timeout_s = 10;
  std::string token;
  TlsOptions tls;                 // --tls_* (env TESSEL_TLS_*)
  ClientCredentials credentials;  // loaded from tls
};

// The exit code for `s` (a TLS refusal counts as not authorized).
int ExitFor(const absl::Status& s);
// Prints "tesselctl: <message>" (and a hint when nothing answered) to stderr
// and returns ExitFor(s).
int Fail(const absl::Status& s);

// A table printed with aligned columns (to `out`, default stdout).
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows, std::ostream& out = std::cout);
// "1.50 MiB" and the like.
std::string Bytes(int64_t b);

// The registry, and the shard servers of --pool once ConnectServers() found
// them (shard index = registry rank).
class Cluster {
 public:
  explicit Cluster(const Globals& g);

  RegistryClient& registry() { return registry_; }
  const ShardFleet& fleet() const { return fleet_; }

  // Connects the fleet to every shard server of --pool; NotFound naming the
  // pool and the registry when there is none.
  absl::Status ConnectServers();
  // The lowest-ranked shard server: checkpoint reads go there (every server
  // of a pool shares the checkpoint store). Only after ConnectServers().
  int AnyShard() const { return fleet_.shards().front(); }

 private:
  const Globals& g_;
  RegistryClient registry_;
  ShardFleet fleet_;
};

// One shard server's answer to GetStats.
struct ShardRow {
  int shard;
  std::string address;
  absl::StatusOr<v1::ShardStats> stats;
};

// GetStats of `job` from every connected shard, in shard order. Fails only
// when no shard answered (with the first shard's error).
absl::StatusOr<std::vector<ShardRow>> CollectShards(const Cluster& c, const std::string& job);

// `job`'s checkpoint at `step` as the checkpoint RPCs name it, and its
// manifest (GetCheckpoint through any shard server; step 0: the latest).
v1::CheckpointRef CheckpointRef(const std::string& job, int64_t step);
absl::StatusOr<v1::CheckpointInfo> GetCheckpoint(const Cluster& c, const std::string& job,
                                                 int64_t step);

}  // namespace tessel::ctl

#endif  // TESSEL_CLIENT_CONTEXT_H_
