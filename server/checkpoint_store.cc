#include "server/checkpoint_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace tessel {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  const std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  if (e == ENOSPC) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

// Checkpoints hold a job's parameters and optimizer state: private to the
// server's user, whatever the umask (which only ever removes bits).
constexpr mode_t kDirMode = 0700;
constexpr mode_t kFileMode = 0600;

absl::Status MkdirAll(const std::string& dir) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) {
    cur = cur.empty() && dir[0] == '/' ? absl::StrCat("/", part)
                                       : absl::StrCat(cur, cur.empty() ? "" : "/", part);
    if (mkdir(cur.c_str(), kDirMode) != 0 && errno != EEXIST) return Errno("cannot create", cur);
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  int r = fsync(fd);
  close(fd);
  if (r != 0) return Errno("cannot fsync", path);
  return absl::OkStatus();
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

absl::Status ValidateStorePath(const std::string& path) {
  if (path.empty() || path[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat("store path '", path, "' must be relative"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("store path '", path, "' has an empty, '.' or '..' part"));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalFsStore::Put(const std::string& path, const std::vector<Chunk>& chunks) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  const std::string full = Describe(path);
  const std::string dir = Parent(full);
  TESSEL_RETURN_IF_ERROR(MkdirAll(dir));
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(full, ".tmp-", getpid(), "-", counter++);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kFileMode);
  if (fd < 0) return Errno("cannot create", tmp);
  if (fchmod(fd, kFileMode) != 0) {  // a leftover temporary keeps its own mode
    absl::Status err = Errno("cannot chmod", tmp);
    close(fd);
    unlink(tmp.c_str());
    return err;
  }
  int64_t since_pause = 0;
  for (const Chunk& c : chunks) {
    size_t done = 0;
    while (done < c.size()) {
      const size_t n = std::min<size_t>(c.size() - done, 1 << 20);
      ssize_t w = write(fd, c.data() + done, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        absl::Status err = Errno("cannot write", tmp);
        close(fd);
        unlink(tmp.c_str());
        return err;
      }
      done += static_cast<size_t>(w);
      since_pause += w;
      if (write_delay_ > absl::ZeroDuration() && since_pause >= (1 << 20)) {
        absl::SleepFor(write_delay_);
        since_pause = 0;
      }
    }
  }
  if (fsync(fd) != 0) {
    absl::Status err = Errno("cannot fsync", tmp);
    close(fd);
    unlink(tmp.c_str());
    return err;
  }
  close(fd);
  if (rename(tmp.c_str(), full.c_str()) != 0) {
    absl::Status err = Errno("cannot rename into place", full);
    unlink(tmp.c_str());
    return err;
  }
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

absl::StatusOr<std::string> LocalFsStore::Get(const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(auto size, Size(path));
  std::string out(static_cast<size_t>(size), '\0');
  TESSEL_RETURN_IF_ERROR(ReadRange(path, 0, size, out.data()));
  return out;
}

absl::Status LocalFsStore::ReadRange(const std::string& path, int64_t offset, int64_t size,
                                     void* dst) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  const std::string full = Describe(path);
  int fd = open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", full);
  int64_t done = 0;
  while (done < size) {
    ssize_t r =
        pread(fd, static_cast<char*>(dst) + done, static_cast<size_t>(size - done), offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      close(fd);
      if (r == 0) {
        return absl::DataLossError(absl::StrCat(full, " is shorter than expected (", offset + done,
                                                " bytes; wanted ", offset + size, ")"));
      }
      return Errno("cannot read", full);
    }
    done += r;
  }
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalFsStore::Size(const std::string& path) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  struct stat st;
  const std::string full = Describe(path);
  if (stat(full.c_str(), &st) != 0) return Errno("cannot stat", full);
  return static_cast<int64_t>(st.st_size);
}

absl::StatusOr<std::vector<std::string>> LocalFsStore::List(const std::string& dir) {
  if (!dir.empty()) {
    TESSEL_RETURN_IF_ERROR(ValidateStorePath(dir));
  }
  const std::string full = dir.empty() ? root_ : Describe(dir);
  std::vector<std::string> names;
  DIR* d = opendir(full.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return names;
    return Errno("cannot list", full);
  }
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status LocalFsStore::RemoveAll(const std::string& dir) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(dir));
  TESSEL_ASSIGN_OR_RETURN(auto names, List(dir));
  const std::string full = Describe(dir);
  for (const std::string& n : names) {
    const std::string child = full + "/" + n;
    struct stat st;
    if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      TESSEL_RETURN_IF_ERROR(RemoveAll(dir + "/" + n));
    } else if (unlink(child.c_str()) != 0 && errno != ENOENT) {
      return Errno("cannot remove", child);
    }
  }
  if (rmdir(full.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", full);
  return absl::OkStatus();
}

absl::Status MemoryStore::Put(const std::string& path, const std::vector<Chunk>& chunks) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  std::string data;
  for (const Chunk& c : chunks) data.append(reinterpret_cast<const char*>(c.data()), c.size());
  absl::MutexLock lock(&mu_);
  objects_[path] = std::move(data);
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(const std::string& path) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return absl::NotFoundError(absl::StrCat("no object ", path));
  return it->second;
}

absl::Status MemoryStore::ReadRange(const std::string& path, int64_t offset, int64_t size,
                                    void* dst) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return absl::NotFoundError(absl::StrCat("no object ", path));
  if (offset < 0 || offset + size > static_cast<int64_t>(it->second.size())) {
    return absl::DataLossError(absl::StrCat(path, " is shorter than expected"));
  }
  std::memcpy(dst, it->second.data() + offset, static_cast<size_t>(size));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MemoryStore::Size(const std::string& path) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(path));
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return absl::NotFoundError(absl::StrCat("no object ", path));
  return static_cast<int64_t>(it->second.size());
}

absl::StatusOr<std::vector<std::string>> MemoryStore::List(const std::string& dir) {
  if (!dir.empty()) {
    TESSEL_RETURN_IF_ERROR(ValidateStorePath(dir));
  }
  const std::string prefix = dir.empty() ? "" : dir + "/";
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    std::string rest = it->first.substr(prefix.size());
    std::string name = rest.substr(0, rest.find('/'));
    if (names.empty() || names.back() != name) names.push_back(name);
  }
  return names;
}

absl::Status MemoryStore::RemoveAll(const std::string& dir) {
  TESSEL_RETURN_IF_ERROR(ValidateStorePath(dir));
  absl::MutexLock lock(&mu_);
  const std::string prefix = dir + "/";
  for (auto it = objects_.lower_bound(prefix); it != objects_.end();) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    it = objects_.erase(it);
  }
  return absl::OkStatus();
}

std::string* MemoryStore::Mutable(const std::string& path) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(path);
  return it == objects_.end() ? nullptr : &it->second;
}

}  // namespace tessel
