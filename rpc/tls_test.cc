#include "rpc/tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/registry.grpc.pb.h"
#include "rpc/grpc_util.h"

namespace tessel {
namespace {

// Certificates from scripts/gen_certs.sh, made once for the whole suite.
std::string CertDir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    auto* d = new std::string(absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tls_test_certs"));
    const std::string cmd = absl::StrCat("scripts/gen_certs.sh ", *d, " > /dev/null");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return *dir;
}

TlsOptions Pair(const std::string& ca, const std::string& name) {
  TlsOptions o;
  o.ca_file = absl::StrCat(CertDir(), "/", ca, ".crt");
  o.cert_file = absl::StrCat(CertDir(), "/", name, ".crt");
  o.key_file = absl::StrCat(CertDir(), "/", name, ".key");
  return o;
}

TEST(TlsOptionsTest, EmptyMeansInsecure) {
  TlsOptions none;
  EXPECT_FALSE(none.enabled());
  auto client = LoadClientCredentials(none);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE(client->tls());
  auto server = LoadServerCredentials(none);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(TlsFlags(none).empty());
}

TEST(TlsOptionsTest, MissingFlagIsNamed) {
  TlsOptions o = Pair("ca", "client");
  o.key_file.clear();
  auto c = LoadClientCredentials(o);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("missing --tls_key"), std::string::npos) << c.status();
  o = Pair("ca", "server");
  o.ca_file.clear();
  auto s = LoadServerCredentials(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("missing --tls_ca"), std::string::npos) << s.status();
}

TEST(TlsOptionsTest, BadPathsAreClearErrors) {
  TlsOptions o = Pair("ca", "client");
  o.ca_file = "/nonexistent/ca.crt";
  auto c = LoadClientCredentials(o);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("--tls_ca file '/nonexistent/ca.crt'"), std::string::npos)
      << c.status();
  o = Pair("ca", "server");
  o.cert_file = CertDir();  // a directory
  EXPECT_FALSE(LoadServerCredentials(o).ok());
}

// A private key others may read is refused (rpc/secret_file.h), for the
// --tls_* flags and for the etcd client's alike; certificates may be public.
TEST(TlsOptionsTest, ReadableKeyIsRefused) {
  const std::string key = absl::StrCat(CertDir(), "/readable-client.key");
  std::ifstream in(absl::StrCat(CertDir(), "/client.key"));
  std::ofstream(key) << in.rdbuf();
  ASSERT_EQ(chmod(key.c_str(), 0644), 0);
  TlsOptions o = Pair("ca", "client");
  ASSERT_TRUE(LoadClientCredentials(o).ok());  // 0644 certificates, a 0600 key
  o.key_file = key;
  auto c = LoadClientCredentials(o);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied) << c.status();
  EXPECT_NE(c.status().message().find("--tls_key file '" + key + "' has mode 0644"),
            std::string::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("chmod 600 " + key), std::string::npos) << c.status();
  c = LoadTlsClientCredentials(
      o, {.ca = "--etcd_tls_ca", .cert = "--etcd_tls_cert", .key = "--etcd_tls_key"});
  ASSERT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied) << c.status();
  EXPECT_NE(c.status().message().find("--etcd_tls_key file"), std::string::npos) << c.status();
  o = Pair("ca", "server");
  o.key_file = key;
  EXPECT_EQ(LoadServerCredentials(o).status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(chmod(key.c_str(), 0600), 0);
  EXPECT_TRUE(LoadClientCredentials(Pair("ca", "client")).ok());
}

TEST(TlsOptionsTest, NotPemIsAClearError) {
  const std::string junk = absl::StrCat(CertDir(), "/junk.pem");
  std::ofstream(junk) << "not a certificate\n";
  chmod(junk.c_str(), 0600);  // used as a key too, which must be owner-only
  TlsOptions o = Pair("ca", "client");
  o.cert_file = junk;
  auto c = LoadClientCredentials(o);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--tls_cert file"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("no PEM certificate"), std::string::npos) << c.status();
  o = Pair("ca", "client");
  o.key_file = junk;
  c = LoadClientCredentials(o);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("no unencrypted PEM private key"), std::string::npos)
      << c.status();
  o = Pair("ca", "client");
  o.ca_file = o.key_file;  // a key where the CA belongs
  EXPECT_FALSE(LoadClientCredentials(o).ok());
}

TEST(TlsOptionsTest, KeyMustMatchCertificate) {
  TlsOptions o = Pair("ca", "server");
  o.key_file = absl::StrCat(CertDir(), "/client.key");
  auto s = LoadServerCredentials(o);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("is not the key of the certificate"), std::string::npos)
      << s.status();
}

TEST(TlsOptionsTest, FlagsRoundTrip) {
  TlsOptions o = Pair("ca", "client");
  o.server_name = "localhost";
  const std::vector<std::string> flags = TlsFlags(o);
  ASSERT_EQ(flags.size(), 4u);
  EXPECT_EQ(flags[0], "--tls_ca=" + o.ca_file);
  EXPECT_EQ(flags[3], "--tls_server_name=localhost");
}

// TLS to a server outside Tessel (etcd): CA and client pair are optional,
// errors name the caller's flags.
TEST(TlsClientCredentialsTest, OptionalFilesAndOwnFlagNames) {
  const TlsFlagNames names{
      .ca = "--etcd_tls_ca", .cert = "--etcd_tls_cert", .key = "--etcd_tls_key"};
  auto roots = LoadTlsClientCredentials(TlsOptions(), names);
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_TRUE(roots->tls());  // the system's roots
  TlsOptions ca_only;
  ca_only.ca_file = Pair("ca", "client").ca_file;
  auto c = LoadTlsClientCredentials(ca_only, names);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tls());
  ASSERT_TRUE(LoadTlsClientCredentials(Pair("ca", "client"), names).ok());

  TlsOptions no_key = Pair("ca", "client");
  no_key.key_file.clear();
  c = LoadTlsClientCredentials(no_key, names);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--etcd_tls_cert and --etcd_tls_key go together"),
            std::string::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("missing --etcd_tls_key"), std::string::npos) << c.status();

  TlsOptions bad_ca = ca_only;
  bad_ca.ca_file = "/nonexistent/ca.crt";
  c = LoadTlsClientCredentials(bad_ca, names);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("--etcd_tls_ca file '/nonexistent/ca.crt'"),
            std::string::npos)
      << c.status();

  TlsOptions mismatched = Pair("ca", "client");
  mismatched.key_file = absl::StrCat(CertDir(), "/server.key");
  c = LoadTlsClientCredentials(mismatched, names);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--etcd_tls_key file"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("--etcd_tls_cert file"), std::string::npos) << c.status();
}

// A registry stand-in answering ListGroups with one view.
class FakeRegistry final : public v1::Registry::Service {
  grpc::Status ListGroups(grpc::ServerContext*, const v1::ListGroupsRequest*,
                          v1::ListGroupsResponse* resp) override {
    resp->add_views()->set_group("g");
    return grpc::Status::OK;
  }
};

class TlsEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto creds = LoadServerCredentials(Pair("ca", "server"));
    ASSERT_TRUE(creds.ok()) << creds.status();
    auto server = StartGrpcServer("127.0.0.1:0", {&service_}, &address_, *creds);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  absl::Status Call(const ClientCredentials& creds, const std::string& address) {
    auto stub = v1::Registry::NewStub(MakeChannel(address, creds));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    v1::ListGroupsRequest req;
    v1::ListGroupsResponse resp;
    absl::Status s = FromGrpc(stub->ListGroups(&ctx, req, &resp), "ListGroups");
    if (s.ok() && resp.views_size() != 1) return absl::InternalError("bad response");
    return s;
  }
  absl::Status Call(const TlsOptions& o) {
    TESSEL_ASSIGN_OR_RETURN(auto creds, LoadClientCredentials(o));
    return Call(creds, address_);
  }

  FakeRegistry service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(TlsEndToEndTest, TrustedClientIsServed) {
  EXPECT_TRUE(Call(Pair("ca", "client")).ok());
  EXPECT_TRUE(Call(Pair("ca", "server")).ok());  // servers are clients of each other too
}

TEST_F(TlsEndToEndTest, LocalhostNameVerifies) {
  auto creds = LoadClientCredentials(Pair("ca", "client"));
  ASSERT_TRUE(creds.ok());
  const std::string port = address_.substr(address_.rfind(':') + 1);
  EXPECT_TRUE(Call(*creds, "localhost:" + port).ok());
}

TEST_F(TlsEndToEndTest, UntrustedClientCertificateIsRefused) {
  TlsOptions o = Pair("untrusted-ca", "untrusted");
  o.ca_file = Pair("ca", "client").ca_file;  // trusts the server, but is not trusted
  absl::Status s = Call(o);
  ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  // TLS 1.3: the server checks the client's certificate after the client
  // finished its half, so the client sees the connection closed.
  EXPECT_NE(s.message().find("--tls_cert"), std::string::npos) << s;
}

TEST_F(TlsEndToEndTest, ClientThatDoesNotTrustTheServerRefuses) {
  TlsOptions o = Pair("untrusted-ca", "client");  // wrong CA: server's certificate not trusted
  absl::Status s = Call(o);
  ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("TLS handshake failed: check that --tls_ca"), std::string::npos) << s;
}

TEST_F(TlsEndToEndTest, PlaintextClientIsRefused) {
  absl::Status s = Call(ClientCredentials{}, address_);
  ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("--tls_ca"), std::string::npos) << s;
}

TEST_F(TlsEndToEndTest, WrongServerNameIsRefused) {
  TlsOptions o = Pair("ca", "client");
  o.server_name = "not-this-server.example";
  absl::Status s = Call(o);
  ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("TLS handshake failed"), std::string::npos) << s;
  o.server_name = "localhost";
  EXPECT_TRUE(Call(o).ok());
}

}  // namespace
}  // namespace tessel
