#include "transport/ucx/internal/wedge_judge.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"

namespace tessel {
namespace ucx_internal {

void WedgeJudge::SetProbePath(std::vector<std::string> am_transports) {
  probe_am_ = std::move(am_transports);
  probe_on_shm_ = false;
  for (const std::string& tl : probe_am_) {
    if (tl == "posix" || tl == "sysv" || tl == "xpmem") probe_on_shm_ = true;
  }
}

bool WedgeJudge::OnProbePath(const std::vector<std::string>& am_transports) const {
  for (const std::string& tl : am_transports) {
    if (std::find(probe_am_.begin(), probe_am_.end(), tl) != probe_am_.end()) return true;
  }
  return false;
}

void WedgeJudge::Pass(bool did_work) {
  // Over tcp a large payload moves for a long while before it is delivered;
  // the worker doing work is the queue moving (a FIFO can only wedge on
  // shared memory, where deliveries alone are judged).
  if (did_work && !probe_on_shm_) work_.fetch_add(1, std::memory_order_relaxed);
  passes_.fetch_add(1, std::memory_order_relaxed);
}

absl::Status WedgeJudge::Judge(const absl::Status& probe, bool sent, uint64_t movement_before,
                               absl::Duration timeout) {
  // A wedged FIFO delivers nothing from anyone on the probe's path; a busy
  // one keeps moving.
  const uint64_t moved = Movement() - movement_before;
  const bool had_chances = HadChances(sent);
  if (!probe.ok() && had_chances && moved == 0) return probe;
  ++(had_chances ? late_moving_ : late_starved_);
  TESSEL_LOG_EVERY_N_SEC(INFO, 10)
      << "ucx: the receive-queue probe took over " << absl::FormatDuration(timeout)
      << (probe.ok()    ? ", then arrived"
          : had_chances ? absl::StrCat(", but the queue moved meanwhile (", moved,
                                       " deliveries or progress rounds the probe's way)")
                        : ", but the busy progress thread had not had its chances")
      << ": load, not a wedge";
  return absl::OkStatus();
}

}  // namespace ucx_internal
}  // namespace tessel
