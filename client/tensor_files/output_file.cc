#include "client/tensor_files/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel::tensor_files {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status Errno(int err, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(err,
                             absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err)));
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "open", path);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return Errno(err, "fsync", path);
  return absl::OkStatus();
}

// Moves `tmp` to `path`; without `overwrite` never replaces an existing
// `path` (link fails with EEXIST). File systems without hard links fall back
// to a check and a rename.
absl::Status Move(const std::string& tmp, const std::string& path, bool overwrite) {
  if (!overwrite) {
    if (link(tmp.c_str(), path.c_str()) == 0) {
      unlink(tmp.c_str());
      return absl::OkStatus();
    }
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(path,
                       " appeared while it was written; nothing replaced (--force "
                       "overwrites)"));
    }
    if (err != EPERM && err != ENOTSUP && err != EOPNOTSUPP && err != EXDEV) {
      return Errno(err, "move the finished file to", path);
    }
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
      return absl::AlreadyExistsError(absl::StrCat(path, " exists (--force overwrites)"));
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return Errno(errno, "rename the finished file to", path);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckOutputPath(const std::string& path, bool overwrite) {
  if (path.empty()) return absl::InvalidArgumentError("no output file given");
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is a folder; give a file name"));
    }
    if (!overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, " exists; nothing written (--force overwrites it)"));
    }
  }
  const std::string folder = FolderOf(path);
  if (stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the folder ", folder, " of ", path, " does not exist"));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, bool overwrite,
                                 const std::function<absl::Status(std::ostream*)>& write) {
  TESSEL_RETURN_IF_ERROR(CheckOutputPath(path, overwrite));
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL),
                      kOutputFileMode);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(tmp, " exists: another write of ", path,
                       " is under way, or one was killed; remove it (or pass --force)"));
    }
    return Errno(err, "create", tmp);
  }
  // A temporary file left by a killed writer (overwrite) keeps its own mode.
  if (fchmod(fd, kOutputFileMode) != 0) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return Errno(err, "chmod", tmp);
  }
  close(fd);
  absl::Status status;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.is_open()) {
      status = Errno(errno, "open", tmp);
    } else {
      status = write(&out);
      if (status.ok()) {
        out.close();
        if (out.fail()) status = absl::DataLossError(absl::StrCat("cannot write ", tmp));
      }
    }
  }
  if (status.ok()) status = FsyncPath(tmp, O_RDONLY);
  if (status.ok()) status = Move(tmp, path, overwrite);
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  return FsyncPath(FolderOf(path), O_RDONLY | O_DIRECTORY);
}

}  // namespace tessel::tensor_files
