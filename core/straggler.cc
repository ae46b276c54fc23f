#include "core/straggler.h"

#include <algorithm>
#include <cstddef>

namespace tessel {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

// A step that finished, whose every rank pushed, and whose start (the
// previous step's end, `start_us`) is known.
bool Counted(const StepArrivals& s, int64_t start_us, size_t world) {
  if (s.end_us < 0 || start_us < 0 || s.last_push_us.size() != world) return false;
  for (int64_t t : s.last_push_us) {
    if (t < 0) return false;
  }
  return true;
}

}  // namespace

std::vector<RankScore> ScoreRanks(absl::Span<const StepArrivals> window,
                                  const StragglerRule& rule) {
  if (window.empty()) return {};
  const size_t world = window.back().last_push_us.size();
  if (world < 2) return {};
  std::vector<std::vector<double>> time(world), late(world);
  int counted = 0;
  // Newest first, so the window is the newest counted steps.
  for (size_t i = window.size(); i-- > 1 && counted < rule.window;) {
    const StepArrivals& s = window[i];
    const StepArrivals& prev = window[i - 1];
    if (prev.step + 1 != s.step || !Counted(s, prev.end_us, world)) continue;
    const int64_t first = *std::min_element(s.last_push_us.begin(), s.last_push_us.end());
    for (size_t r = 0; r < world; ++r) {
      time[r].push_back(static_cast<double>(std::max<int64_t>(0, s.last_push_us[r] - prev.end_us)));
      late[r].push_back(static_cast<double>(s.last_push_us[r] - first));
    }
    ++counted;
  }
  if (counted < rule.min_steps) return {};
  std::vector<RankScore> out(world);
  std::vector<double> medians(world);
  for (size_t r = 0; r < world; ++r) {
    out[r].rank = static_cast<int>(r);
    out[r].steps = counted;
    medians[r] = Median(time[r]);
    out[r].time_s = medians[r] / 1e6;
    out[r].lateness_s = Median(late[r]) / 1e6;
  }
  const double pace = Median(medians);
  for (size_t r = 0; r < world; ++r) {
    // A median rank that took no time at all (every push before the
    // previous step ended cannot happen; 1 us floor keeps it finite).
    out[r].score = medians[r] / std::max(pace, 1.0);
  }
  return out;
}

std::vector<StragglerSet::Change> StragglerSet::Update(absl::Span<const RankScore> scores,
                                                       const StragglerRule& rule) {
  std::vector<Change> changes;
  if (scores.empty()) return changes;
  const double min_late_s = static_cast<double>(rule.min_lateness_us) / 1e6;
  for (const RankScore& s : scores) {
    auto it = named_.find(s.rank);
    if (it == named_.end()) {
      if (s.score >= rule.enter_score && s.lateness_s >= min_late_s) {
        named_.emplace(s.rank, s);
        changes.push_back({true, s});
      }
    } else if (s.score < rule.leave_score) {
      named_.erase(it);
      changes.push_back({false, s});
    } else {
      it->second = s;
    }
  }
  // A rank the scores no longer hold (the job shrank) is no longer named.
  for (auto it = named_.begin(); it != named_.end();) {
    if (static_cast<size_t>(it->first) >= scores.size()) {
      changes.push_back({false, it->second});
      it = named_.erase(it);
    } else {
      ++it;
    }
  }
  return changes;
}

}  // namespace tessel
