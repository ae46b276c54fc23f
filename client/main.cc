// tesselctl: operate a Tessel cluster. kubectl-style subcommands over the
// registry and shard-server gRPC APIs; `--help` on every level. This file
// holds the global flags and the dispatcher; each command group lives in its
// own file (commands.h).
//
// Exit codes: 0 ok; 1 the operation failed; 2 usage error; 3 not found;
// 4 unreachable or timed out; 5 not authorized (no credential, a wrong token,
// a role that may not do it, or the TLS handshake refused); 6 checkpoint
// damaged; `why` only: 7 stalled (ranks named), 8 stalled on the servers.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/config_file.h"
#include "client/context.h"
#include "rpc/auth.h"
#include "rpc/tls.h"
#include "runtime/version.h"

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
  app.add_option("-o,--output", g.output, "output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_option("--context", g.context,
                 "the context of the config file to use (default: its current-context; "
                 "`tesselctl config get-contexts`)");
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
  // The environment's token beats a context's token file (flags beat both).
  const char* env_token = std::getenv("TESSEL_TOKEN");
  if (g.token_file_from_context && env_token != nullptr) g.token_file.clear();
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

// The value of --context in argv ("" if none), before CLI11 parses.
std::string ContextArg(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--context" && i + 1 < argc) return argv[i + 1];
    if (a.rfind("--context=", 0) == 0) return a.substr(10);
  }
  return "";
}

// Applies the chosen context's settings (flags and the environment, read
// after, override them). A --context the file does not have is an error.
int ApplyContext(Globals& g, const std::string& wanted) {
  auto config = LoadConfig(ConfigPath());
  if (!config.ok()) {
    std::cerr << "tesselctl: " << config.status().message() << "\n";
    return kUsage;
  }
  const std::string name = wanted.empty() ? config->current_context : wanted;
  if (name.empty()) return kOk;
  const Context* c = config->Find(name);
  if (c == nullptr) {
    std::cerr << "tesselctl: no context \"" << name << "\" in " << ConfigPath()
              << " (`tesselctl config get-contexts`)\n";
    return kUsage;
  }
  g.context = name;
  for (const auto& [k, v] : c->values) {
    if (k == "registry") g.registry = v;
    if (k == "pool") g.pool = v;
    if (k == "token_file") g.token_file = v, g.token_file_from_context = true;
    if (k == "tls_ca") g.tls.ca_file = v;
    if (k == "tls_cert") g.tls.cert_file = v;
    if (k == "tls_key") g.tls.key_file = v;
    if (k == "tls_server_name") g.tls.server_name = v;
  }
  return kOk;
}

// Levenshtein distance, for "did you mean".
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first word that is not a global flag or its value must be a command:
// otherwise name it and suggest the nearest ones (CLI11 would say only "A
// subcommand is required").
int CheckCommand(CLI::App& app, int argc, char** argv) {
  // The global options that take a value (the word after them is not a command).
  std::set<std::string> takes_value;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_type_size() == 0) continue;  // a flag
    for (const std::string& l : o->get_lnames()) takes_value.insert("--" + l);
    for (const std::string& n : o->get_snames()) takes_value.insert("-" + n);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (!a.empty() && a[0] == '-') {
      if (takes_value.count(a)) ++i;
      continue;
    }
    std::vector<std::string> names, near;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
      if (sub->get_name() == a) return kOk;
    }
    for (const std::string& n : names) {
      if (Distance(a, n) <= 2 || n.rfind(a, 0) == 0) near.push_back(n);
    }
    std::cerr << "tesselctl: unknown command \"" << a << "\"";
    if (!near.empty()) std::cerr << "; did you mean " << absl::StrJoin(near, " or ") << "?";
    std::cerr << "\ncommands: " << absl::StrJoin(names, ", ") << " (tesselctl --help)\n";
    return kUsage;
  }
  return kOk;
}

int Main(int argc, char** argv) {
  Globals g;
  if (int rc = ApplyContext(g, ContextArg(argc, argv)); rc != kOk) return rc;
  ReadEnvironment(g);
  CLI::App app{
      "tesselctl: operate a Tessel cluster (members, jobs, shards, stats, checkpoints).\n"
      "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 unreachable, 5 not authorized "
      "(credential, role or TLS), 6 checkpoint damaged; `why`: 7 stalled, 8 stalled on the "
      "servers."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kVersion));
  app.fallthrough();  // global options may also follow the subcommand
  AddGlobalFlags(app, g);
  std::vector<Command> commands;
  AddMemberCommands(app, g, &commands);
  AddJobCommands(app, g, &commands);
  AddShardCommands(app, g, &commands);
  AddTopWhyCommands(app, g, &commands);
  AddCheckpointCommands(app, g, &commands);
  AddVersionCommand(app, g, &commands);
  AddConfigCommands(app, g, &commands);
  AddCompletionCommand(app, g, &commands);
  if (int rc = CheckCommand(app, argc, argv); rc != kOk) return rc;

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

void AddWatchFlags(CLI::App* command, Globals& g) {
  command->add_flag("-w,--watch", g.watch, "print again whenever the output changes, until Ctrl-C");
  command->add_option("--watch_interval", g.watch_interval_s, "seconds between polls with --watch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace tessel::ctl

int main(int argc, char** argv) { return tessel::ctl::Main(argc, argv); }
