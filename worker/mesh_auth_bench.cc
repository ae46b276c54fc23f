// What authenticating a hybrid job's worker-to-worker messages costs: two
// ranks (threads of this process, each with its own UCX endpoint over shared
// memory, as two processes of one host) sum a vector over a PeerGroup, the
// tensor-parallel sum of hybrid jobs, with and without a mesh key, in one
// run: 9 interleaved repeats of each configuration; medians and minimums compared.
//
// Usage: bazel run //worker:mesh_auth_bench [-- ITERS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/wire.h"
#include "runtime/frame_auth.h"
#include "transport/transport_testing.h"
#include "worker/collectives.h"
#include "worker/peer_group.h"

namespace tessel {
namespace {

// Mean microseconds of one 2-rank AllReduceSum of `floats` over `iters`.
double Run(bool auth, size_t floats, int iters) {
  std::vector<std::unique_ptr<PeerGroup>> g;
  std::vector<std::string> addresses;
  for (int r = 0; r < 2; ++r) {
    PeerGroupOptions o;
    o.name = "bench.mesh";
    g.push_back(std::make_unique<PeerGroup>(MakeUcxTransport({.tls = "posix,sysv,self"}), r, 2, o));
    addresses.push_back(g.back()->address());
  }
  const std::string secret = NewJobSecret();
  for (auto& p : g) {
    if (!p->Connect(addresses).ok()) std::abort();
    if (auth) p->SetAuth(*FrameAuth::Create(secret, JobId("bench.mesh"), -1));
  }
  auto loop = [&](int r, int n, uint64_t first_tag) {
    std::vector<float> v(floats, 1.0f + static_cast<float>(r));
    for (int i = 0; i < n; ++i) {
      if (!AllReduceSum(*g[static_cast<size_t>(r)], {0, 1}, first_tag + static_cast<uint64_t>(i),
                        absl::MakeSpan(v), "bench")
               .ok()) {
        std::abort();
      }
    }
  };
  std::thread warm([&] { loop(1, 50, 0); });
  loop(0, 50, 0);
  warm.join();
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] { loop(1, iters, 1000); });
  loop(0, iters, 1000);
  other.join();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  for (auto& p : g) p->Shutdown();
  return us / iters;
}

// Nanoseconds to tag a 40-byte peer-message header and verify it: what a
// message costs its sender and receiver together.
double TagNanos() {
  auto auth = *FrameAuth::Create(NewJobSecret(), JobId("bench.mesh"), -1);
  std::vector<uint8_t> header(40, 3);
  const int n = 200000;
  int ok = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    header[24] = static_cast<uint8_t>(i);
    const auto tag = auth->TagOf(header, 1);
    ok += auth->VerifyTag(header, tag, 1);
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  if (ok != n) std::abort();
  return ns / n;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::printf(
      "# 2-rank AllReduceSum over a PeerGroup (UCX shared memory, threads), %d iterations "
      "(1 MiB: a tenth) x 9 interleaved repeats; us per sum, median and minimum over the "
      "repeats; ratio = authenticated / not\n",
      iters);
  std::printf("# tag + verify of one message header: %.0f ns\n", tessel::TagNanos());
  std::printf("%10s %12s %12s %8s %12s %12s %8s\n", "bytes", "plain_med", "auth_med", "ratio",
              "plain_min", "auth_min", "ratio");
  for (size_t bytes : {size_t{256}, size_t{64} << 10, size_t{1} << 20}) {
    const size_t floats = bytes / sizeof(float);
    const int n = bytes >= (size_t{1} << 20) ? std::max(1, iters / 10) : iters;
    std::vector<double> plain, auth;
    for (int rep = 0; rep < 9; ++rep) {
      plain.push_back(tessel::Run(false, floats, n));
      auth.push_back(tessel::Run(true, floats, n));
    }
    const double p = tessel::Median(plain), a = tessel::Median(auth);
    const double pm = *std::min_element(plain.begin(), plain.end());
    const double am = *std::min_element(auth.begin(), auth.end());
    std::printf("%10zu %12.2f %12.2f %8.3f %12.2f %12.2f %8.3f\n", bytes, p, a, a / p, pm, am,
                am / pm);
  }
  return 0;
}
