#include "client/why_verdict.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/rank_view.h"

namespace tessel::ctl {
namespace {

using nlohmann::json;

// "bucket 2", "buckets 0-3, 6" (ascending).
std::string Buckets(const std::vector<int>& b) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < b.size();) {
    size_t j = i;
    while (j + 1 < b.size() && b[j + 1] == b[j] + 1) ++j;
    runs.push_back(j == i ? absl::StrCat(b[i]) : absl::StrCat(b[i], "-", b[j]));
    i = j + 1;
  }
  return absl::StrCat(b.size() == 1 ? "bucket " : "buckets ", absl::StrJoin(runs, ", "));
}

std::string Ago(int64_t now_us, int64_t unix_ms) {
  return absl::StrFormat("%.1f s ago", (now_us / 1000 - unix_ms) / 1e3);
}

// What rank `r` did with the result of step `step - 1`, by the shards that
// recorded that step: "behind" when one has no pull of it from the rank,
// "pulling" when one has not served it yet, "computing" when every one did;
// "" when none recorded the step.
std::string FromPulls(const std::vector<v1::ShardStats>& shards, int r, int64_t step) {
  bool seen = false, asked = true, served = true;
  for (const v1::ShardStats& st : shards) {
    for (const v1::StepArrivals& s : st.flight()) {
      if (s.end_us() < 0 || s.step() != step - 1 || r >= s.pull_asked_us_size()) continue;
      seen = true;
      asked = asked && s.pull_asked_us(r) >= 0;
      served = served && r < s.pull_served_us_size() && s.pull_served_us(r) >= 0;
    }
  }
  if (!seen) return "";
  return !asked ? "behind" : !served ? "pulling" : "computing";
}

// Fills the culprit's registry record, activity and liveness.
void Describe(const std::vector<v1::ShardStats>& shards, const v1::View& view, int64_t step,
              bool pushed_some, const AliveCheck& alive, Culprit* c) {
  if (!c->host_group) {
    if (const v1::Member* m = FindWorker(view, c->registry_rank)) {
      c->member = true;
      c->host = m->host();
      c->pid = m->pid();
      c->pod = m->pod();
      c->last_heartbeat_unix_ms = m->liveness().last_heartbeat_unix_ms();
      c->lease_expires_unix_ms = m->liveness().lease_expires_unix_ms();
      if (m->liveness().has_phases()) {
        c->reported_step = m->liveness().phases().step();
        c->last_phase = DominantPhase(m->liveness().phases());
      }
    }
  }
  if (pushed_some) {
    c->doing = "pushing";
  } else if (std::string pulls = c->host_group ? "" : FromPulls(shards, c->rank, step);
             !pulls.empty()) {
    c->doing = pulls;
  } else if (c->reported_step == step || (c->reported_step < 0 && step == 0)) {
    c->doing = "computing";  // by its heartbeats (the servers no longer hold step - 1)
  } else {
    c->doing = "behind";
  }
  if (c->host_group) {
    c->alive = "unknown (a host group)";
  } else if (!c->member) {
    c->alive = "unknown (not a member: its lease lapsed or it left)";
  } else {
    c->alive = alive(c->host, c->pid);
  }
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kProgressing:
      return "progressing";
    case Verdict::kNotStarted:
      return "not_started";
    case Verdict::kStalled:
      return "stalled";
    case Verdict::kStalledOnServers:
      return "stalled_on_servers";
  }
  return "?";
}

int WhyExitCode(Verdict v) {
  switch (v) {
    case Verdict::kStalled:
      return 7;
    case Verdict::kStalledOnServers:
      return 8;
    default:
      return 0;
  }
}

WhyReport Diagnose(const std::string& job, const std::vector<v1::ShardStats>& shards,
                   const v1::View& view, int64_t now_us, double stalled_after_s,
                   const AliveCheck& alive) {
  WhyReport w;
  w.job = job;
  w.now_us = now_us;
  const int64_t after_us = static_cast<int64_t>(stalled_after_s * 1e6);
  // The step in progress: the shards' oldest.
  std::map<int, Culprit> owing;  // by slot
  std::map<int, bool> pushed_some;
  int in_progress = 0;
  for (const v1::ShardStats& st : shards) {
    if (!st.has_waiting()) continue;
    const v1::StepWaiting& sw = st.waiting();
    ++in_progress;
    if (w.since_us < 0 || sw.started_us() < w.since_us) w.since_us = sw.started_us();
    if (w.step < 0 || sw.step() < w.step) w.step = sw.step();
    std::vector<bool> listed(static_cast<size_t>(st.world_size()), false);
    for (const v1::SlotWaiting& slot : sw.slots()) {
      Culprit& c = owing[slot.slot()];
      c.rank = slot.slot();
      c.host_group = sw.host_groups();
      c.registry_rank = c.host_group ? -1 : RegistryRankOf(st, slot.slot());
      ShardOwed o;
      o.shard = st.shard_index();
      o.num_buckets = sw.num_buckets();
      o.not_pushed.assign(slot.not_pushed().begin(), slot.not_pushed().end());
      o.receiving.assign(slot.receiving().begin(), slot.receiving().end());
      if (static_cast<int>(o.not_pushed.size()) < o.num_buckets) pushed_some[slot.slot()] = true;
      c.owes.push_back(std::move(o));
      if (static_cast<size_t>(slot.slot()) < listed.size()) listed[slot.slot()] = true;
    }
    for (size_t r = 0; r < listed.size(); ++r) {
      if (!listed[r]) pushed_some[static_cast<int>(r)] = true;  // pushed all of it here
    }
    if (sw.slots_size() == 0) {
      std::string note =
          absl::StrCat("shard ", st.shard_index(), ": every push of step ", sw.step(), " arrived; ",
                       sw.buckets_updated(), " of ", sw.num_buckets(), " buckets updated");
      if (sw.pulls_waiting_size() > 0) {
        absl::StrAppend(&note, "; pulls waiting from ranks ",
                        absl::StrJoin(sw.pulls_waiting(), ", "));
      }
      w.notes.push_back(std::move(note));
    }
  }
  if (in_progress > 0) {
    if (now_us - w.since_us < after_us) return w;  // progressing
    w.verdict = owing.empty() ? Verdict::kStalledOnServers : Verdict::kStalled;
    for (auto& [slot, c] : owing) {
      Describe(shards, view, w.step, pushed_some[slot], alive, &c);
      w.culprits.push_back(std::move(c));
    }
    return w;
  }
  // Nothing in progress: when did the last step end?
  int64_t last_end = -1;
  int world = 0;
  for (const v1::ShardStats& st : shards) {
    world = std::max(world, st.world_size());
    w.step = std::max(w.step, st.step());
    for (const v1::StepArrivals& s : st.flight()) last_end = std::max(last_end, s.end_us());
  }
  if (last_end < 0) {
    w.verdict = Verdict::kNotStarted;
    return w;
  }
  w.since_us = last_end;
  if (now_us - last_end < after_us) return w;
  w.verdict = Verdict::kStalled;
  for (int r = 0; r < world; ++r) {
    Culprit c;
    c.rank = r;
    c.registry_rank = RegistryRankOf(shards.front(), r);
    Describe(shards, view, w.step, /*pushed_some=*/false, alive, &c);
    w.culprits.push_back(std::move(c));
  }
  w.notes.push_back(absl::StrCat("no rank has pushed step ", w.step, " to any shard"));
  return w;
}

json WhyJson(const WhyReport& w) {
  json culprits = json::array();
  for (const Culprit& c : w.culprits) {
    json owes = json::array();
    for (const ShardOwed& o : c.owes) {
      owes.push_back({{"shard", o.shard},
                      {"num_buckets", o.num_buckets},
                      {"not_pushed", o.not_pushed},
                      {"receiving", o.receiving}});
    }
    auto ms = [](int64_t v) { return v > 0 ? json(v) : json(nullptr); };
    culprits.push_back(
        {{c.host_group ? "host_group" : "rank", c.rank},
         {"registry_rank", c.host_group ? json(nullptr) : json(c.registry_rank)},
         {"member", c.member},
         {"host", c.member ? json(c.host) : json(nullptr)},
         {"pid", c.member ? json(c.pid) : json(nullptr)},
         {"pod", c.pod.empty() ? json(nullptr) : json(c.pod)},
         {"owes", owes},
         {"doing", c.doing},
         {"last_phase", c.last_phase.empty() ? json(nullptr) : json(c.last_phase)},
         {"last_reported_step", c.reported_step >= 0 ? json(c.reported_step) : json(nullptr)},
         {"last_heartbeat_unix_ms", ms(c.last_heartbeat_unix_ms)},
         {"heartbeat_age_s", c.last_heartbeat_unix_ms > 0
                                 ? json((w.now_us / 1000 - c.last_heartbeat_unix_ms) / 1e3)
                                 : json(nullptr)},
         {"lease_expires_unix_ms", ms(c.lease_expires_unix_ms)},
         {"alive", c.alive}});
  }
  return {{"job", w.job},
          {"verdict", VerdictName(w.verdict)},
          {"exit_code", WhyExitCode(w.verdict)},
          {"step", w.step},
          {"since_unix_us", w.since_us >= 0 ? json(w.since_us) : json(nullptr)},
          {"age_s", w.since_us >= 0 ? json((w.now_us - w.since_us) / 1e6) : json(nullptr)},
          {"culprits", culprits},
          {"notes", w.notes}};
}

void WhyText(const WhyReport& w, std::ostream& out) {
  const double age = (w.now_us - w.since_us) / 1e6;
  const std::string since =
      w.since_us >= 0
          ? absl::FormatTime("%H:%M:%S", absl::FromUnixMicros(w.since_us), absl::UTCTimeZone())
          : "";
  switch (w.verdict) {
    case Verdict::kNotStarted:
      out << "job " << w.job << ": not started (no step has ended and none is in progress)\n";
      return;
    case Verdict::kProgressing:
      out << "job " << w.job << ": progressing (step " << w.step << ")\n";
      return;
    case Verdict::kStalledOnServers:
      out << "job " << w.job << ": STALLED at step " << w.step
          << absl::StrFormat(" for %.1f s (since %s UTC)", age, since)
          << ": every push arrived; the servers have not finished the step\n";
      break;
    case Verdict::kStalled:
      out << "job " << w.job << ": STALLED at step " << w.step
          << absl::StrFormat(" for %.1f s (since %s UTC)", age, since) << ", waiting for "
          << w.culprits.size() << (w.culprits.size() == 1 ? " rank" : " ranks") << "\n";
      break;
  }
  for (const Culprit& c : w.culprits) {
    out << "\n"
        << (c.host_group ? absl::StrCat("host group ", c.rank)
                         : absl::StrCat("rank ", c.rank, " (registry rank ", c.registry_rank, ")"));
    if (c.member) {
      out << ": host " << c.host << " pid " << c.pid;
      if (!c.pod.empty()) out << " pod " << c.pod;
    }
    out << "\n";
    if (c.owes.empty()) out << "  owes:      every bucket on every shard (pushed nothing)\n";
    for (const ShardOwed& o : c.owes) {
      out << "  owes:      shard " << o.shard << ": ";
      if (!o.not_pushed.empty()) out << Buckets(o.not_pushed) << " not pushed";
      if (!o.receiving.empty()) {
        out << (o.not_pushed.empty() ? "" : ", ") << Buckets(o.receiving) << " still arriving";
      }
      out << " (of " << o.num_buckets << ")\n";
    }
    out << "  doing:     " << c.doing;
    if (c.reported_step >= 0) {
      out << " (last reported step " << c.reported_step << ", most of it "
          << (c.last_phase.empty() ? "-" : c.last_phase) << ")";
    }
    out << "\n";
    if (c.last_heartbeat_unix_ms > 0) {
      out << "  heartbeat: " << Ago(w.now_us, c.last_heartbeat_unix_ms) << "; lease "
          << (c.lease_expires_unix_ms * 1000 > w.now_us
                  ? absl::StrFormat("expires in %.1f s",
                                    (c.lease_expires_unix_ms * 1000 - w.now_us) / 1e6)
                  : std::string("lapsed"))
          << "\n";
    } else {
      out << "  heartbeat: unknown (none reached this registry)\n";
    }
    out << "  alive:     " << c.alive << "\n";
  }
  for (const std::string& n : w.notes) out << "\nnote: " << n << "\n";
}

}  // namespace tessel::ctl
