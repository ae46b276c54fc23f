// `tesselctl top JOB` (a live per-rank view) and `tesselctl why JOB` (what a
// job that does not progress waits for). The pure parts: rank_view.h and
// why_verdict.h; this file gathers their inputs (every shard server's
// GetStats of the job, the registry's GetView of its group) and prints.
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"
#include "client/rank_view.h"
#include "client/why_verdict.h"

namespace tessel::ctl {
namespace {

std::atomic<bool> stop_top{false};
void OnStop(int) { stop_top.store(true); }

struct JobInputs {
  std::vector<v1::ShardStats> stats;  // the shards that answered
  v1::View view;
};

// The job's stats from every shard server and its registry group. NotFound
// when neither a shard nor the registry knows the job.
absl::StatusOr<JobInputs> Gather(const Globals& g, const std::string& job) {
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return s;
  absl::StatusOr<std::vector<ShardRow>> rows = CollectShards(c, job);
  if (!rows.ok()) return rows.status();
  JobInputs in;
  absl::Status last;
  for (const ShardRow& r : *rows) {
    if (r.stats.ok()) {
      in.stats.push_back(*r.stats);
    } else {
      last = r.stats.status();
      if (!absl::IsNotFound(last)) {
        std::cerr << "tesselctl: warning: shard " << r.shard << ": " << last.message() << "\n";
      }
    }
  }
  absl::StatusOr<v1::View> view = c.registry().GetView(job, /*liveness=*/true);
  if (view.ok()) in.view = *std::move(view);
  if (in.stats.empty()) {
    if (absl::IsNotFound(last)) {
      return absl::NotFoundError(absl::StrCat("no job \"", job, "\" on the shard servers of pool ",
                                              g.pool, " (`tesselctl jobs` lists them)"));
    }
    return last;
  }
  return in;
}

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

// Keys from a terminal without Enter; restored on destruction.
class RawStdin {
 public:
  RawStdin() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawStdin() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  // Waits up to `d` (or until Ctrl-C); true when 'q' was pressed.
  bool WaitForQuit(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (!stop_top.load() && absl::Now() < until) {
      const int ms = static_cast<int>(
          std::min<int64_t>(100, absl::ToInt64Milliseconds(until - absl::Now()) + 1));
      if (!active_) {
        absl::SleepFor(absl::Milliseconds(ms));
        continue;
      }
      pollfd p{STDIN_FILENO, POLLIN, 0};
      if (poll(&p, 1, ms) > 0 && (p.revents & POLLIN)) {
        char ch = 0;
        if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q')) return true;
      }
    }
    return false;
  }

 private:
  termios saved_{};
  bool active_ = false;
};

int Top(const Globals& g, const std::string& job, double interval_s, int iterations) {
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  const bool once = g.output != "table";  // -o json|yaml: one snapshot
  const bool tty = isatty(STDOUT_FILENO);
  RawStdin keys;
  for (int i = 0; !stop_top.load(); ++i) {
    absl::StatusOr<JobInputs> in = Gather(g, job);
    if (!in.ok()) return Fail(in.status());
    const TopSnapshot top = CombineRanks(job, in->stats, in->view, NowUs());
    std::ostringstream text;
    Render(
        g, TopJson(top),
        [&](std::ostream& o) {
          o << "job " << job << "  step " << top.step << "  world " << top.world << "  shards "
            << top.shards_reachable << "  "
            << absl::FormatTime("%H:%M:%S UTC", absl::FromUnixMicros(top.now_us),
                                absl::UTCTimeZone())
            << (tty ? "   (q quits)" : "") << "\n";
          PrintTable(TopHeader(), TopTable(top), o);
        },
        text);
    if (tty && !once) std::cout << "\033[H\033[2J";
    std::cout << text.str() << (tty || once ? "" : "\n") << std::flush;
    if (once || (iterations > 0 && i + 1 >= iterations)) break;
    if (keys.WaitForQuit(absl::Seconds(interval_s))) break;
  }
  return kOk;
}

// "yes", "yes (stopped)", "no", "unknown, host X".
std::string Alive(const std::string& host, int64_t pid) {
  char self[256] = {};
  gethostname(self, sizeof(self) - 1);
  if (host != self) return absl::StrCat("unknown, host ", host);
  if (pid <= 0) return "unknown (no pid)";
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return "no (no such process)";
  // The state after the command's closing parenthesis in /proc/PID/stat.
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos && close + 2 < line.size()) {
    const char state = line[close + 2];
    if (state == 'T' || state == 't') return "yes (stopped)";
    if (state == 'Z') return "no (exited, not reaped)";
  }
  return "yes";
}

int Why(const Globals& g, const std::string& job, double stalled_after_s) {
  absl::StatusOr<JobInputs> in = Gather(g, job);
  if (!in.ok()) return Fail(in.status());
  const WhyReport w = Diagnose(job, in->stats, in->view, NowUs(), stalled_after_s, Alive);
  Render(
      g, WhyJson(w), [&](std::ostream& o) { WhyText(w, o); }, std::cout);
  return WhyExitCode(w.verdict);
}

constexpr char kTopColumns[] = R"TXT(Columns (one row per data-parallel rank):
  RANK       the data-parallel rank ("R (N)": its registry rank N when they differ)
  HOST, PID  its process, from the registry ("(gone)": not a member now)
  POD        its Kubernetes pod ($POD_NAME at join), "-" elsewhere
  STEP       the newest step it pushed to any shard (JSON reported_step: the
             worker's own, from its heartbeats, up to a third of its lease behind)
  STEPS/S    its finished steps per second, from the servers' flight recorders
  LATENESS   how long after the first rank its last push of a step reached the
             servers: the median over the servers' straggler window (8 steps),
             the highest over the shards
  SCORE      its step time over the median rank's (1.00 = the median's pace);
             SLOW when the servers' straggler rule names it (docs/observability.md)
  PHASE      where its last reported step spent most of its time: computing
             (its own code: forward, backward, data), pushing, waiting (for the
             other ranks and the servers' update) or pulling
  PUSHED     gradient bytes that reached the servers, summed over shards
  PULLED     parameter bytes the servers sent it
  HEARTBEAT  its last heartbeat at this registry
"-": not known yet (too few steps, host aggregation, or no heartbeat here).
-o json|yaml prints one snapshot (the same fields) and exits.)TXT";

constexpr char kWhyHelp[] =
    R"TXT(A step in progress for --stalled_after (or no step ended for as long) is
stalled. For each rank it waits for: what it owes on which shard; what it is
doing, by the servers' flight recorders: pushing (part of the step pushed),
computing (none pushed, its pull of the step before served everywhere: in its
own code, forward, backward, data), pulling (that pull not served yet) or
behind (no such pull: it never finished the step before); its last phase,
heartbeat and lease (the registry); whether its process is alive (same host:
kill(pid, 0) and /proc, "yes (stopped)" under SIGSTOP; another host: unknown).
Exit codes: 0 progressing (or not started), 7 stalled (the ranks are named),
8 stalled with every push arrived (the servers' side: see their logs),
3 no such job, 4 unreachable, 1 failed.)TXT";

}  // namespace

void AddTopWhyCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  struct TopFlags {
    std::string job;
    double interval_s = 2;
    int iterations = 0;
    double stalled_after_s = 10;
  };
  auto f = std::make_shared<TopFlags>();
  CLI::App* top = app.add_subcommand(
      "top", "a job's ranks, live: step rate, lateness, straggler score, phase, bytes");
  top->add_option("job", f->job, "job name")->required();
  top->add_option("--interval", f->interval_s, "seconds between refreshes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  top->add_option("--iterations", f->iterations,
                  "refresh this many times, then exit (0: until q or Ctrl-C)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  top->footer(kTopColumns);
  commands->push_back({top, [&g, f] { return Top(g, f->job, f->interval_s, f->iterations); }});

  CLI::App* why = app.add_subcommand(
      "why", "why a job does not progress: the ranks its step waits for, their state");
  why->add_option("job", f->job, "job name")->required();
  why->add_option("--stalled_after", f->stalled_after_s,
                  "seconds a step may be in progress (or the job idle) before it counts as "
                  "stalled")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  why->footer(kWhyHelp);
  commands->push_back({why, [&g, f] { return Why(g, f->job, f->stalled_after_s); }});
}

}  // namespace tessel::ctl
