// `tesselctl version`: this client's version and each shard server's of the
// pool (kubectl's client and server versions), with how each authenticates
// its callers; a server started with --insecure is flagged on stderr.
#include "runtime/version.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"
#include "proto/shard.grpc.pb.h"

namespace tessel::ctl {
namespace {

using nlohmann::json;

int Version(const Globals& g, bool client_only) {
  json data = {{"client", {{"version", kVersion}}}};
  absl::Status failure;
  if (!client_only) {
    Cluster c(g);
    failure = c.ConnectServers();
    json servers = json::array();
    if (failure.ok()) {
      for (int shard : c.fleet().shards()) {
        v1::ServerInfoResponse info;
        absl::Status s =
            c.fleet().CallWithPrefix(shard, &v1::ShardServer::Stub::GetServerInfo,
                                     v1::ServerInfoRequest(), &info, absl::StrCat("shard ", shard));
        json row = {{"shard", shard}, {"address", c.fleet().address(shard)}};
        if (s.ok()) {
          row["version"] = info.version();
          // "" from servers that predate the field.
          row["security"] = info.security().empty() ? "unknown" : info.security();
          if (info.security() == "insecure") {
            std::cerr << "WARNING: shard server " << shard << " (" << c.fleet().address(shard)
                      << ") runs with --insecure: no credentials, every RPC open to anyone who "
                         "can reach it (docs/security.md)\n";
          }
        } else {
          row["error"] = std::string(s.message());
          if (failure.ok()) failure = s;
        }
        servers.push_back(row);
      }
    }
    data["servers"] = servers;
  }
  Render(
      g, data,
      [&](std::ostream& o) {
        o << "Client: " << kVersion << "\n";
        if (!data.contains("servers")) return;
        for (const json& s : data["servers"]) {
          o << "Server " << s["shard"].get<int>() << " (" << s["address"].get<std::string>()
            << "): "
            << (s.contains("version")
                    ? absl::StrCat(s["version"].get<std::string>(),
                                   ", callers: ", s["security"].get<std::string>())
                    : "unreachable: " + s["error"].get<std::string>())
            << "\n";
        }
      },
      std::cout);
  return failure.ok() ? kOk : Fail(failure);
}

}  // namespace

void AddVersionCommand(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  auto client_only = std::make_shared<bool>(false);
  CLI::App* version = app.add_subcommand(
      "version", "this client's version and the pool's shard servers' (--client: this one only)");
  version->add_flag("--client", *client_only, "only this client's version (no cluster needed)");
  commands->push_back({version, [&g, client_only] { return Version(g, *client_only); }});
}

}  // namespace tessel::ctl
