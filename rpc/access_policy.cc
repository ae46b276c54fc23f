#include "rpc/access_policy.h"

#include <openssl/sha.h>

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "rpc/token_files.h"

namespace tessel {
namespace {

std::string Article(absl::string_view word) {
  return absl::StrCat(absl::StrContains("aeiou", word.substr(0, 1)) ? "an " : "a ", word);
}

// "admin", "admin or worker", "admin, worker or reader".
std::string RoleList(const std::vector<Role>& roles) {
  std::vector<std::string> names = {"admin"};
  for (Role r : roles) {
    if (r != Role::kAdmin) names.push_back(RoleName(r));
  }
  if (names.size() == 1) return names[0];
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "), " or ", names.back());
}

std::string ScopeText(const Grant& g) {
  if (g.role != Role::kWorker || g.jobs.empty()) return "";
  return absl::StrCat(" for job", g.jobs.size() > 1 ? "s" : "", " '", absl::StrJoin(g.jobs, "', '"),
                      "'");
}

}  // namespace

std::string TokenIdentity(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::StrCat("token sha256:", absl::BytesToHexString(
                                           absl::string_view(reinterpret_cast<char*>(digest), 16)));
}

AccessPolicy::AccessPolicy(AuthOptions options, std::string service)
    : options_(std::move(options)),
      service_(std::move(service)),
      enabled_(!options_.token.empty() || !options_.worker_tokens.empty() ||
               !options_.server_tokens.empty() || options_.certificate_roles) {}

bool AccessPolicy::Enforced(Anonymous anonymous) const {
  const bool servers = !options_.server_tokens.empty() || options_.certificate_roles;
  const bool workers = !options_.worker_tokens.empty() || options_.certificate_roles;
  switch (anonymous) {
    case Anonymous::kNever:
      return enabled_;
    case Anonymous::kIfReadsAllowed:
      return enabled_ && !options_.allow_anonymous_reads;
    case Anonymous::kUnlessServerMembers:
      return servers;
    case Anonymous::kUnlessWorkerMembers:
      return workers;
    case Anonymous::kUnlessMembers:
      return servers || workers;
    case Anonymous::kAlways:
      return false;
  }
  return true;
}

Caller AccessPolicy::IdentifyToken(absl::string_view header) const {
  Caller caller;
  if (!absl::ConsumePrefix(&header, "Bearer ")) {
    caller.bad_token = !header.empty();
    return caller;
  }
  // Every configured token is compared (in constant time each), whichever
  // matches, so the time taken does not tell which role a token has.
  const RoleToken* match = nullptr;
  RoleToken admin{options_.token, Role::kAdmin, {}};
  if (ConstantTimeEquals(header, admin.token)) match = &admin;
  for (const auto* list : {&options_.worker_tokens, &options_.server_tokens}) {
    for (const RoleToken& t : *list) {
      if (ConstantTimeEquals(header, t.token) && match == nullptr) match = &t;
    }
  }
  if (match == nullptr) {
    caller.bad_token = true;
    return caller;
  }
  caller.grants.push_back({match->role, match->jobs, "token", TokenIdentity(match->token)});
  return caller;
}

bool AccessPolicy::NeedsCredential(absl::string_view service, absl::string_view rpc) const {
  const RpcRule* rule = RuleFor(service, rpc);
  return rule == nullptr || Enforced(rule->anonymous);
}

absl::Status AccessPolicy::Check(const Caller& caller, absl::string_view service,
                                 absl::string_view rpc, absl::string_view job,
                                 const Creator& creator) const {
  const RpcRule* rule = RuleFor(service, rpc);
  if (rule == nullptr) {
    // Every RPC has a row (auth_test checks the services' descriptors); an
    // RPC without one is refused rather than left open.
    return absl::PermissionDeniedError(
        absl::StrCat(service_, " has no access rule for ", service, ".", rpc));
  }
  if (!Enforced(rule->anonymous)) return absl::OkStatus();
  const Grant* out_of_scope = nullptr;
  const Grant* other_tenant = nullptr;
  for (const Grant& g : caller.grants) {
    if (g.role == Role::kAdmin) return absl::OkStatus();
    bool allowed = false;
    for (Role r : rule->roles) allowed = allowed || r == g.role;
    if (!allowed) continue;
    if (rule->job_scoped && g.role == Role::kWorker && !g.Covers(job)) {
      out_of_scope = &g;
      continue;
    }
    if (rule->job_scoped && g.role == Role::kWorker && !caller.GrantReaches(g, job, creator)) {
      other_tenant = &g;
      continue;
    }
    return absl::OkStatus();
  }
  const std::string roles = RoleList(rule->roles);
  const std::string where = absl::StrCat(service_, " refuses ", rpc, job.empty() ? "" : " of job '",
                                         job, job.empty() ? "" : "'");
  if (caller.grants.empty()) {
    if (caller.bad_token) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the token is not valid for ", service_, " (", rpc, " needs the token of role ", roles,
          "): it is none of the tokens in the service's --admin_token_file",
          options_.worker_tokens.empty() ? "" : ", --worker_token_file",
          options_.server_tokens.empty() ? "" : ", --server_token_file"));
    }
    return absl::UnauthenticatedError(
        absl::StrCat(service_, " requires ", Article(roles), " credential for ", rpc,
                     ": pass --token_file or set TESSEL_TOKEN (metadata 'authorization: Bearer "
                     "<token>'), or present a client certificate with O=tessel:ROLE",
                     rule->anonymous == Anonymous::kIfReadsAllowed
                         ? " (the service refuses anonymous reads: --allow_anonymous_reads=false)"
                         : ""));
  }
  if (other_tenant != nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        where, ": the worker credential", ScopeText(*other_tenant), " (", other_tenant->source,
        ") reaches a name derived from its job only where that credential created it, and ",
        creator->empty() ? absl::StrCat("no creator is recorded for job '", job,
                                        "' (created without credentials, or a checkpoint written "
                                        "before Tessel recorded creators)")
                         : absl::StrCat("job '", job, "' was created by another credential"),
        "; use the credential of job '", job, "' (a worker token or certificate scoped to '", job,
        "'), or an admin credential"));
  }
  if (out_of_scope != nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": the worker credential", ScopeText(*out_of_scope), " (",
                     out_of_scope->source, ") may not act on job '", job,
                     "'; a worker credential covers only its own job (and the names derived from "
                     "it): use the credential of job '",
                     job, "'"));
  }
  const Grant& g = caller.grants.front();
  return absl::PermissionDeniedError(
      absl::StrCat(where, ": the ", RoleName(g.role), " credential", ScopeText(g), " (", g.source,
                   ") may not ", rule->action, " (", Article(roles), " credential may",
                   rule->roles.empty()
                       ? ": tesselctl --token_file=ADMIN_TOKEN_FILE, or a client certificate with "
                         "O=tessel:admin"
                       : "",
                   ")"));
}

absl::Status AccessPolicy::Deny(const Caller& caller, absl::string_view rpc,
                                absl::string_view action, absl::string_view how) const {
  const Grant* g = caller.grants.empty() ? nullptr : &caller.grants.front();
  for (const Grant& each : caller.grants) {
    if (each.role == Role::kWorker) g = &each;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      service_, " refuses ", rpc, ": the ",
      g == nullptr
          ? std::string("anonymous caller")
          : absl::StrCat(RoleName(g->role), " credential", ScopeText(*g), " (", g->source, ")"),
      " may not ", action, " (an admin credential may: ", how, ")"));
}

}  // namespace tessel
