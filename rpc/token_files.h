// Bearer tokens: the files services and clients keep them in, and their
// comparison in constant time. A token file holds one token per line,
// optionally followed by the jobs a worker token is scoped to
// ("TOKEN mlp,bert"); blank lines and '#' comments are skipped; every token
// is at least 16 characters. Errors name the flag the file came from and say
// how to write a good one. Pure functions (file reads only), any thread.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(std::string token, ReadTokenFile("--token_file", path));
//   TESSEL_ASSIGN_OR_RETURN(std::vector<RoleToken> workers,
//                           ReadRoleTokenFile("--worker_token_file", file, Role::kWorker));
#ifndef TESSEL_RPC_TOKEN_FILES_H_
#define TESSEL_RPC_TOKEN_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpc/role_table.h"

namespace tessel {

// A token and what it grants.
struct RoleToken {
  std::string token;
  Role role = Role::kWorker;
  std::vector<std::string> jobs;  // worker scope; empty = any job
};

// True when `given` equals `secret` (never for an empty secret). Its running
// time depends on the length of `given` only, not on where they differ.
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

// The token of a token file: the first field of its first line that is
// neither blank nor a '#' comment (so a line "TOKEN JOB" of a worker token
// file works too). `flag` names the flag in errors. Tokens shorter than 16
// characters are refused.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path);

// A role's token file: one token per line, optionally followed by the jobs
// it is scoped to ("TOKEN mlp,bert"; workers only); blank lines and '#'
// comments are skipped. At least one token; each at least 16 characters.
absl::StatusOr<std::vector<RoleToken>> ReadRoleTokenFile(absl::string_view flag,
                                                         const std::string& path, Role role);

}  // namespace tessel

#endif  // TESSEL_RPC_TOKEN_FILES_H_
