#include "core/job_name.h"

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tessel {
namespace {

constexpr absl::string_view kGroup = ".g";
constexpr absl::string_view kStage = ".p";
constexpr absl::string_view kTensorShard = ".t";
constexpr absl::string_view kMesh = ".mesh";
constexpr absl::string_view kBuffers = ".buffers";
constexpr absl::string_view kHelper = "~sync";
constexpr absl::string_view kEpoch = ".e";

constexpr absl::string_view kGrammar =
    "expected [.g<N>] [.p<P>.t<T> | .mesh] [~sync<N>.e<E>], or .buffers [~sync<N>.e<E>], after "
    "the job name";

// Consumes a decimal number from the front of `s`: no sign, no leading zero
// unless it is 0, at most `max` (what the builders can write).
bool ConsumeNumber(absl::string_view* s, int64_t* out,
                   int64_t max = std::numeric_limits<int64_t>::max()) {
  size_t n = 0;
  while (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9') ++n;
  if (n == 0 || (n > 1 && (*s)[0] == '0')) return false;
  // SimpleAtoi refuses what overflows an int64.
  if (!absl::SimpleAtoi(s->substr(0, n), out) || *out > max) return false;
  s->remove_prefix(n);
  return true;
}

bool ConsumeNumbered(absl::string_view* s, absl::string_view tag, int64_t* out,
                     int64_t max = std::numeric_limits<int64_t>::max()) {
  absl::string_view rest = *s;
  if (!absl::ConsumePrefix(&rest, tag) || !ConsumeNumber(&rest, out, max)) return false;
  *s = rest;
  return true;
}

}  // namespace

std::string GroupJobName(absl::string_view job, int group) {
  if (group == 0) return std::string(job);
  return absl::StrCat(job, kGroup, group);
}

std::string PartitionJobName(absl::string_view job, int stage, int tensor_shard) {
  return absl::StrCat(job, kStage, stage, kTensorShard, tensor_shard);
}

std::string MeshGroupName(absl::string_view job) { return absl::StrCat(job, kMesh); }

std::string BuffersJobName(absl::string_view job) { return absl::StrCat(job, kBuffers); }

std::string HelperJobName(absl::string_view job, int64_t elements, int64_t epoch) {
  return absl::StrCat(job, kHelper, elements, kEpoch, epoch);
}

absl::StatusOr<DerivedSuffix> ParseDerivedSuffix(absl::string_view suffix) {
  const absl::string_view whole = suffix;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("job name suffix '", whole, "': ", why, "; ", kGrammar));
  };
  DerivedSuffix out;
  int64_t n = 0;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (absl::ConsumePrefix(&suffix, kBuffers)) {
    out.buffers = true;
  } else if (ConsumeNumbered(&suffix, kGroup, &n, kIntMax)) {
    if (n == 0) return bad("group 0 is the job itself, never '.g0'");
    out.group = static_cast<int>(n);
  }
  int64_t stage = 0;
  int64_t tensor_shard = 0;
  if (out.buffers) {
    // J.buffers takes nothing but a helper.
  } else if (absl::ConsumePrefix(&suffix, kMesh)) {
    out.mesh = true;
  } else if (ConsumeNumbered(&suffix, kStage, &stage, kIntMax)) {
    if (!ConsumeNumbered(&suffix, kTensorShard, &tensor_shard, kIntMax)) {
      return bad("a partition '.p<P>' needs its tensor shard '.t<T>'");
    }
    out.partition =
        DerivedSuffix::Partition{static_cast<int>(stage), static_cast<int>(tensor_shard)};
  }
  if (absl::ConsumePrefix(&suffix, kHelper)) {
    if (out.mesh) return bad("a mesh group has no helper jobs");
    DerivedSuffix::Helper h;
    if (!ConsumeNumber(&suffix, &h.elements) || !ConsumeNumbered(&suffix, kEpoch, &h.epoch)) {
      return bad("a helper job is '~sync<N>.e<E>'");
    }
    out.helper = h;
  }
  if (!suffix.empty()) return bad(absl::StrCat("'", suffix, "' is not part of it"));
  return out;
}

bool JobInScope(absl::string_view scope, absl::string_view job) {
  if (scope.empty() || !absl::ConsumePrefix(&job, scope)) return false;
  return ParseDerivedSuffix(job).ok();
}

bool IsHelperJob(absl::string_view job) {
  const size_t at = job.rfind(kHelper);
  if (at == absl::string_view::npos || at == 0) return false;
  absl::StatusOr<DerivedSuffix> parsed = ParseDerivedSuffix(job.substr(at));
  return parsed.ok() && parsed->helper.has_value();
}

bool IsMeshGroup(absl::string_view name) {
  return name.size() > kMesh.size() && absl::EndsWith(name, kMesh);
}

}  // namespace tessel
