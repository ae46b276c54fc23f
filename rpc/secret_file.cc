#include "rpc/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

absl::Status CheckSecretFileMode(absl::string_view flag, const std::string& path, uid_t owner,
                                 mode_t mode, uid_t process_uid) {
  const bool owner_only = owner != 0 && owner == process_uid;
  const mode_t forbidden = owner_only ? 077 : 037;
  if ((mode & forbidden) == 0) return absl::OkStatus();
  const std::string who = owner == 0             ? "root"
                          : owner == process_uid ? "this process's user"
                                                 : "another user";
  return absl::PermissionDeniedError(absl::StrCat(
      flag, " '", path, "' has mode ", Octal(mode), " (owner uid ", owner, ", ", who,
      "): others may ", (mode & 0222 & forbidden) != 0 ? "change" : "read",
      " this secret; run `chmod 600 ", path,
      "` (a secret file must be 0600 or 0400; one owned by root or by another user than this "
      "process's may also be read by its group: 0640 or 0440)"));
}

absl::StatusOr<std::string> ReadSecretFile(absl::string_view flag, const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " '", path, "': ", std::strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::NotFoundError(
        absl::StrCat("cannot stat ", flag, " '", path, "': ", std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' is a folder; give the file that holds the secret"));
  }
  if (absl::Status mode = CheckSecretFileMode(flag, path, st.st_uid, st.st_mode, geteuid());
      !mode.ok()) {
    close(fd);
    return mode;
  }
  // Read to the end (pipes have no size), refusing more than the limit.
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::NotFoundError(
          absl::StrCat("cannot read ", flag, " '", path, "': ", std::strerror(err)));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(out.size()) + n > kMaxSecretFileBytes) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' is larger than ",
                                                     kMaxSecretFileBytes,
                                                     " bytes: not a token or key file"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace tessel
