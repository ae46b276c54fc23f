#include "rpc/auth_options.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessel {

absl::StatusOr<AuthOptions> LoadAuthOptions(const AuthFlags& flags) {
  AuthOptions o;
  o.allow_anonymous_reads = flags.allow_anonymous_reads;
  o.certificate_roles = flags.certificate_roles;
  if (flags.certificate_roles && !flags.tls) {
    return absl::InvalidArgumentError(
        "--cert_roles takes roles from client certificates and needs mutual TLS (--tls_ca, "
        "--tls_cert, --tls_key)");
  }
  if (!flags.admin_token_file.empty()) {
    TESSEL_ASSIGN_OR_RETURN(o.token, ReadTokenFile("--admin_token_file", flags.admin_token_file));
  }
  if (!flags.worker_token_file.empty()) {
    TESSEL_ASSIGN_OR_RETURN(
        o.worker_tokens,
        ReadRoleTokenFile("--worker_token_file", flags.worker_token_file, Role::kWorker));
  }
  if (!flags.server_token_file.empty()) {
    TESSEL_ASSIGN_OR_RETURN(
        o.server_tokens,
        ReadRoleTokenFile("--server_token_file", flags.server_token_file, Role::kServer));
  }
  // One token, one role: a worker token that is also the admin token would
  // make every worker an admin again.
  auto clash = [&](const std::vector<RoleToken>& a, absl::string_view a_flag,
                   const std::vector<RoleToken>& b, absl::string_view b_flag) -> absl::Status {
    for (const RoleToken& x : a) {
      for (const RoleToken& y : b) {
        if (x.token == y.token) {
          return absl::InvalidArgumentError(absl::StrCat(
              a_flag, " and ", b_flag, " hold the same token; every role needs its own token"));
        }
      }
    }
    return absl::OkStatus();
  };
  const std::vector<RoleToken> admin = o.token.empty()
                                           ? std::vector<RoleToken>{}
                                           : std::vector<RoleToken>{{o.token, Role::kAdmin, {}}};
  for (absl::Status s :
       {clash(admin, "--admin_token_file", o.worker_tokens, "--worker_token_file"),
        clash(admin, "--admin_token_file", o.server_tokens, "--server_token_file"),
        clash(o.worker_tokens, "--worker_token_file", o.server_tokens, "--server_token_file")}) {
    TESSEL_RETURN_IF_ERROR(s);
  }
  return o;
}

absl::StatusOr<SecurityPosture> SecurityPostureOf(const AuthFlags& flags,
                                                  const AuthOptions& options,
                                                  absl::string_view program) {
  SecurityPosture p;
  p.tls = flags.tls;
  const bool tokens =
      !options.token.empty() || !options.worker_tokens.empty() || !options.server_tokens.empty();
  p.credentials = tokens || options.certificate_roles;
  if (!p.tls && !p.credentials) {
    if (!flags.insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          program,
          " has no credentials, so anyone who can reach it could read and change every job: "
          "give it token files (--admin_token_file, --worker_token_file",
          program == "tessel-registry" ? ", --server_token_file" : "",
          ") and/or mutual TLS (--tls_ca, --tls_cert, --tls_key), as docs/security.md "
          "explains (tessel-launch and tessel-demo make them for you), or pass --insecure to "
          "run open on a network you trust"));
    }
    p.insecure = true;
    p.description = "insecure";
    return p;
  }
  if (p.tls && !p.credentials && !flags.trust_any_certificate) {
    return absl::FailedPreconditionError(absl::StrCat(
        program,
        " serves mutual TLS with no credential table, so every certificate the CA ever "
        "issued could do everything (delete jobs and checkpoints, read any job's state): add "
        "roles (--cert_roles, or token files: --admin_token_file, --worker_token_file), or pass "
        "--trust_any_certificate if every holder of a certificate from this CA is an admin"));
  }
  std::vector<std::string> parts;
  if (p.tls) parts.push_back("mutual TLS");
  if (tokens) parts.push_back("tokens");
  if (options.certificate_roles) parts.push_back("certificate roles");
  if (p.tls && !p.credentials) parts.push_back("any certificate");
  p.description = absl::StrJoin(parts, ", ");
  return p;
}

}  // namespace tessel
