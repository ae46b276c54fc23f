#include "rpc/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/secret_file.h"

namespace tessel {
namespace {

struct PemFiles {
  std::string ca;
  std::string cert;
  std::string key;
};

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " file '", path, "' is empty"));
  }
  return s.str();
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// Every certificate in `pem`, or an error naming the flag and file.
absl::StatusOr<std::vector<X509Ptr>> ParseCerts(const std::string& flag, const std::string& path,
                                                const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<X509Ptr> certs;
  for (;;) {
    X509Ptr x(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (x == nullptr) break;
    certs.push_back(std::move(x));
  }
  ERR_clear_error();  // the end of the input reads as an error
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " file '", path, "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  for (const X509Ptr& x : certs) {
    if (X509_cmp_current_time(X509_get0_notAfter(x.get())) < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the certificate in ", flag, " file '", path,
                       "' has expired; issue a new one (scripts/gen_certs.sh)"));
    }
    if (X509_cmp_current_time(X509_get0_notBefore(x.get())) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the certificate in ", flag, " file '", path,
                       "' is not valid yet (check this machine's clock)"));
    }
  }
  return certs;
}

// Reads and checks the files of `o`; errors name the flags in `n`. With
// `require_all` (mutual TLS between Tessel processes) all three files are
// needed; otherwise the CA may be missing (ca stays empty) and the certificate
// and key go together (both stay empty without them).
absl::StatusOr<PemFiles> LoadPem(const TlsOptions& o, const TlsFlagNames& n, bool require_all) {
  if (require_all) {
    std::vector<std::string> missing;
    if (o.ca_file.empty()) missing.push_back(n.ca);
    if (o.cert_file.empty()) missing.push_back(n.cert);
    if (o.key_file.empty()) missing.push_back(n.key);
    if (!missing.empty()) {
      std::string names;
      for (const std::string& m : missing) absl::StrAppend(&names, names.empty() ? "" : " and ", m);
      return absl::InvalidArgumentError(absl::StrCat(
          "mutual TLS needs all of --tls_ca, --tls_cert and --tls_key (or TESSEL_TLS_CA, "
          "TESSEL_TLS_CERT, TESSEL_TLS_KEY); missing ",
          names));
    }
  } else if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        n.cert, " and ", n.key, " go together (a client certificate and its private key); missing ",
        o.cert_file.empty() ? n.cert : n.key));
  }
  PemFiles pem;
  if (!o.ca_file.empty()) {
    TESSEL_ASSIGN_OR_RETURN(pem.ca, ReadFile(n.ca, o.ca_file));
  }
  if (!o.cert_file.empty()) {
    TESSEL_ASSIGN_OR_RETURN(auto cert, ReadFile(n.cert, o.cert_file));
    TESSEL_ASSIGN_OR_RETURN(auto key, ReadSecretFile(absl::StrCat(n.key, " file"), o.key_file));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(n.key, " file '", o.key_file, "' is empty"));
    }
    pem.cert = std::move(cert);
    pem.key = std::move(key);
  }

  if (!pem.ca.empty()) {
    TESSEL_RETURN_IF_ERROR(ParseCerts(n.ca, o.ca_file, pem.ca));
  }
  if (pem.cert.empty()) return pem;
  TESSEL_ASSIGN_OR_RETURN(auto own, ParseCerts(n.cert, o.cert_file, pem.cert));
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(pem.key.data(), static_cast<int>(pem.key.size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key_obj(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key_obj == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(n.key, " file '", o.key_file,
                                                   "' holds no unencrypted PEM private key (",
                                                   OpenSslError(), ")"));
  }
  if (X509_check_private_key(own.front().get(), key_obj.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(n.key, " file '", o.key_file,
                                                   "' is not the key of the certificate in ",
                                                   n.cert, " file '", o.cert_file, "'"));
  }
  return pem;
}

// Client credentials from loaded PEM text; an empty CA means gRPC's default
// roots.
absl::StatusOr<ClientCredentials> ClientFromPem(const PemFiles& pem,
                                                const std::string& server_name) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.ca;
  ssl.pem_cert_chain = pem.cert;
  ssl.pem_private_key = pem.key;
  ClientCredentials out;
  out.credentials = grpc::SslCredentials(ssl);
  if (out.credentials == nullptr) {
    return absl::InternalError("gRPC refused the TLS client credentials");
  }
  out.server_name = server_name;
  return out;
}

}  // namespace

absl::StatusOr<ClientCredentials> LoadClientCredentials(const TlsOptions& options) {
  if (!options.enabled()) return ClientCredentials();
  TESSEL_ASSIGN_OR_RETURN(auto pem, LoadPem(options, TlsFlagNames(), /*require_all=*/true));
  return ClientFromPem(pem, options.server_name);
}

absl::StatusOr<ClientCredentials> LoadTlsClientCredentials(const TlsOptions& options,
                                                           const TlsFlagNames& names) {
  TESSEL_ASSIGN_OR_RETURN(auto pem, LoadPem(options, names, /*require_all=*/false));
  return ClientFromPem(pem, options.server_name);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsOptions& options) {
  if (!options.enabled()) return grpc::InsecureServerCredentials();
  TESSEL_ASSIGN_OR_RETURN(auto pem, LoadPem(options, TlsFlagNames(), /*require_all=*/true));
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = pem.ca;
  ssl.pem_key_cert_pairs.push_back({pem.key, pem.cert});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(ssl);
  if (creds == nullptr) return absl::InternalError("gRPC refused the TLS server credentials");
  return creds;
}

std::vector<std::string> TlsFlags(const TlsOptions& options) {
  std::vector<std::string> out;
  if (!options.ca_file.empty()) out.push_back("--tls_ca=" + options.ca_file);
  if (!options.cert_file.empty()) out.push_back("--tls_cert=" + options.cert_file);
  if (!options.key_file.empty()) out.push_back("--tls_key=" + options.key_file);
  if (!options.server_name.empty()) out.push_back("--tls_server_name=" + options.server_name);
  return out;
}

std::string TlsErrorHint(const std::string& grpc_message) {
  const std::string m = absl::AsciiStrToLower(grpc_message);
  if (absl::StrContains(m, "handshake") || absl::StrContains(m, "ssl") ||
      absl::StrContains(m, "certificate") || absl::StrContains(m, "tlsv1 alert") ||
      absl::StrContains(m, "peer name")) {
    return "TLS handshake failed: check that --tls_ca names the CA that issued the server's "
           "certificate, that --tls_cert/--tls_key are a pair issued by the CA the server "
           "trusts, that the server's certificate names the host dialed (or set "
           "--tls_server_name), and that the server uses TLS at all; see docs/errors.md";
  }
  if (absl::StrContains(m, "socket closed") || absl::StrContains(m, "connection reset") ||
      absl::StrContains(m, "end of tcp stream") || absl::StrContains(m, "connection closed")) {
    return "the server closed the connection while it was being set up: if the server uses "
           "mutual TLS, it refused this client's certificate or its lack of one; pass --tls_ca, "
           "--tls_cert and --tls_key with a certificate issued by the CA the server trusts; see "
           "docs/errors.md";
  }
  return "";
}

}  // namespace tessel
