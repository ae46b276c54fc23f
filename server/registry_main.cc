// tessel-registry: the embedded membership registry as a standalone process.
#include <csignal>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/log.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "rpc/tls_flags.h"
#include "server/registry_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port for the Registry gRPC service (port 0 picks a free port)");
ABSL_FLAG(int, lease_ttl_ms, 3000, "default lease time-to-live of members, in milliseconds");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound host:port to this file");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token; when set, ListGroups (every job and pool) needs it "
          "unless --allow_anonymous_reads. Member operations never need it");
ABSL_FLAG(bool, allow_anonymous_reads, true,
          "with an admin token: let ListGroups through without it");

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel membership registry: members join with a lease, heartbeat to keep it, and\n"
      "watchers see every change as a new epoch.\n\n"
      "Usage: tessel-registry --listen=127.0.0.1:7070 [--lease_ttl_ms=3000]\n"
      "         [--tls_ca=CA --tls_cert=CERT --tls_key=KEY] [--admin_token_file=FILE]");
  absl::ParseCommandLine(argc, argv);
  tessel::SetLogLabel("registry");
  tessel::AdminAuthOptions auth;
  auth.allow_anonymous_reads = absl::GetFlag(FLAGS_allow_anonymous_reads);
  if (!absl::GetFlag(FLAGS_admin_token_file).empty()) {
    auto token = tessel::ReadTokenFile("--admin_token_file", absl::GetFlag(FLAGS_admin_token_file));
    if (!token.ok()) {
      std::cerr << "tessel-registry: " << token.status().message() << "\n";
      return 1;
    }
    auth.token = *token;
  }
  auto credentials = tessel::LoadServerCredentials(tessel::TlsOptionsFromFlags());
  if (!credentials.ok()) {
    std::cerr << "tessel-registry: " << credentials.status().message() << "\n";
    return 1;
  }
  tessel::RegistryService service(absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms)),
                                  std::move(auth));
  std::string bound;
  auto server =
      tessel::StartGrpcServer(absl::GetFlag(FLAGS_listen), {&service}, &bound, *credentials);
  if (!server.ok()) {
    std::cerr << "tessel-registry: " << server.status().message() << "\n";
    return 1;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    FILE* f = std::fopen(absl::GetFlag(FLAGS_port_file).c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f, "%s\n", bound.c_str());
      std::fclose(f);
    }
  }
  TESSEL_LOG(INFO) << "registry listening on " << bound
                   << (tessel::TlsOptionsFromFlags().enabled() ? " (mutual TLS)" : " (plaintext)");
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) absl::SleepFor(absl::Milliseconds(100));
  service.Stop();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return 0;
}
