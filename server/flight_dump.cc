#include "server/flight_dump.h"

#include <cstdint>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/timeline.h"

namespace tessel {

absl::StatusOr<std::string> WriteFlightTimeline(const std::string& dir, const std::string& job,
                                                int shard, const std::vector<StepArrivals>& window,
                                                absl::Time now) {
  const std::string path = absl::StrCat(dir.empty() ? "." : dir, "/tessel-flight-", job, "-shard",
                                        shard, "-", absl::ToUnixMillis(now), ".json");
  TimelineOptions every;
  every.first_step = std::numeric_limits<int64_t>::min();
  every.steps = 0;
  absl::StatusOr<std::unique_ptr<Timeline>> t =
      Timeline::Open(path, absl::StrCat("server[", shard, "] flight recorder"), every);
  if (!t.ok()) return t.status();
  const int64_t now_us = absl::ToUnixMicros(now);
  for (size_t i = 0; i < window.size(); ++i) {
    const StepArrivals& s = window[i];
    // The step in progress has no number yet: the one after the last.
    const int64_t step = s.step >= 0 ? s.step : (i > 0 ? window[i - 1].step + 1 : -1);
    const int64_t start = i > 0 ? window[i - 1].end_us : -1;
    int64_t first_any = -1;
    for (int64_t f : s.first_push_us) {
      if (f >= 0 && (first_any < 0 || f < first_any)) first_any = f;
    }
    const int64_t begin = start >= 0 ? start : first_any;
    if (begin >= 0) {
      (*t)->Span(s.end_us >= 0 ? "step" : "step (in progress)", "steps", begin,
                 s.end_us >= 0 ? s.end_us : now_us, {job, step, std::nullopt, shard});
    }
    for (size_t r = 0; r < s.first_push_us.size(); ++r) {
      const std::string track = absl::StrCat("rank ", r);
      const TimelineArgs args{job, step, static_cast<int>(r), shard};
      const int64_t first = s.first_push_us[r];
      const int64_t last = s.last_push_us[r];
      // Its pull of the step's result: asked for, then served (the last
      // bucket sent); still waiting when the step is in progress.
      const int64_t asked = r < s.pull_asked_us.size() ? s.pull_asked_us[r] : -1;
      const int64_t served = r < s.pull_served_us.size() ? s.pull_served_us[r] : -1;
      if (asked >= 0) {
        if (served >= asked) {
          (*t)->Span("pull", track, asked, served > asked ? served : asked + 1, args);
        } else {
          (*t)->Span("pull (waiting)", track, asked, now_us > asked ? now_us : asked + 1, args);
        }
      }
      if (first < 0) {
        if (s.end_us < 0) (*t)->Instant("waiting", track, now_us, args);
        continue;
      }
      if (start >= 0 && first > start) (*t)->Span("pull+compute", track, start, first, args);
      (*t)->Span("push", track, first, last > first ? last : first + 1, args);
    }
  }
  (*t)->Flush();
  return path;
}

}  // namespace tessel
