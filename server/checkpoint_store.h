// CheckpointStore: where checkpoint files live, behind a small interface so
// the same code and the same conformance suite serve the local filesystem now
// and an object store later.
//
// Contract:
//   - Paths are relative, '/'-separated, without '.', '..' or empty parts;
//     anything else is InvalidArgument.
//   - Put is atomic: a reader sees the old object or the complete new one,
//     never a part; after Put returns the object is durable.
//   - List returns the names directly under a directory, sorted; a missing
//     directory lists as empty.
// Thread-safe.
//
// Example:
//   LocalFsStore store("/var/lib/tessel/checkpoints");
//   store.Put("job/step-0000000010/shard-00000.bin", {bytes});
#ifndef TESSEL_SERVER_CHECKPOINT_STORE_H_
#define TESSEL_SERVER_CHECKPOINT_STORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tessel {

using Chunk = absl::Span<const uint8_t>;

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  virtual absl::Status Put(const std::string& path, const std::vector<Chunk>& chunks) = 0;
  virtual absl::StatusOr<std::string> Get(const std::string& path) = 0;
  virtual absl::Status ReadRange(const std::string& path, int64_t offset, int64_t size,
                                 void* dst) = 0;
  virtual absl::StatusOr<int64_t> Size(const std::string& path) = 0;
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  virtual absl::Status RemoveAll(const std::string& dir) = 0;
  virtual std::string Describe(const std::string& path) const = 0;  // for messages
};

absl::Status ValidateStorePath(const std::string& path);

// Files under a root directory: temporary name, fsync, rename, fsync of the
// directory. Files are written 0600 and the directories Put creates 0700
// (owner only, whatever the umask); the root itself keeps the mode it has. `write_delay` (testing
// only) pauses after each MiB written, so a test can kill the writer in the middle of a file.
class LocalFsStore : public CheckpointStore {
 public:
  explicit LocalFsStore(std::string root, absl::Duration write_delay = absl::ZeroDuration())
      : root_(std::move(root)), write_delay_(write_delay) {}
  absl::Status Put(const std::string& path, const std::vector<Chunk>& chunks) override;
  absl::StatusOr<std::string> Get(const std::string& path) override;
  absl::Status ReadRange(const std::string& path, int64_t offset, int64_t size, void* dst) override;
  absl::StatusOr<int64_t> Size(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;
  absl::Status RemoveAll(const std::string& dir) override;
  std::string Describe(const std::string& path) const override { return root_ + "/" + path; }

 private:
  const std::string root_;
  const absl::Duration write_delay_;
};

// In memory, for unit tests.
class MemoryStore : public CheckpointStore {
 public:
  absl::Status Put(const std::string& path, const std::vector<Chunk>& chunks) override;
  absl::StatusOr<std::string> Get(const std::string& path) override;
  absl::Status ReadRange(const std::string& path, int64_t offset, int64_t size, void* dst) override;
  absl::StatusOr<int64_t> Size(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;
  absl::Status RemoveAll(const std::string& dir) override;
  std::string Describe(const std::string& path) const override { return "mem:" + path; }
  // Testing: mutable access to an object's bytes.
  std::string* Mutable(const std::string& path);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> objects_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_CHECKPOINT_STORE_H_
