// LaunchCredentials: the credentials a local launch makes for itself, so that
// a cluster started by tessel-launch, tessel-demo, tessel-replay or
// tessel-hybrid-train --local is authenticated without the user doing
// anything: an admin, a worker and a server token, each 32 random bytes, in
// files of mode 0600 under a directory of mode 0700 that only this user can
// read. The embedded registry and the shard servers require them (so the
// servers also authenticate every data-path frame), the processes the
// launcher starts present them, and an operator's tesselctl takes the admin
// token file (the launcher's log names it).
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(LaunchCredentials c, MakeLaunchCredentials(run_dir));
//   // registry: c.auth; a server: c.ServerFlags(); a worker: --token_file=c.worker_token_file
#ifndef TESSEL_TESTING_LAUNCH_CREDENTIALS_H_
#define TESSEL_TESTING_LAUNCH_CREDENTIALS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/auth_options.h"

namespace tessel {

struct LaunchCredentials {
  std::string dir;                // mode 0700
  std::string admin_token_file;   // dir/admin.token, mode 0600
  std::string worker_token_file;  // dir/worker.token: one worker token, any job
  std::string server_token_file;  // dir/server.token
  AuthOptions auth;               // what the embedded registry enforces

  // A shard server's credential flags: it enforces the admin and worker
  // tokens and presents the server token to the registry.
  std::vector<std::string> ServerFlags() const;
};

// Makes a new directory `run_dir`/credentials-XXXXXX (each launch its own,
// so a run directory used again gets new tokens) and its three token files.
absl::StatusOr<LaunchCredentials> MakeLaunchCredentials(const std::string& run_dir);

}  // namespace tessel

#endif  // TESSEL_TESTING_LAUNCH_CREDENTIALS_H_
