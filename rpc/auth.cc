#include "rpc/auth.h"

#include <grpc/grpc_security_constants.h>

#include <memory>
#include <utility>

namespace tessel {
namespace {

// The policy's refusals are PERMISSION_DENIED or UNAUTHENTICATED, whose
// codes gRPC numbers as Abseil does.
grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

Authorizer::Authorizer(AuthOptions options, std::string service)
    : policy_(std::move(options), std::move(service)) {}

Caller Authorizer::Identify(const grpc::ServerContext& ctx) const {
  Caller caller;
  auto it = ctx.client_metadata().find("authorization");
  if (it != ctx.client_metadata().end()) {
    caller = IdentifyToken(absl::string_view(it->second.data(), it->second.size()));
  }
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr) {
    for (const grpc::string_ref& pem : auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
      for (Grant& g : GrantsFromCertificate(absl::string_view(pem.data(), pem.size()))) {
        caller.grants.push_back(std::move(g));
      }
    }
  }
  return caller;
}

grpc::Status Authorizer::Check(const Caller& caller, absl::string_view service,
                               absl::string_view rpc, absl::string_view job,
                               const Creator& creator) const {
  return ToGrpcStatus(policy_.Check(caller, service, rpc, job, creator));
}

grpc::Status Authorizer::Check(const grpc::ServerContext& ctx, absl::string_view service,
                               absl::string_view rpc, absl::string_view job) const {
  if (!policy_.NeedsCredential(service, rpc)) return grpc::Status::OK;
  return Check(Identify(ctx), service, rpc, job);
}

grpc::Status Authorizer::Deny(const Caller& caller, absl::string_view rpc, absl::string_view action,
                              absl::string_view how) const {
  return ToGrpcStatus(policy_.Deny(caller, rpc, action, how));
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace tessel
