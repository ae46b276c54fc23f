#include "runtime/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"

namespace tessel {
namespace {

nlohmann::ordered_json ArgsJson(const TimelineArgs& a) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!a.job.empty()) j["job"] = a.job;
  if (a.step >= 0) j["step"] = a.step;
  if (a.rank) j["rank"] = *a.rank;
  if (a.shard) j["shard"] = *a.shard;
  if (a.bucket) j["bucket"] = *a.bucket;
  return j;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& path,
                                                         const std::string& process,
                                                         TimelineOptions options) {
  // Never through a symbolic link (a server writes its flight recorder into
  // $TMPDIR on its own: a link planted there must not redirect the write).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  std::FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "w");
  if (f == nullptr) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("timeline ", path, ": cannot write: ", std::strerror(err),
                     err == ELOOP ? " (it is a symbolic link: give the file's own path)" : ""));
  }
  std::unique_ptr<Timeline> t(new Timeline(path, f, process, options));
  absl::MutexLock lock(&t->mu_);
  t->Write("[");
  nlohmann::ordered_json meta = {{"name", "process_name"},
                                 {"ph", "M"},
                                 {"pid", static_cast<int>(::getpid())},
                                 {"tid", 0},
                                 {"args", {{"name", process}}}};
  t->Write(meta.dump() + ",");
  // The host: files of one host share a clock (the merge tool keeps it).
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  nlohmann::ordered_json labels = {{"name", "process_labels"},
                                   {"ph", "M"},
                                   {"pid", static_cast<int>(::getpid())},
                                   {"tid", 0},
                                   {"args", {{"labels", absl::StrCat("host=", host)}}}};
  t->Write(labels.dump() + ",");
  return t;
}

Timeline::Timeline(std::string path, std::FILE* f, std::string process, TimelineOptions options)
    : path_(std::move(path)), process_(std::move(process)), options_(options), file_(f) {}

Timeline::~Timeline() {
  absl::MutexLock lock(&mu_);
  // A last event without a trailing comma closes the array.
  nlohmann::ordered_json end = {{"name", "end"},
                                {"ph", "i"},
                                {"s", "p"},
                                {"ts", NowUs()},
                                {"pid", static_cast<int>(::getpid())},
                                {"tid", 0}};
  Write(end.dump() + "]");
  std::fclose(file_);
}

int64_t Timeline::NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int Timeline::ThreadId(absl::string_view thread) {
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (threads_[i] == thread) return static_cast<int>(i) + 1;
  }
  threads_.emplace_back(thread);
  const int tid = static_cast<int>(threads_.size());
  nlohmann::ordered_json meta = {{"name", "thread_name"},
                                 {"ph", "M"},
                                 {"pid", static_cast<int>(::getpid())},
                                 {"tid", tid},
                                 {"args", {{"name", std::string(thread)}}}};
  Write(meta.dump() + ",");
  return tid;
}

void Timeline::Write(const std::string& line) {
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  if (++unflushed_ >= 256) {
    std::fflush(file_);
    unflushed_ = 0;
  }
}

void Timeline::Span(absl::string_view name, absl::string_view thread, int64_t start_us,
                    int64_t end_us, const TimelineArgs& args) {
  if (!Records(args.step)) return;
  absl::MutexLock lock(&mu_);
  nlohmann::ordered_json e = {{"name", std::string(name)},
                              {"ph", "X"},
                              {"ts", start_us},
                              {"dur", std::max<int64_t>(0, end_us - start_us)},
                              {"pid", static_cast<int>(::getpid())},
                              {"tid", ThreadId(thread)},
                              {"args", ArgsJson(args)}};
  Write(e.dump() + ",");
}

void Timeline::Instant(absl::string_view name, absl::string_view thread, int64_t ts_us,
                       const TimelineArgs& args) {
  if (!Records(args.step)) return;
  absl::MutexLock lock(&mu_);
  nlohmann::ordered_json e = {{"name", std::string(name)},
                              {"ph", "i"},
                              {"s", "t"},
                              {"ts", ts_us},
                              {"pid", static_cast<int>(::getpid())},
                              {"tid", ThreadId(thread)},
                              {"args", ArgsJson(args)}};
  Write(e.dump() + ",");
}

void Timeline::Flush() {
  absl::MutexLock lock(&mu_);
  std::fflush(file_);
  unflushed_ = 0;
}

std::string TimelinePath(const std::string& pattern, int rank, int shard) {
  return absl::StrReplaceAll(pattern,
                             {{"{rank}", absl::StrCat(rank)}, {"{shard}", absl::StrCat(shard)}});
}

}  // namespace tessel
