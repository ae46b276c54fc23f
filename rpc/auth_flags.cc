#include "rpc/auth_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token (role admin: everything, e.g. tesselctl); with any "
          "credential configured every RPC needs a role, except the registry's member "
          "operations, which need one only once member credentials are configured "
          "(--worker_token_file, --server_token_file, --cert_roles; docs/operations.md, Roles "
          "and credentials)");
ABSL_FLAG(std::string, worker_token_file, "",
          "file of worker tokens (role worker: create, join, train and checkpoint its own job; "
          "not delete jobs or checkpoints, not restore an older checkpoint), one per line, each "
          "optionally scoped to jobs: 'TOKEN' or 'TOKEN job1,job2' (a scope covers the job and "
          "the names derived from it); on the registry, a Join of a worker then needs one "
          "covering its job, and GetView/Watch need a credential");
ABSL_FLAG(bool, allow_anonymous_reads, true,
          "with credentials configured: let read-only RPCs (stats, listings, checkpoint list, "
          "the registry's ListGroups) through without one (ReadState always needs one)");
ABSL_FLAG(bool, cert_roles, false,
          "enforce roles on the strength of client certificates alone (mutual TLS: subject "
          "O=tessel:admin|worker|server|reader, CN=worker:JOB), even without token files");

ABSL_FLAG(bool, insecure, false,
          "run with no credentials: every RPC open to anyone who can connect, data-path frames "
          "not authenticated. Without this flag a service with no token file, no --cert_roles "
          "and no TLS refuses to start (docs/security.md)");
ABSL_FLAG(bool, trust_any_certificate, false,
          "with mutual TLS and no credential table (no token file, no --cert_roles): let every "
          "certificate the CA issued do everything. Without this flag that configuration refuses "
          "to start");

namespace tessel {

AuthFlags AuthFlagsFromFlags() {
  AuthFlags f;
  f.admin_token_file = absl::GetFlag(FLAGS_admin_token_file);
  f.worker_token_file = absl::GetFlag(FLAGS_worker_token_file);
  f.allow_anonymous_reads = absl::GetFlag(FLAGS_allow_anonymous_reads);
  f.certificate_roles = absl::GetFlag(FLAGS_cert_roles);
  f.insecure = absl::GetFlag(FLAGS_insecure);
  f.trust_any_certificate = absl::GetFlag(FLAGS_trust_any_certificate);
  return f;
}

}  // namespace tessel
