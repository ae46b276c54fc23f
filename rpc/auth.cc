#include "rpc/auth.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessel {

grpc::Status AdminAuth::Check(const grpc::ServerContext& ctx, Access access,
                              absl::string_view rpc) const {
  if (options_.token.empty() || access == Access::kMember ||
      (access == Access::kRead && options_.allow_anonymous_reads)) {
    return grpc::Status::OK;
  }
  auto it = ctx.client_metadata().find("authorization");
  if (it == ctx.client_metadata().end()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(service_, " requires an admin token for ", rpc,
                     ": pass --token_file or set TESSEL_TOKEN (metadata 'authorization: Bearer "
                     "<token>')"));
  }
  const absl::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, "Bearer ") || !ConstantTimeEquals(value.substr(7), options_.token)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("the admin token is not valid for ", service_));
  }
  return grpc::Status::OK;
}

bool ConstantTimeEquals(absl::string_view given, absl::string_view secret) {
  if (secret.empty()) return false;
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ secret[i % secret.size()]);
  }
  return diff == 0;
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " '", path, "': ", std::strerror(errno)));
  }
  std::string line;
  std::getline(in, line);
  const std::string token(absl::StripAsciiWhitespace(line));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat("the admin token in ", flag, " '", path,
                                                   "' must be at least 16 characters, e.g. "
                                                   "`head -c 24 /dev/urandom | base64 > ",
                                                   path, "`"));
  }
  return token;
}

}  // namespace tessel
