// StragglerBoard: the ranks the shard servers name stragglers now
// (server/straggler_watcher.h), as their heartbeats carry them
// (HeartbeatRequest.stragglers), for /status.json, the status page and the
// job's workers (HeartbeatResponse.stragglers: rank 0 logs them).
//
// Contract:
//   ServerJoined(lease)      a shard server joined with this lease: only such
//                            leases may report.
//   Report(lease, list)      the server's whole list now (empty: none); a
//                            list from a lease that is not a server's is
//                            ignored (false). At most kMaxPerServer entries
//                            are kept; an entry with an empty or overlong
//                            job, a negative rank or a score or lateness that
//                            is not a finite number >= 0 is dropped. Returns
//                            whether every entry was kept.
//   ForJob(job)              the job's stragglers, one per rank (the highest
//                            score any server gives it), rank order.
//   All()                    every job's, by job then rank.
//   Retain(live)             forgets leases not in `live` (lapsed).
// In memory, this registry process only (like the loss curve).
//
// Threads: thread-safe (own mutex).
//
// Example:
//   board.ServerJoined(lease);
//   board.Report(lease, {req.stragglers().begin(), req.stragglers().end()});
//   for (const v1::Straggler& s : board.ForJob("mlp")) ...
#ifndef TESSEL_REGISTRY_STRAGGLER_BOARD_H_
#define TESSEL_REGISTRY_STRAGGLER_BOARD_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/registry.pb.h"

namespace tessel {

class StragglerBoard {
 public:
  static constexpr size_t kMaxPerServer = 256;
  static constexpr size_t kMaxJobNameBytes = 256;

  void ServerJoined(int64_t lease);
  bool Report(int64_t lease, const std::vector<v1::Straggler>& list);
  std::vector<v1::Straggler> ForJob(const std::string& job);
  std::vector<v1::Straggler> All();
  void Retain(const std::set<int64_t>& live);
  void Forget(int64_t lease);

 private:
  std::vector<v1::Straggler> Merged(const std::string* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::set<int64_t> servers_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::vector<v1::Straggler>> by_server_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_STRAGGLER_BOARD_H_
