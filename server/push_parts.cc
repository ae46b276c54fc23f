#include "server/push_parts.h"

#include "absl/strings/str_cat.h"

namespace tessel {

absl::Status PushParts::Take(int bucket, int rank, uint32_t index, int64_t step) {
  if (taken_.emplace(bucket, rank, index).second) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " already pushed part ", index,
                                               " of bucket ", bucket, " in step ", step,
                                               " (a replayed part)"));
}

void PushParts::Failed(int bucket, int rank, uint32_t index) {
  taken_.erase({bucket, rank, index});
}

}  // namespace tessel
