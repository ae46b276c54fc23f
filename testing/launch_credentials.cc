#include "testing/launch_credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {
namespace {

constexpr int kTokenBytes = 32;

absl::StatusOr<std::string> RandomToken() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string bytes(kTokenBytes, '\0');
  if (!urandom.read(bytes.data(), kTokenBytes)) {
    return absl::UnavailableError("cannot read /dev/urandom for a launch token");
  }
  return absl::WebSafeBase64Escape(bytes);
}

// Creates `path` with mode 0600 (O_EXCL: never over an existing file) and
// writes `text`.
absl::Status WritePrivateFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  const ssize_t n = write(fd, text.data(), text.size());
  const bool closed = close(fd) == 0;
  if (n != static_cast<ssize_t>(text.size()) || !closed) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> LaunchCredentials::ServerFlags() const {
  return {absl::StrCat("--admin_token_file=", admin_token_file),
          absl::StrCat("--worker_token_file=", worker_token_file),
          absl::StrCat("--token_file=", server_token_file)};
}

absl::StatusOr<LaunchCredentials> MakeLaunchCredentials(const std::string& run_dir) {
  LaunchCredentials c;
  // A new directory every launch (mkdtemp: mode 0700, never an existing
  // one), so a run directory used again gets fresh tokens.
  std::string dir = absl::StrCat(run_dir, "/credentials-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create a credentials directory under ", run_dir, ": ", std::strerror(errno)));
  }
  c.dir = dir;
  if (chmod(c.dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot chmod ", c.dir, ": ", std::strerror(errno)));
  }
  TESSEL_ASSIGN_OR_RETURN(std::string admin, RandomToken());
  TESSEL_ASSIGN_OR_RETURN(std::string worker, RandomToken());
  TESSEL_ASSIGN_OR_RETURN(std::string server, RandomToken());
  c.admin_token_file = c.dir + "/admin.token";
  c.worker_token_file = c.dir + "/worker.token";
  c.server_token_file = c.dir + "/server.token";
  TESSEL_RETURN_IF_ERROR(WritePrivateFile(c.admin_token_file, admin + "\n"));
  TESSEL_RETURN_IF_ERROR(WritePrivateFile(c.worker_token_file, worker + "\n"));
  TESSEL_RETURN_IF_ERROR(WritePrivateFile(c.server_token_file, server + "\n"));
  AuthFlags flags;
  flags.admin_token_file = c.admin_token_file;
  flags.worker_token_file = c.worker_token_file;
  flags.server_token_file = c.server_token_file;
  TESSEL_ASSIGN_OR_RETURN(c.auth, LoadAuthOptions(flags));
  return c;
}

}  // namespace tessel
