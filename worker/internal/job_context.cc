#include "worker/internal/job_context.h"

#include <cstdlib>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/wire.h"
#include "runtime/frame_auth.h"

namespace tessel::internal {
namespace {
constexpr char kRecoverableUrl[] = "type.tessel.dev/recoverable";

// One per process: its workers are one trust domain (they share memory).
const std::string& ProcessClaim() {
  static const std::string* const claim = new std::string(NewJobSecret());
  return *claim;
}
}  // namespace

JobContext::JobContext(const WorkerOptions& o)
    : options(o),
      rank(o.rank),
      world_size(o.world_size),
      id(o.rank),
      resume(o.resume),
      job_id(JobId(o.job)),
      token(o.token),
      frame_key_claim(ProcessClaim()) {
  if (token.empty()) {
    if (const char* env = std::getenv("TESSEL_TOKEN")) token = env;
  }
}

std::string JobContext::Where() const {
  const int r = rank.load();
  return absl::StrCat("job '", options.job, "' rank ", r,
                      id == r ? std::string() : absl::StrCat(" (registry rank ", id, ")"), " step ",
                      step);
}

std::string JobContext::WhereAnyThread() const {
  const int r = rank.load();
  return absl::StrCat("job '", options.job, "' rank ", r,
                      id == r ? std::string() : absl::StrCat(" (registry rank ", id, ")"));
}

absl::Status JobContext::Recoverable(absl::Status s) const {
  if (!options.recovery || s.ok()) return s;
  const absl::StatusCode c = s.code();
  if (c == absl::StatusCode::kFailedPrecondition || c == absl::StatusCode::kNotFound ||
      c == absl::StatusCode::kAborted || c == absl::StatusCode::kUnavailable ||
      c == absl::StatusCode::kCancelled) {
    return MarkRecoverable(std::move(s));
  }
  return s;
}

absl::Status MarkRecoverable(absl::Status status) {
  if (!status.ok()) status.SetPayload(kRecoverableUrl, absl::Cord("1"));
  return status;
}

bool IsRecoverable(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kRecoverableUrl).has_value();
}

absl::Status Untagged(const absl::Status& s) { return absl::Status(s.code(), s.message()); }

}  // namespace tessel::internal
