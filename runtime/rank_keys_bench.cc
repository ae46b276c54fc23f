// The per-frame cost of data-path tags, before and after per-rank keys, in
// one run: a worker's seal and a server's check of a 64-byte header with the
// job-wide key (FrameAuth, as before issue 42 part 2) and with the per-rank
// keys (RankFrameKeys::Seal, JobFrameKeys::VerifyFromWorker: the lookup of
// the rank's key under the server's lock included), W ranks round robin.
//
// Usage: bazel run -c opt //runtime:rank_keys_bench [-- ITERS [RANKS]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"

namespace tessel {
namespace {

FrameHeader Push(int rank, int64_t step) {
  FrameHeader h = MakeHeader(FrameType::kPush, JobId("bench"), 7, step, rank, 0, 3);
  h.payload_bytes = 1 << 20;
  return h;
}

double NsPer(const std::chrono::steady_clock::time_point& start, int n) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         n;
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  using namespace tessel;
  const int iters = argc > 1 ? std::atoi(argv[1]) : 200000;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 8;
  const std::string secret = NewJobSecret();
  auto job_wide = *FrameAuth::Create(secret, JobId("bench"), 0);
  auto job = *JobFrameKeys::Create(secret, JobId("bench"), 0);
  std::vector<std::shared_ptr<const RankFrameKeys>> mine;
  for (int r = 0; r < ranks; ++r) {
    mine.push_back(
        *RankFrameKeys::Create(FrameKeyGrant{job->RankSecret(r, 7), ""}, JobId("bench"), 0, r, 7));
  }
  for (int round = 1; round <= 3; ++round) {
    int ok = 0;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      const FrameHeader h = Push(i % ranks, i);
      const SealedHeader s = job_wide->Seal(h);
      ok += job_wide->Verify(s, h) ? 1 : 0;
    }
    const double before = NsPer(start, iters);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      const FrameHeader h = Push(i % ranks, i);
      const SealedHeader s = mine[static_cast<size_t>(i % ranks)]->Seal(h, false);
      ok += job->VerifyFromWorker(s, h) ? 1 : 0;
    }
    const double after = NsPer(start, iters);
    std::printf(
        "round %d: seal + check per frame: job-wide key %.0f ns, per-rank keys %.0f ns "
        "(%d ranks, %d frames, %s)\n",
        round, before, after, ranks, iters, ok == 2 * iters ? "all verified" : "FAILED");
    if (ok != 2 * iters) return 1;
  }
  return 0;
}
