#include "rpc/auth.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "proto/registry.grpc.pb.h"
#include "rpc/grpc_util.h"

namespace tessel {
namespace {

TEST(ConstantTimeEqualsTest, Basics) {
  EXPECT_TRUE(ConstantTimeEquals("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdeX", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("X123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcde", "0123456789abcdef"));    // prefix
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdef0", "0123456789abcdef"));  // longer
  // A repetition of the secret must not match (the loop wraps over the secret).
  EXPECT_FALSE(ConstantTimeEquals("abab", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // no secret: nothing matches
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST(ReadTokenFileTest, ReadsFirstLineTrimmed) {
  auto t = ReadTokenFile("--token_file", WriteFile("good", "  tessel-admin-token-0123 \nrest\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tessel-admin-token-0123");
}

TEST(ReadTokenFileTest, ShortOrMissingTokenIsRefused) {
  auto t = ReadTokenFile("--admin_token_file", WriteFile("short", "abc\n"));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("at least 16 characters"), std::string::npos);
  t = ReadTokenFile("--admin_token_file", "/nonexistent/token");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("--admin_token_file '/nonexistent/token'"), std::string::npos)
      << t.status();
}

// Carries one RPC per access class through a real in-process gRPC server, so
// the metadata the check reads is what a client really sends.
class AccessService final : public v1::Registry::Service {
 public:
  explicit AccessService(AdminAuthOptions o) : auth_(std::move(o), "this test service") {}
  grpc::Status GetView(grpc::ServerContext* ctx, const v1::GetViewRequest*,
                       v1::GetViewResponse*) override {
    return auth_.Check(*ctx, Access::kMember, "GetView");
  }
  grpc::Status ListGroups(grpc::ServerContext* ctx, const v1::ListGroupsRequest*,
                          v1::ListGroupsResponse*) override {
    return auth_.Check(*ctx, Access::kRead, "ListGroups");
  }
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest*,
                     v1::LeaveResponse*) override {
    return auth_.Check(*ctx, Access::kAdmin, "Leave");
  }

 private:
  const AdminAuth auth_;
};

struct Codes {
  grpc::StatusCode member, read, admin;
};

Codes CallAll(const AdminAuthOptions& o, const std::string& token) {
  AccessService service(o);
  std::string address;
  auto server = StartGrpcServer("127.0.0.1:0", {&service}, &address);
  EXPECT_TRUE(server.ok()) << server.status();
  auto stub = v1::Registry::NewStub(MakeChannel(address));
  Codes c;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, token);
    v1::GetViewResponse resp;
    c.member = stub->GetView(&ctx, v1::GetViewRequest(), &resp).error_code();
  }
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, token);
    v1::ListGroupsResponse resp;
    c.read = stub->ListGroups(&ctx, v1::ListGroupsRequest(), &resp).error_code();
  }
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, token);
    v1::LeaveResponse resp;
    c.admin = stub->Leave(&ctx, v1::LeaveRequest(), &resp).error_code();
  }
  (*server)->Shutdown(absl::ToChronoTime(absl::Now()));
  return c;
}

constexpr char kToken[] = "tessel-admin-token-0123";

TEST(AdminAuthTest, NoTokenConfiguredAllowsEverything) {
  Codes c = CallAll({}, "");
  EXPECT_EQ(c.member, grpc::StatusCode::OK);
  EXPECT_EQ(c.read, grpc::StatusCode::OK);
  EXPECT_EQ(c.admin, grpc::StatusCode::OK);
}

TEST(AdminAuthTest, AnonymousReadsAllowed) {
  Codes c = CallAll({kToken, true}, "");
  EXPECT_EQ(c.member, grpc::StatusCode::OK);
  EXPECT_EQ(c.read, grpc::StatusCode::OK);
  EXPECT_EQ(c.admin, grpc::StatusCode::UNAUTHENTICATED);
}

TEST(AdminAuthTest, AnonymousReadsRefused) {
  Codes c = CallAll({kToken, false}, "");
  EXPECT_EQ(c.member, grpc::StatusCode::OK);  // members never need the token
  EXPECT_EQ(c.read, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(c.admin, grpc::StatusCode::UNAUTHENTICATED);
}

TEST(AdminAuthTest, WrongTokenIsDenied) {
  Codes c = CallAll({kToken, false}, "tessel-admin-token-0124");
  EXPECT_EQ(c.read, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(c.admin, grpc::StatusCode::PERMISSION_DENIED);
  c = CallAll({kToken, false}, kToken);
  EXPECT_EQ(c.member, grpc::StatusCode::OK);
  EXPECT_EQ(c.read, grpc::StatusCode::OK);
  EXPECT_EQ(c.admin, grpc::StatusCode::OK);
}

}  // namespace
}  // namespace tessel
