#include "client/rank_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/context.h"
#include "client/output.h"
#include "core/straggler.h"

namespace tessel::ctl {
namespace {

using nlohmann::json;

// Per shard, rank `r`'s finished steps per second between its last pushes
// (nullopt under two such steps); `count` gets how many steps it saw.
std::optional<double> StepRate(const v1::ShardStats& st, int r, int* count) {
  int n = 0;
  int64_t first = -1, last = -1;
  for (const v1::StepArrivals& s : st.flight()) {
    if (s.end_us() < 0 || r >= s.last_push_us_size() || s.last_push_us(r) < 0) continue;
    if (first < 0) first = s.last_push_us(r);
    last = s.last_push_us(r);
    ++n;
  }
  *count = n;
  if (n < 2 || last <= first) return std::nullopt;
  return (n - 1) / ((last - first) / 1e6);
}

// The newest finished step's lateness of rank `r` at one shard (its last
// push minus the earliest last push), if every rank pushed in it.
std::optional<double> NewestLateness(const v1::ShardStats& st, int r) {
  for (int i = st.flight_size() - 1; i >= 0; --i) {
    const v1::StepArrivals& s = st.flight(i);
    if (s.end_us() < 0) continue;
    if (r >= s.last_push_us_size()) return std::nullopt;
    int64_t first = -1;
    for (int64_t t : s.last_push_us()) {
      if (t < 0) return std::nullopt;
      if (first < 0 || t < first) first = t;
    }
    return (s.last_push_us(r) - first) / 1e6;
  }
  return std::nullopt;
}

void TakeMax(std::optional<double>* into, std::optional<double> v) {
  if (v && (!*into || *v > **into)) *into = v;
}

std::string Or(const std::optional<double>& v, const char* format) {
  return v ? absl::StrFormat(format, *v) : "-";
}

}  // namespace

std::string DominantPhase(const v1::StepPhases& p) {
  const std::pair<int64_t, const char*> phases[] = {{p.compute_ns(), "computing"},
                                                    {p.push_ns(), "pushing"},
                                                    {p.wait_ns(), "waiting"},
                                                    {p.pull_ns(), "pulling"}};
  int64_t best = 0;
  const char* name = "";
  for (const auto& [ns, n] : phases) {
    if (ns > best) best = ns, name = n;
  }
  return name;
}

int RegistryRankOf(const v1::ShardStats& st, int rank) {
  return rank < st.worker_ids_size() ? st.worker_ids(rank) : rank;
}

const v1::Member* FindWorker(const v1::View& view, int registry_rank) {
  for (const v1::Member& m : view.members()) {
    if (m.role() == v1::ROLE_WORKER && m.rank() == registry_rank) return &m;
  }
  return nullptr;
}

TopSnapshot CombineRanks(const std::string& job, const std::vector<v1::ShardStats>& stats,
                         const v1::View& view, int64_t now_us) {
  TopSnapshot top;
  top.job = job;
  top.now_us = now_us;
  top.shards_reachable = static_cast<int>(stats.size());
  int64_t lo = -1;
  for (const v1::ShardStats& st : stats) {
    top.world = std::max(top.world, st.world_size());
    if (HoldsNoElements(st)) continue;
    lo = lo < 0 ? st.step() : std::min(lo, st.step());
  }
  top.step = std::max<int64_t>(lo, 0);
  int workers = 0;
  for (const v1::Member& m : view.members()) workers += m.role() == v1::ROLE_WORKER;
  if (top.world == 0) top.world = workers;  // no shard answered
  const StragglerRule rule;
  for (int r = 0; r < top.world; ++r) {
    RankRow row;
    row.rank = r;
    row.registry_rank = stats.empty() ? r : RegistryRankOf(stats.front(), r);
    if (const v1::Member* m = FindWorker(view, row.registry_rank)) {
      row.member = true;
      row.host = m->host();
      row.pid = m->pid();
      row.pod = m->pod();
      row.last_heartbeat_unix_ms = m->liveness().last_heartbeat_unix_ms();
      if (m->liveness().has_phases()) {
        row.phases = m->liveness().phases();
        row.reported_step = row.phases.step();
        row.phase = DominantPhase(row.phases);
      }
    }
    int most = 0;
    for (const v1::ShardStats& st : stats) {
      // Host aggregation: the servers' slots are groups, not ranks.
      if (st.rank_pushed_bytes_size() != st.world_size()) continue;
      row.pushed_bytes = row.pushed_bytes.value_or(0) + st.rank_pushed_bytes(r);
      row.pulled_bytes = row.pulled_bytes.value_or(0) + st.rank_pulled_bytes(r);
      bool scored = false;
      for (const v1::RankScore& s : st.rank_scores()) {
        if (s.rank() != r) continue;
        scored = true;
        TakeMax(&row.score, s.score());
        TakeMax(&row.lateness_s, s.lateness_seconds());
      }
      if (!scored) TakeMax(&row.lateness_s, NewestLateness(st, r));
      for (int i = st.flight_size() - 1; i >= 0; --i) {
        const v1::StepArrivals& s = st.flight(i);
        if (r >= s.last_push_us_size() || s.last_push_us(r) < 0) continue;
        row.step = std::max(row.step, s.end_us() < 0 ? st.step() : s.step());
        break;
      }
      int count = 0;
      const std::optional<double> rate = StepRate(st, r, &count);
      if (rate && count > most) most = count, row.steps_per_s = rate;
    }
    row.straggler = row.score && row.lateness_s && *row.score >= rule.enter_score &&
                    *row.lateness_s * 1e6 >= static_cast<double>(rule.min_lateness_us);
    top.ranks.push_back(std::move(row));
  }
  return top;
}

json TopJson(const TopSnapshot& top) {
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  json ranks = json::array();
  for (const RankRow& r : top.ranks) {
    json phases = nullptr;
    if (r.reported_step >= 0) {
      phases = {{"compute_s", r.phases.compute_ns() / 1e9},
                {"push_s", r.phases.push_ns() / 1e9},
                {"wait_s", r.phases.wait_ns() / 1e9},
                {"pull_s", r.phases.pull_ns() / 1e9}};
    }
    ranks.push_back(
        {{"rank", r.rank},
         {"registry_rank", r.registry_rank},
         {"member", r.member},
         {"host", r.member ? json(r.host) : json(nullptr)},
         {"pid", r.member ? json(r.pid) : json(nullptr)},
         {"pod", r.pod.empty() ? json(nullptr) : json(r.pod)},
         {"step", r.step >= 0 ? json(r.step) : json(nullptr)},
         {"reported_step", r.reported_step >= 0 ? json(r.reported_step) : json(nullptr)},
         {"steps_per_s", opt(r.steps_per_s)},
         {"lateness_s", opt(r.lateness_s)},
         {"score", opt(r.score)},
         {"straggler", r.straggler},
         {"phase", r.phase.empty() ? json(nullptr) : json(r.phase)},
         {"phases", phases},
         {"pushed_bytes", opt(r.pushed_bytes)},
         {"pulled_bytes", opt(r.pulled_bytes)},
         {"heartbeat_age_s", r.last_heartbeat_unix_ms > 0
                                 ? json((top.now_us / 1000 - r.last_heartbeat_unix_ms) / 1e3)
                                 : json(nullptr)}});
  }
  return {{"job", top.job},
          {"step", top.step},
          {"world_size", top.world},
          {"shards_reachable", top.shards_reachable},
          {"now_unix_us", top.now_us},
          {"ranks", ranks}};
}

std::vector<std::string> TopHeader() {
  return {"RANK",     "HOST",  "PID",   "POD",    "STEP",   "STEPS/S",
          "LATENESS", "SCORE", "PHASE", "PUSHED", "PULLED", "HEARTBEAT"};
}

std::vector<std::vector<std::string>> TopTable(const TopSnapshot& top) {
  std::vector<std::vector<std::string>> rows;
  for (const RankRow& r : top.ranks) {
    const std::string rank = r.registry_rank == r.rank
                                 ? absl::StrCat(r.rank)
                                 : absl::StrCat(r.rank, " (", r.registry_rank, ")");
    const std::string lateness = r.lateness_s ? absl::StrFormat("%.3fs", *r.lateness_s) : "-";
    std::string score = Or(r.score, "%.2f");
    if (r.straggler) absl::StrAppend(&score, " SLOW");
    rows.push_back(
        {rank, r.member ? r.host : "(gone)", r.member ? absl::StrCat(r.pid) : "-",
         r.pod.empty() ? "-" : r.pod, r.step >= 0 ? absl::StrCat(r.step) : "-",
         Or(r.steps_per_s, "%.1f"), lateness, score, r.phase.empty() ? "-" : r.phase,
         r.pushed_bytes ? Bytes(*r.pushed_bytes) : "-",
         r.pulled_bytes ? Bytes(*r.pulled_bytes) : "-",
         r.last_heartbeat_unix_ms > 0
             ? absl::StrFormat("%.1fs ago", (top.now_us / 1000 - r.last_heartbeat_unix_ms) / 1e3)
             : "-"});
  }
  return rows;
}

}  // namespace tessel::ctl
