// TlsOptions: where a process finds its mutual-TLS files. A plain struct
// with no gRPC types, so public headers (the worker SDK's options) can carry
// it; rpc/tls.h turns it into credentials.
#ifndef TESSEL_RPC_TLS_OPTIONS_H_
#define TESSEL_RPC_TLS_OPTIONS_H_

#include <string>

namespace tessel {

// Paths of PEM files (the flags --tls_ca, --tls_cert, --tls_key, and
// --tls_server_name of every binary). All empty: insecure.
struct TlsOptions {
  std::string ca_file;    // CA certificate(s) the peer's certificate must chain to
  std::string cert_file;  // this process's certificate (chain), presented to peers
  std::string key_file;   // the private key of cert_file
  // Client side: the name the server's certificate must carry, instead of the
  // host part of the address dialed (e.g. when dialing an IP that is not in
  // the certificate). Empty: the dialed host.
  std::string server_name;

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

}  // namespace tessel

#endif  // TESSEL_RPC_TLS_OPTIONS_H_
