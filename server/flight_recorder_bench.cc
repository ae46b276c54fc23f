// What the flight recorder adds to a step, in nanoseconds: on the data path
// (per push header: FlightRecorder::Pushed with its clock conversion; per
// step: EndStep and the absl::Now() ShardJob takes for it) and off it (the
// watcher's Window() copy and ScoreRanks, every 250 ms per job). Compare
// with a step at 1 MiB (docs/performance.md: about 0.4 ms).
//
// Usage: flight_recorder_bench [--world=4] [--buckets=4]
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "core/straggler.h"
#include "server/flight_recorder.h"

ABSL_FLAG(int, world, 4, "ranks");
ABSL_FLAG(int, buckets, 4, "buckets per step on this shard (push headers per rank)");

namespace {

double NsPer(std::chrono::steady_clock::time_point t0, int64_t n) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int world = absl::GetFlag(FLAGS_world);
  const int buckets = absl::GetFlag(FLAGS_buckets);
  tessel::FlightRecorder rec(world);
  constexpr int64_t kSteps = 200000;
  // Data path: per step, world * buckets headers and one step end.
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < kSteps; ++s) {
    for (int b = 0; b < buckets; ++b) {
      for (int r = 0; r < world; ++r) rec.Pushed(r, absl::ToUnixMicros(absl::Now()));
    }
    rec.EndStep(s, absl::ToUnixMicros(absl::Now()));
  }
  const double with_clock = NsPer(t0, kSteps);
  // The same without reading the clock (ShardJob reads it anyway for the
  // stall clock: Reserve's `now`): the recorder's own share.
  t0 = std::chrono::steady_clock::now();
  const int64_t fixed = absl::ToUnixMicros(absl::Now());
  for (int64_t s = 0; s < kSteps; ++s) {
    for (int b = 0; b < buckets; ++b) {
      for (int r = 0; r < world; ++r) rec.Pushed(r, fixed + s);
    }
    rec.EndStep(s, fixed + s);
  }
  const double own = NsPer(t0, kSteps);
  // One clock read: ShardJob reads the clock per push header already (the
  // stall clock's `now`), and once more per step for EndStep.
  t0 = std::chrono::steady_clock::now();
  int64_t clock_sink = 0;
  for (int64_t i = 0; i < kSteps; ++i) clock_sink += absl::ToUnixMicros(absl::Now());
  const double clock = NsPer(t0, kSteps);
  // Off the data path: one watcher look (under the job's mutex: the copy).
  constexpr int64_t kLooks = 20000;
  t0 = std::chrono::steady_clock::now();
  size_t sink = 0;
  for (int64_t i = 0; i < kLooks; ++i) sink += rec.Window().size();
  const double window = NsPer(t0, kLooks);
  const std::vector<tessel::StepArrivals> w = rec.Window();
  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < kLooks; ++i) sink += tessel::ScoreRanks(w, {}).size();
  const double score = NsPer(t0, kLooks);
  const double added = own + clock;
  std::printf(
      "world %d, %d buckets: the recorder adds %.1f ns/step on the data path (%.1f ns "
      "its stores, %.1f ns the step end's clock read; with a clock read per push, "
      "which the stall clock makes anyway: %.1f ns); per watcher look: Window() %.0f ns "
      "under the job's mutex, ScoreRanks %.0f ns outside it (%d)\n",
      world, buckets, added, own, clock, with_clock, window, score,
      static_cast<int>((sink + static_cast<size_t>(clock_sink)) % 2));
  std::printf("at a 1 MiB step of 0.4 ms: %.4f%% of the step (%.4f%% counting every clock read)\n",
              added / 400000.0 * 100.0, with_clock / 400000.0 * 100.0);
  // Pulls and bytes (ShardJob::AcceptPull and CountPulled): per step, each
  // rank's pull asked for while the step is in progress (a clock read each:
  // new), then each served bucket after the step ended (a ring lookup and a
  // clock read each: new), and the bytes of every push and served bucket.
  t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < kSteps; ++s) {
    for (int r = 0; r < world; ++r) rec.PullAsked(r, s, true, absl::ToUnixMicros(absl::Now()));
    for (int b = 0; b < buckets; ++b) {
      for (int r = 0; r < world; ++r) {
        rec.Pushed(r, fixed + s);
        rec.CountBytes(r, 1 << 18, 0);
      }
    }
    rec.EndStep(s, fixed + s);
    for (int b = 0; b < buckets; ++b) {
      for (int r = 0; r < world; ++r) {
        rec.CountBytes(r, 0, 1 << 18);
        rec.PullServed(r, s, false, absl::ToUnixMicros(absl::Now()));
      }
    }
  }
  const double pulls = NsPer(t0, kSteps) - own;
  std::printf(
      "pull times and bytes add %.1f ns/step (%d clock reads among them): %.4f%% of a 1 MiB "
      "step; everything: %.4f%%\n",
      pulls, world + world * buckets, pulls / 400000.0 * 100.0,
      (with_clock + pulls) / 400000.0 * 100.0);
  return 0;
}
