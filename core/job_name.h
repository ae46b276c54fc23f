// The one grammar of the names Tessel derives from a user's job name J, built
// and parsed here and nowhere else:
//
//   name    := J [group] [place] [helper]
//   group   := ".g" N        parameter group N >= 1 of tessel.torch (group 0
//                            is J itself)
//   place   := ".p" P ".t" T a hybrid partition: pipeline stage P, tensor
//                            shard T
//            | ".mesh"       the registry group of a hybrid job's processes
//                            (a group, not a job: no helper follows it)
//            | ".buffers"    tessel.torch's job of a model's buffers (BatchNorm
//                            statistics), written by rank 0 at checkpoint steps
//                            (after J itself, no group before it)
//   helper  := "~sync" N ".e" E
//                            a reduce-only job the worker SDK makes for a
//                            vector of N floats at membership epoch E
//                            (SynchronizeGradients and the other reductions)
//
// N, P, T and E are decimal numbers without sign or leading zeros (0 itself
// allowed where 0 is valid), as large as the builders take: an int for the
// group, stage and tensor shard, an int64 for a helper's size and epoch. J is any valid job name
// (core/layout.h ValidateJobName); a derived name must also be one, which
// the builders do not check (CreateJob does, as for any job).
//
// Who uses it: the worker SDK builds helper, partition and mesh names;
// tesselctl checkpoint export finds a torch model's group jobs;
// tessel.torch builds group names (through the Python binding); rpc/auth
// decides whether a worker credential scoped to J covers a name
// (JobInScope), and the shard service whether a DeleteJob names a helper
// job (IsHelperJob).
//
// Example:
//   GroupJobName("mlp", 2)                       // "mlp.g2"
//   HelperJobName(PartitionJobName("mlp", 1, 0), 4096, 3)
//                                                // "mlp.p1.t0~sync4096.e3"
//   ParseDerivedSuffix(".g2~sync8.e1")           // group 2, helper {8, 1}
//   JobInScope("mlp", "mlp.g2~sync8.e1")         // true
#ifndef TESSEL_CORE_JOB_NAME_H_
#define TESSEL_CORE_JOB_NAME_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

// Builders. Each appends its part of the grammar to `job` as given.
std::string GroupJobName(absl::string_view job, int group);  // group 0: `job`
std::string PartitionJobName(absl::string_view job, int stage, int tensor_shard);
std::string MeshGroupName(absl::string_view job);
std::string HelperJobName(absl::string_view job, int64_t elements, int64_t epoch);
std::string BuffersJobName(absl::string_view job);

// What follows J in a derived name.
struct DerivedSuffix {
  int group = 0;  // 0: none (J itself)
  struct Partition {
    int stage = 0;
    int tensor_shard = 0;
  };
  std::optional<Partition> partition;
  bool mesh = false;
  bool buffers = false;  // ".buffers"
  struct Helper {
    int64_t elements = 0;
    int64_t epoch = 0;
  };
  std::optional<Helper> helper;
};

// Parses the part of a name after J ("" is J itself). InvalidArgument, naming
// the grammar, for anything else.
absl::StatusOr<DerivedSuffix> ParseDerivedSuffix(absl::string_view suffix);

// True if `job` is `scope` itself or a name derived from it by the grammar
// (false for an empty scope).
bool JobInScope(absl::string_view scope, absl::string_view job);

// True if `job` ends in a helper part after a non-empty name.
bool IsHelperJob(absl::string_view job);

// True if `name` is MeshGroupName of a non-empty job name.
bool IsMeshGroup(absl::string_view name);

}  // namespace tessel

#endif  // TESSEL_CORE_JOB_NAME_H_
