// Admin-token authorization shared by every gRPC service (shard server,
// registry), and the client half that presents the token.
//
// Contract: a service configured with a token lets an RPC through when the
// RPC's access class allows it without a token, or when the caller sent
// metadata `authorization: Bearer <token>` with the right token. Classes:
//   kMember  member operations (registry Join/Heartbeat/Leave/GetView/Watch):
//            never need the token; mutual TLS is what keeps strangers out.
//   kRead    operator reads (listings, stats): need the token unless
//            `allow_anonymous_reads`.
//   kAdmin   anything that changes or deletes state on an operator's behalf:
//            always need the token.
// No token configured: everything is allowed. Refusals are UNAUTHENTICATED
// (no token sent) or PERMISSION_DENIED (wrong token); the comparison takes
// the same time whatever the secret's content.
//
// Example:
//   AdminAuth auth({.token = token, .allow_anonymous_reads = false}, "this registry");
//   if (grpc::Status s = auth.Check(*ctx, Access::kRead, "ListGroups"); !s.ok()) return s;
#ifndef TESSEL_RPC_AUTH_H_
#define TESSEL_RPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

enum class Access { kMember, kRead, kAdmin };

struct AdminAuthOptions {
  std::string token;  // "" = no authorization
  bool allow_anonymous_reads = true;
};

class AdminAuth {
 public:
  // `service` names the server in refusals, e.g. "this shard server".
  AdminAuth(AdminAuthOptions options, std::string service)
      : options_(std::move(options)), service_(std::move(service)) {}

  grpc::Status Check(const grpc::ServerContext& ctx, Access access, absl::string_view rpc) const;
  bool enabled() const { return !options_.token.empty(); }

 private:
  const AdminAuthOptions options_;
  const std::string service_;
};

// True when `given` equals `secret` (never for an empty secret). Its running
// time depends on the length of `given` only, not on where they differ.
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

// Adds `authorization: Bearer <token>` unless `token` is empty.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

// The first line of a token file (surrounding whitespace dropped). `flag`
// names the flag in errors. Tokens shorter than 16 characters are refused.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path);

}  // namespace tessel

#endif  // TESSEL_RPC_AUTH_H_
