#include "server/straggler_watcher.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/log.h"
#include "runtime/metrics.h"
#include "server/flight_dump.h"

namespace tessel {
namespace {

metrics::Family& LatenessFamily() {
  return metrics::Default().AddGauge(
      "tessel_rank_lateness_seconds",
      "Median over the straggler window of how much later a rank's last push of a step reached "
      "this shard than the first rank's (docs/observability.md)",
      {"job", "rank", "shard"});
}

metrics::Family& ScoreFamily() {
  return metrics::Default().AddGauge(
      "tessel_rank_straggler_score",
      "A rank's median step time (previous step's end to its last push) over the median rank's: "
      "1.0 = the median's pace",
      {"job", "rank", "shard"});
}

std::string DumpDir(const std::string& dir) {
  if (!dir.empty()) return dir;
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// The registry rank of data-parallel rank r (worker_ids, empty: the same).
int RegistryRank(const JobStats& st, int r) {
  return static_cast<size_t>(r) < st.worker_ids.size() ? st.worker_ids[static_cast<size_t>(r)] : r;
}

}  // namespace

StragglerWatcher::StragglerWatcher(JobSource jobs, StragglerWatcherOptions options, WhoIs who,
                                   Reporter report)
    : jobs_(std::move(jobs)),
      options_(std::move(options)),
      who_(std::move(who)),
      report_(std::move(report)) {}

StragglerWatcher::~StragglerWatcher() {
  Stop();
  const std::string shard = absl::StrCat(options_.shard);
  auto mine = [&](const std::vector<std::string>& l) { return l[2] == shard; };
  LatenessFamily().RemoveIf(mine);
  ScoreFamily().RemoveIf(mine);
}

void StragglerWatcher::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void StragglerWatcher::Start() {
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.period)) Pass(absl::Now());
  });
}

void StragglerWatcher::Report(bool warning, const std::string& line) {
  if (report_) {
    report_(line);
  } else if (warning) {
    TESSEL_LOG(WARNING) << line;
  } else {
    TESSEL_LOG(INFO) << line;
  }
}

void StragglerWatcher::Pass(absl::Time now) {
  const std::string shard = absl::StrCat(options_.shard);
  std::set<std::string> live;
  for (const auto& job : jobs_()) {
    const std::string& name = job->spec().job();
    live.insert(name);
    const JobStats st = job->Stats(/*with_digest=*/false);
    const std::vector<RankScore> scores = ScoreRanks(st.flight, options_.rule);
    for (const RankScore& s : scores) {
      const std::vector<std::string> l = {name, absl::StrCat(s.rank), shard};
      LatenessFamily().GetGauge(l)->Set(s.lateness_s);
      ScoreFamily().GetGauge(l)->Set(s.score);
    }
    // Host aggregation: the recorder's slots are the host groups, which push
    // for their ranks (docs/hierarchical.md): named in the log as groups, not
    // sent to the registry (whose entries are ranks).
    const bool groups = !st.flight.empty() && st.flight.back().last_push_us.size() !=
                                                  static_cast<size_t>(job->spec().world_size());
    std::vector<StragglerSet::Change> changes;
    std::vector<StepArrivals> dump;
    {
      absl::MutexLock lock(&mu_);
      JobState& state = state_[name];
      state.groups = groups;
      changes = state.set.Update(scores, options_.rule);
      for (const StragglerSet::Change& c : changes) {
        if (c.started) {
          state.since[c.score.rank] = now;
          state.registry_rank[c.score.rank] = RegistryRank(st, c.score.rank);
        } else {
          state.since.erase(c.score.rank);
          state.registry_rank.erase(c.score.rank);
        }
      }
      // A step in progress for `stall`: write the window once per such step.
      if (options_.stall > absl::ZeroDuration() && !st.flight.empty() &&
          st.flight.back().end_us < 0) {
        const StepArrivals& cur = st.flight.back();
        int64_t begin = -1;
        for (int64_t f : cur.first_push_us) {
          if (f >= 0 && (begin < 0 || f < begin)) begin = f;
        }
        if (begin >= 0 && begin != state.dumped_start_us &&
            now - absl::FromUnixMicros(begin) >= options_.stall) {
          state.dumped_start_us = begin;
          dump = st.flight;
        }
      }
    }
    for (const StragglerSet::Change& c : changes) {
      const int reg = RegistryRank(st, c.score.rank);
      const std::string where = who_ && !groups ? who_(name, reg) : "";
      const std::string who = groups ? absl::StrCat("host group ", c.score.rank)
                                     : absl::StrCat("rank ", c.score.rank, " (registry rank ", reg,
                                                    where.empty() ? "" : "; ", where, ")");
      Report(c.started,
             absl::StrFormat("job '%s' shard %d: %s %s: score %.2f (1.0 = the median rank's "
                             "pace), its last push %.3f s after the first rank's (median of "
                             "%d steps)",
                             name, options_.shard, who,
                             c.started ? "is a straggler" : "is no longer a straggler",
                             c.score.score, c.score.lateness_s, c.score.steps));
    }
    if (!dump.empty()) {
      const std::string dir = DumpDir(options_.dump_dir);
      absl::StatusOr<std::string> path = WriteFlightTimeline(dir, name, options_.shard, dump, now);
      if (path.ok()) {
        {
          absl::MutexLock lock(&mu_);
          dumps_.push_back(*path);
        }
        Report(true, absl::StrCat("job '", name, "' shard ", options_.shard,
                                  ": a step in progress for ", absl::FormatDuration(options_.stall),
                                  " or more; the flight recorder's last ", dump.size(),
                                  " steps written to ", *path, " (open in ui.perfetto.dev)"));
      } else {
        Report(true, absl::StrCat("job '", name, "' shard ", options_.shard,
                                  ": cannot write the flight recorder: ", path.status().message()));
      }
    }
  }
  // Jobs gone: their state and series go.
  absl::MutexLock lock(&mu_);
  for (auto it = state_.begin(); it != state_.end();) {
    if (live.count(it->first) != 0) {
      ++it;
      continue;
    }
    auto gone = [&](const std::vector<std::string>& l) {
      return l[0] == it->first && l[2] == shard;
    };
    LatenessFamily().RemoveIf(gone);
    ScoreFamily().RemoveIf(gone);
    it = state_.erase(it);
  }
}

std::vector<NamedStraggler> StragglerWatcher::stragglers() {
  absl::MutexLock lock(&mu_);
  std::vector<NamedStraggler> out;
  for (const auto& [job, state] : state_) {
    if (state.groups) continue;
    for (const auto& [rank, s] : state.set.named()) {
      NamedStraggler n;
      n.job = job;
      n.rank = rank;
      auto reg = state.registry_rank.find(rank);
      n.registry_rank = reg != state.registry_rank.end() ? reg->second : rank;
      n.score = s.score;
      n.lateness_s = s.lateness_s;
      auto since = state.since.find(rank);
      n.since = since != state.since.end() ? since->second : absl::InfinitePast();
      out.push_back(std::move(n));
    }
  }
  return out;
}

std::vector<std::string> StragglerWatcher::dumps() {
  absl::MutexLock lock(&mu_);
  return dumps_;
}

}  // namespace tessel
