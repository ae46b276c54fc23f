#include "rpc/tls_flags.h"

#include <cstdlib>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca, "",
          "mutual TLS: PEM file of the CA that issued every component's certificate (env "
          "TESSEL_TLS_CA); with --tls_cert and --tls_key, every gRPC channel and server uses "
          "mutual TLS. Empty: plaintext");
ABSL_FLAG(std::string, tls_cert, "",
          "mutual TLS: PEM certificate this process presents (env TESSEL_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "",
          "mutual TLS: PEM private key of --tls_cert (env TESSEL_TLS_KEY)");
ABSL_FLAG(std::string, tls_server_name, "",
          "mutual TLS: name the servers' certificates must carry instead of the host dialed "
          "(env TESSEL_TLS_SERVER_NAME; empty = the host dialed)");

namespace tessel {
namespace {
std::string FlagOrEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v != nullptr ? v : "";
}
}  // namespace

TlsOptions TlsOptionsFromFlags() {
  TlsOptions o;
  o.ca_file = FlagOrEnv(absl::GetFlag(FLAGS_tls_ca), "TESSEL_TLS_CA");
  o.cert_file = FlagOrEnv(absl::GetFlag(FLAGS_tls_cert), "TESSEL_TLS_CERT");
  o.key_file = FlagOrEnv(absl::GetFlag(FLAGS_tls_key), "TESSEL_TLS_KEY");
  o.server_name = FlagOrEnv(absl::GetFlag(FLAGS_tls_server_name), "TESSEL_TLS_SERVER_NAME");
  return o;
}

}  // namespace tessel
