// Registry control-plane latency: the memory backend (baseline) against the
// etcd backend (a real etcd on loopback, started here), both served by
// RegistryService over gRPC and driven by raw stubs, as members and tools
// call it. Prints the median and p99 per call, in microseconds, and what a
// watcher of the group received over the joins and leaves: full views
// against deltas (WatchRequest.deltas), messages and bytes.
//
//   bazel run //benchmarks:registry_bench -- --members=200
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "proto/registry.grpc.pb.h"
#include "registry/backend_factory.h"
#include "registry/registry_service.h"
#include "rpc/grpc_util.h"
#include "runtime/cli.h"
#include "runtime/log.h"

ABSL_FLAG(int, members, 200, "members joining one group (each op is timed this many times)");

namespace tessel {
namespace {

struct Stats {
  double median_us, p99_us;
};

Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
}

template <typename F>
std::vector<double> Time(int n, F op) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const absl::Time t = absl::Now();
    op(i);
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t));
  }
  return us;
}

void Check(const grpc::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "rpc failed: %s\n", s.error_message().c_str());
    std::exit(1);
  }
}

void Run(const char* name, std::unique_ptr<Registry> registry, int n) {
  RegistryService service(std::move(registry));
  std::string bound;
  auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
  if (!server.ok()) std::exit(1);
  auto stub = v1::Registry::NewStub(MakeChannel(bound));
  std::vector<int64_t> leases(n);
  // Two watchers of the group over every join and leave: one takes full
  // views, one deltas. Each reads on its own thread until cancelled.
  struct Watcher {
    grpc::ClientContext ctx;
    int64_t messages = 0, bytes = 0;
    std::thread thread;
  };
  Watcher watchers[2];
  for (int d = 0; d < 2; ++d) {
    watchers[d].thread = std::thread([&, d] {
      v1::WatchRequest req;
      req.set_group("bench");
      req.set_deltas(d == 1);
      auto reader = stub->Watch(&watchers[d].ctx, req);
      v1::View v;
      while (reader->Read(&v)) {
        ++watchers[d].messages;
        watchers[d].bytes += static_cast<int64_t>(v.ByteSizeLong());
      }
      (void)reader->Finish();
    });
  }
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Check(((*stub).*method)(&ctx, req, resp));
  };
  auto join = Time(n, [&](int i) {
    v1::JoinRequest req;
    req.mutable_member()->set_group("bench");
    req.mutable_member()->set_role(v1::ROLE_WORKER);
    req.mutable_member()->set_rank(i);
    req.set_lease_ttl_ms(60000);
    v1::JoinResponse resp;
    call(&v1::Registry::Stub::Join, req, &resp);
    leases[i] = resp.lease_id();
  });
  auto heartbeat = Time(n, [&](int i) {
    v1::HeartbeatRequest req;
    req.set_lease_id(leases[i]);
    v1::HeartbeatResponse resp;
    call(&v1::Registry::Stub::Heartbeat, req, &resp);
  });
  auto view = Time(n, [&](int) {
    v1::GetViewRequest req;
    req.set_group("bench");
    v1::GetViewResponse resp;
    call(&v1::Registry::Stub::GetView, req, &resp);
  });
  auto leave = Time(n, [&](int i) {
    v1::LeaveRequest req;
    req.set_lease_id(leases[i]);
    v1::LeaveResponse resp;
    call(&v1::Registry::Stub::Leave, req, &resp);
  });
  absl::SleepFor(absl::Milliseconds(500));  // the last changes reach the watchers
  for (Watcher& w : watchers) {
    w.ctx.TryCancel();
    w.thread.join();
  }
  for (int d = 0; d < 2; ++d) {
    const Watcher& w = watchers[d];
    std::printf("%-7s Watch %-6s %6lld messages  %10lld bytes  (%lld bytes each) over %d changes\n",
                name, d == 1 ? "deltas" : "full", static_cast<long long>(w.messages),
                static_cast<long long>(w.bytes),
                static_cast<long long>(w.messages > 0 ? w.bytes / w.messages : 0), 2 * n);
  }
  for (const auto& [op, us] : {std::pair{"Join", join}, std::pair{"Heartbeat", heartbeat},
                               std::pair{"GetView", view}, std::pair{"Leave", leave}}) {
    Stats s = Summarize(us);
    std::printf("%-7s %-10s median %6.0f us   p99 %6.0f us   (n=%d)\n", name, op, s.median_us,
                s.p99_us, n);
  }
  service.Stop();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  tessel::SetDefaultLogLevel(tessel::LogLevel::kWarning);
  tessel::ParseFlags(argc, argv);
  const int n = absl::GetFlag(FLAGS_members);
  std::printf("%d members join one group, heartbeat, read the view (up to %d members), leave\n", n,
              n);
  tessel::RegistryBackends backends("/tmp");
  for (const std::string& name : tessel::RegistryBackends::Names()) {
    if (absl::Status available = tessel::RegistryBackends::Available(name); !available.ok()) {
      std::printf("%s: skipped (%s)\n", name.c_str(), std::string(available.message()).c_str());
      continue;
    }
    auto registry = backends.Make(name);
    if (!registry.ok()) {
      std::fprintf(stderr, "%s\n", std::string(registry.status().message()).c_str());
      return 1;
    }
    tessel::Run(name.c_str(), std::move(*registry), n);
  }
  return 0;
}
