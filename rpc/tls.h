// Mutual TLS for the control plane: which files a process uses, and the gRPC
// credentials built from them.
//
// Contract: TLS is off unless a CA, a certificate and a key are all given.
// With them, servers require and verify a client certificate issued by the CA
// (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY), and clients
// verify the server's certificate and its name: the host they dial must be in
// the certificate's subjectAltName (scripts/gen_certs.sh issues
// DNS:localhost and IP:127.0.0.1), unless `server_name` overrides the name
// expected. Every file is read and checked when the credentials are built,
// so a bad path, a key that does not match its certificate or an expired
// certificate is a Status naming the flag, not a crash or a failed handshake
// later. The UCX data path is not covered (docs/operations.md, Security).
//
// Example:
//   TlsOptions tls{.ca_file = "certs/ca.crt", .cert_file = "certs/client.crt",
//                  .key_file = "certs/client.key"};
//   TESSEL_ASSIGN_OR_RETURN(ClientCredentials creds, LoadClientCredentials(tls));
//   auto channel = MakeChannel("127.0.0.1:7070", creds);
#ifndef TESSEL_RPC_TLS_H_
#define TESSEL_RPC_TLS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/tls_options.h"

namespace tessel {

// What a channel needs: credentials (insecure when !tls) and the name
// override, if any. Cheap to copy; share one per process.
struct ClientCredentials {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: insecure
  std::string server_name;
  bool tls() const { return credentials != nullptr; }
};

// Checks and loads `options`. Insecure credentials when !options.enabled().
absl::StatusOr<ClientCredentials> LoadClientCredentials(const TlsOptions& options);

// The flags a TLS error names. Default: the --tls_* flags of every binary.
struct TlsFlagNames {
  std::string ca = "--tls_ca";
  std::string cert = "--tls_cert";
  std::string key = "--tls_key";
};

// TLS client credentials for a server outside Tessel (etcd) that may or may
// not ask for a client certificate: always TLS, whatever `options.enabled()`.
// An empty ca_file trusts the system's roots (gRPC's default store); cert_file
// and key_file go together (both: presented to the server; neither: no client
// certificate). The files are read and checked as by LoadClientCredentials,
// and errors name the flags in `names`.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(
//       ClientCredentials creds,
//       LoadTlsClientCredentials({.ca_file = "certs/ca.crt"}, {.ca = "--etcd_tls_ca",
//                                .cert = "--etcd_tls_cert", .key = "--etcd_tls_key"}));
absl::StatusOr<ClientCredentials> LoadTlsClientCredentials(const TlsOptions& options,
                                                           const TlsFlagNames& names);
// Server credentials that require and verify client certificates; insecure
// when !options.enabled().
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsOptions& options);

// The same options as command-line flags, to forward to child processes
// (empty when TLS is off).
std::vector<std::string> TlsFlags(const TlsOptions& options);

// A hint for an UNAVAILABLE error whose message looks like a failed TLS
// handshake or a plaintext/TLS mismatch, or "" if it does not.
std::string TlsErrorHint(const std::string& grpc_message);

}  // namespace tessel

#endif  // TESSEL_RPC_TLS_H_
