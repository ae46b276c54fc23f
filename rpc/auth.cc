#include "rpc/auth.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessel {
namespace {

constexpr absl::string_view kShard = "ShardServer";
constexpr absl::string_view kRegistry = "Registry";
constexpr absl::string_view kRolePrefix = "tessel:";
constexpr absl::string_view kWorkerCnPrefix = "worker:";

using R = Role;

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

bool Covers(const Grant& g, absl::string_view job) {
  if (g.jobs.empty() || job.empty()) return true;
  for (const std::string& scope : g.jobs) {
    if (JobInScope(scope, job)) return true;
  }
  return false;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};

// Every value of attribute `nid` in `name`, as UTF-8.
std::vector<std::string> NameEntries(X509_NAME* name, int nid) {
  std::vector<std::string> out;
  for (int i = X509_NAME_get_index_by_NID(name, nid, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, nid, i)) {
    ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    unsigned char* utf8 = nullptr;
    const int n = ASN1_STRING_to_UTF8(&utf8, data);
    if (n >= 0 && utf8 != nullptr) out.emplace_back(reinterpret_cast<char*>(utf8), n);
    OPENSSL_free(utf8);
  }
  return out;
}

}  // namespace

std::string RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
    case Role::kServer:
      return "server";
    case Role::kReader:
      return "reader";
  }
  return "unknown";
}

bool Caller::Has(Role role) const {
  for (const Grant& g : grants) {
    if (g.role == role) return true;
  }
  return false;
}

bool Caller::MayActOnJob(absl::string_view job) const {
  for (const Grant& g : grants) {
    if (g.role == Role::kAdmin) return true;
    if (g.role == Role::kWorker && Covers(g, job)) return true;
  }
  return false;
}

const std::vector<RpcRule>& RoleTable() {
  static const auto* table = new std::vector<RpcRule>{
      // Shard server: a job's life is the worker's, its end and its
      // checkpoints' end the operator's.
      {kShard, "CreateJob", {R::kWorker}, Anonymous::kNever, "create or join this job", true},
      {kShard, "SetEpoch", {R::kWorker}, Anonymous::kNever, "set this job's epoch", true},
      {kShard,
       "SetOptimizer",
       {R::kWorker},
       Anonymous::kNever,
       "change this job's optimizer settings",
       true},
      {kShard,
       "SkipTensors",
       {R::kWorker},
       Anonymous::kNever,
       "leave tensors without gradients out of this job's step",
       true},
      {kShard,
       "SaveCheckpoint",
       {R::kWorker},
       Anonymous::kNever,
       "save this job's checkpoints",
       true},
      {kShard, "ReadState", {R::kWorker}, Anonymous::kNever, "read this job's state", true},
      {kShard, "WriteState", {R::kWorker}, Anonymous::kNever, "write this job's state", true},
      {kShard,
       "GetStats",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "read this job's stats",
       true},
      {kShard,
       "ListJobs",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "list jobs",
       false},
      {kShard,
       "GetServerInfo",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kIfReadsAllowed,
       "read server info",
       false},
      {kShard,
       "ListCheckpoints",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "list this job's checkpoints",
       true},
      {kShard,
       "GetCheckpoint",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "read this job's checkpoints",
       true},
      {kShard,
       "VerifyCheckpoint",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "verify this job's checkpoints",
       true},
      {kShard, "DeleteJob", {}, Anonymous::kNever, "delete jobs", true},
      {kShard, "DeleteCheckpoint", {}, Anonymous::kNever, "delete checkpoints", true},
      // Registry.
      {kRegistry,
       "Join/SERVER",
       {R::kServer},
       Anonymous::kUnlessServerMembers,
       "join as a shard server",
       false},
      {kRegistry,
       "Join/WORKER",
       {R::kWorker},
       Anonymous::kUnlessWorkerMembers,
       "join this job's group",
       true},
      {kRegistry,
       "Heartbeat",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kAlways,
       "renew a lease",
       false},
      {kRegistry,
       "Leave",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kAlways,
       "end a lease",
       false},
      {kRegistry,
       "GetView",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kUnlessMembers,
       "read a group's members",
       false},
      {kRegistry,
       "Watch",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kUnlessMembers,
       "watch a group's members",
       false},
      {kRegistry,
       "ListGroups",
       {R::kReader},
       Anonymous::kIfReadsAllowed,
       "list every group",
       false},
  };
  return *table;
}

const RpcRule* RuleFor(absl::string_view service, absl::string_view rpc) {
  for (const RpcRule& r : RoleTable()) {
    if (r.service == service && r.rpc == rpc) return &r;
  }
  return nullptr;
}

std::vector<Grant> GrantsFromCertificate(absl::string_view pem) {
  std::vector<Grant> out;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) return out;
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const std::vector<std::string> cns = NameEntries(subject, NID_commonName);
  const std::vector<std::string> orgs = NameEntries(subject, NID_organizationName);
  const std::string cn = cns.empty() ? "" : cns.front();
  for (const std::string& o : orgs) {
    absl::string_view role = o;
    if (!absl::ConsumePrefix(&role, kRolePrefix)) continue;
    Grant g;
    if (role == "admin") {
      g.role = Role::kAdmin;
    } else if (role == "worker") {
      g.role = Role::kWorker;
      absl::string_view job = cn;
      if (absl::ConsumePrefix(&job, kWorkerCnPrefix) && !job.empty()) g.jobs.emplace_back(job);
    } else if (role == "server") {
      g.role = Role::kServer;
    } else if (role == "reader") {
      g.role = Role::kReader;
    } else {
      continue;
    }
    g.source = absl::StrCat("certificate CN=", cn, ", O=", o);
    out.push_back(std::move(g));
  }
  return out;
}

Authorizer::Authorizer(AuthOptions options, std::string service)
    : options_(std::move(options)),
      service_(std::move(service)),
      enabled_(!options_.token.empty() || !options_.worker_tokens.empty() ||
               !options_.server_tokens.empty() || options_.certificate_roles) {}

bool Authorizer::Enforced(Anonymous anonymous) const {
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

Caller Authorizer::IdentifyToken(absl::string_view header) const {
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
  caller.grants.push_back({match->role, match->jobs, "token"});
  return caller;
}

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

grpc::Status Authorizer::Check(const grpc::ServerContext& ctx, absl::string_view service,
                               absl::string_view rpc, absl::string_view job) const {
  const RpcRule* rule = RuleFor(service, rpc);
  if (rule != nullptr && !Enforced(rule->anonymous)) return grpc::Status::OK;
  return Check(Identify(ctx), service, rpc, job);
}

grpc::Status Authorizer::Check(const Caller& caller, absl::string_view service,
                               absl::string_view rpc, absl::string_view job) const {
  const RpcRule* rule = RuleFor(service, rpc);
  if (rule == nullptr) {
    // Every RPC has a row (auth_test checks the services' descriptors); an
    // RPC without one is refused rather than left open.
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(service_, " has no access rule for ", service, ".", rpc));
  }
  if (!Enforced(rule->anonymous)) return grpc::Status::OK;
  const Grant* out_of_scope = nullptr;
  for (const Grant& g : caller.grants) {
    if (g.role == Role::kAdmin) return grpc::Status::OK;
    bool allowed = false;
    for (Role r : rule->roles) allowed = allowed || r == g.role;
    if (!allowed) continue;
    if (rule->job_scoped && g.role == Role::kWorker && !Covers(g, job)) {
      out_of_scope = &g;
      continue;
    }
    return grpc::Status::OK;
  }
  const std::string roles = RoleList(rule->roles);
  const std::string where = absl::StrCat(service_, " refuses ", rpc, job.empty() ? "" : " of job '",
                                         job, job.empty() ? "" : "'");
  if (caller.grants.empty()) {
    if (caller.bad_token) {
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("the token is not valid for ", service_, " (", rpc,
                       " needs the token of role ", roles,
                       "): it is none of the tokens in the service's --admin_token_file",
                       options_.worker_tokens.empty() ? "" : ", --worker_token_file",
                       options_.server_tokens.empty() ? "" : ", --server_token_file"));
    }
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(service_, " requires ", Article(roles), " credential for ", rpc,
                     ": pass --token_file or set TESSEL_TOKEN (metadata 'authorization: Bearer "
                     "<token>'), or present a client certificate with O=tessel:ROLE",
                     rule->anonymous == Anonymous::kIfReadsAllowed
                         ? " (the service refuses anonymous reads: --allow_anonymous_reads=false)"
                         : ""));
  }
  if (out_of_scope != nullptr) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(where, ": the worker credential", ScopeText(*out_of_scope), " (",
                     out_of_scope->source, ") may not act on job '", job,
                     "'; a worker credential covers only its own job (and the names derived from "
                     "it): use the credential of job '",
                     job, "'"));
  }
  const Grant& g = caller.grants.front();
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(where, ": the ", RoleName(g.role), " credential", ScopeText(g), " (", g.source,
                   ") may not ", rule->action, " (", Article(roles), " credential may",
                   rule->roles.empty()
                       ? ": tesselctl --token_file=ADMIN_TOKEN_FILE, or a client certificate with "
                         "O=tessel:admin"
                       : "",
                   ")"));
}

grpc::Status Authorizer::Deny(const Caller& caller, absl::string_view rpc, absl::string_view action,
                              absl::string_view how) const {
  const Grant* g = caller.grants.empty() ? nullptr : &caller.grants.front();
  for (const Grant& each : caller.grants) {
    if (each.role == Role::kWorker) g = &each;
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(service_, " refuses ", rpc, ": the ",
                                   g == nullptr ? std::string("anonymous caller")
                                                : absl::StrCat(RoleName(g->role), " credential",
                                                               ScopeText(*g), " (", g->source, ")"),
                                   " may not ", action, " (an admin credential may: ", how, ")"));
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

namespace {

// The non-blank, non-comment lines of a token file, split on whitespace.
absl::StatusOr<std::vector<std::vector<std::string>>> TokenLines(absl::string_view flag,
                                                                 const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " '", path, "': ", std::strerror(errno)));
  }
  std::vector<std::vector<std::string>> lines;
  std::string line;
  while (std::getline(in, line)) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    lines.push_back(absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty()));
  }
  if (lines.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' holds no token; write one, e.g. ",
                     "`head -c 24 /dev/urandom | base64 > ", path, "`"));
  }
  return lines;
}

absl::Status CheckTokenLength(absl::string_view flag, const std::string& path,
                              absl::string_view token) {
  if (token.size() >= 16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the token in ", flag, " '", path,
                                                 "' must be at least 16 characters, e.g. "
                                                 "`head -c 24 /dev/urandom | base64 > ",
                                                 path, "`"));
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path) {
  auto lines = TokenLines(flag, path);
  if (!lines.ok()) {
    if (absl::IsInvalidArgument(lines.status())) {
      return CheckTokenLength(flag, path, "");  // "must be at least 16 characters"
    }
    return lines.status();
  }
  const std::string& token = lines->front().front();
  if (absl::Status s = CheckTokenLength(flag, path, token); !s.ok()) return s;
  return token;
}

absl::StatusOr<std::vector<RoleToken>> ReadRoleTokenFile(absl::string_view flag,
                                                         const std::string& path, Role role) {
  auto lines = TokenLines(flag, path);
  if (!lines.ok()) return lines.status();
  std::vector<RoleToken> out;
  int n = 0;
  for (const std::vector<std::string>& fields : *lines) {
    ++n;
    RoleToken t;
    t.role = role;
    t.token = fields[0];
    if (absl::Status s = CheckTokenLength(flag, path, t.token); !s.ok()) return s;
    if (fields.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " '", path, "' token ", n, ": expected 'TOKEN' or 'TOKEN JOB[,JOB...]', got ",
          fields.size(), " fields"));
    }
    if (fields.size() == 2) {
      if (role != Role::kWorker) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " '", path, "' token ", n, ": only worker tokens have a job scope"));
      }
      t.jobs = absl::StrSplit(fields[1], ',', absl::SkipEmpty());
    }
    for (const RoleToken& seen : out) {
      if (seen.token == t.token) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, " '", path, "' lists one token twice (tokens ", n,
            " and an earlier one); give each scope its own token, or list the jobs on one line "
            "(TOKEN job1,job2)"));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

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
    auto token = ReadTokenFile("--admin_token_file", flags.admin_token_file);
    if (!token.ok()) return token.status();
    o.token = *token;
  }
  if (!flags.worker_token_file.empty()) {
    auto tokens = ReadRoleTokenFile("--worker_token_file", flags.worker_token_file, Role::kWorker);
    if (!tokens.ok()) return tokens.status();
    o.worker_tokens = *std::move(tokens);
  }
  if (!flags.server_token_file.empty()) {
    auto tokens = ReadRoleTokenFile("--server_token_file", flags.server_token_file, Role::kServer);
    if (!tokens.ok()) return tokens.status();
    o.server_tokens = *std::move(tokens);
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
    if (!s.ok()) return s;
  }
  return o;
}

}  // namespace tessel
