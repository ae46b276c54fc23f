// tesselctl: operate a Tessel cluster. kubectl-style subcommands over the
// registry and shard-server gRPC APIs; `--help` on every level. This file
// holds the global flags and the dispatcher; each command group lives in its
// own file (commands.h).
//
// Exit codes: 0 ok; 1 the operation failed; 2 usage error; 3 not found;
// 4 unreachable or timed out; 5 not authorized (no credential, a wrong token,
// a role that may not do it, or the TLS handshake refused); 6 checkpoint
// damaged.
#include <cstdlib>
#include <iostream>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/commands.h"
#include "client/context.h"
#include "core/version.h"
#include "rpc/auth.h"
#include "rpc/tls.h"

namespace tessel::ctl {
namespace {

// Defaults from the environment; flags override them.
void ReadEnvironment(Globals& g) {
  if (const char* r = std::getenv("TESSEL_REGISTRY")) g.registry = r;
  if (const char* p = std::getenv("TESSEL_POOL")) g.pool = p;
  if (const char* v = std::getenv("TESSEL_TLS_CA")) g.tls.ca_file = v;
  if (const char* v = std::getenv("TESSEL_TLS_CERT")) g.tls.cert_file = v;
  if (const char* v = std::getenv("TESSEL_TLS_KEY")) g.tls.key_file = v;
  if (const char* v = std::getenv("TESSEL_TLS_SERVER_NAME")) g.tls.server_name = v;
}

void AddGlobalFlags(CLI::App& app, Globals& g) {
  app.add_option("--registry", g.registry, "registry host:port (env TESSEL_REGISTRY)")
      ->capture_default_str();
  app.add_option("--pool", g.pool, "shard server pool (env TESSEL_POOL)")->capture_default_str();
  app.add_option("-o,--output", g.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--token_file", g.token_file,
                 "file with a token (env TESSEL_TOKEN): the admin token for changes (deleting, "
                 "restoring an older checkpoint); a reader or worker token does what its role "
                 "allows (docs/operations.md, Roles and credentials)");
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
}

// The token (--token_file, else $TESSEL_TOKEN) and the TLS credentials; a
// client certificate may carry a role instead of a token.
// A bad file is a usage error (exit 2) whatever its status code.
int ResolveCredentials(Globals& g) {
  if (!g.token_file.empty()) {
    auto token = ReadTokenFile("--token_file", g.token_file);
    if (!token.ok()) {
      std::cerr << "tesselctl: " << token.status().message() << "\n";
      return kUsage;
    }
    g.token = *token;
  } else if (const char* t = std::getenv("TESSEL_TOKEN")) {
    g.token = t;
  }
  auto credentials = LoadClientCredentials(g.tls);
  if (!credentials.ok()) {
    std::cerr << "tesselctl: " << credentials.status().message() << "\n";
    return kUsage;
  }
  g.credentials = *std::move(credentials);
  return kOk;
}

int Main(int argc, char** argv) {
  Globals g;
  ReadEnvironment(g);
  CLI::App app{
      "tesselctl: operate a Tessel cluster (members, jobs, shards, stats, checkpoints).\n"
      "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 unreachable, 5 not authorized "
      "(credential, role or TLS), 6 checkpoint damaged."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kVersion));
  app.fallthrough();  // global options may also follow the subcommand
  AddGlobalFlags(app, g);
  std::vector<Command> commands;
  AddMemberCommands(app, g, &commands);
  AddJobCommands(app, g, &commands);
  AddShardCommands(app, g, &commands);
  AddCheckpointCommands(app, g, &commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUsage;
  }
  if (int rc = ResolveCredentials(g); rc != kOk) return rc;
  for (const Command& command : commands) {
    if (*command.app) return command.run();
  }
  return kUsage;
}

}  // namespace
}  // namespace tessel::ctl

int main(int argc, char** argv) { return tessel::ctl::Main(argc, argv); }
