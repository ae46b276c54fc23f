#include "worker/internal/worker_parts.h"

#include "absl/strings/str_cat.h"
#include "rpc/tls.h"
#include "runtime/log.h"
#include "worker/internal/make_transport.h"
#include "worker/internal/server_reducer.h"

namespace tessel::internal {
namespace {

// `s` with the worker named in front of its message.
absl::Status Named(const JobContext& ctx, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(ctx.Where(), ": ", s.message()));
}

}  // namespace

WorkerParts::~WorkerParts() {
  membership.reset();  // leaves the registry
  if (channel != nullptr) channel->transport().Shutdown();
}

absl::Status WorkerParts::Build() {
  const WorkerOptions& o = ctx.options;
  auto credentials = LoadClientCredentials(o.tls);
  if (!credentials.ok()) return Named(ctx, credentials.status());
  if (!o.metrics_address.empty()) {
    // Who may read it off loopback: --metrics_token_file / --metrics_open
    // (or their TESSEL_METRICS_* variables, for the Python SDK).
    auto access = HttpAccessFromFlags();
    if (!access.ok()) return Named(ctx, access.status());
    auto started = MetricsServer::Start(o.metrics_address, &metrics::Default(), {}, *access);
    if (!started.ok()) return Named(ctx, started.status());
    http = *std::move(started);
    TESSEL_LOG(INFO) << ctx.Where() << ": metrics at http://" << http->address() << "/metrics";
  }
  if (!o.timeline.empty()) {
    auto opened = Timeline::Open(TimelinePath(o.timeline, o.rank, -1),
                                 absl::StrCat("worker[", o.rank, "]"), o.timeline_window);
    if (!opened.ok()) return Named(ctx, opened.status());
    timeline = *std::move(opened);
    ctx.timeline = timeline.get();
  }
  auto transport = MakeTransport(o);
  if (!transport.ok()) return Named(ctx, transport.status());
  channel = std::make_unique<DataChannel>(&ctx, std::move(*transport));
  membership = std::make_unique<Membership>(&ctx, channel.get(), *credentials);
  Membership* m = membership.get();
  channel->SetPeriodicCheck([m] { return m->Check(); });
  control = std::make_unique<JobControl>(&ctx, &m->fleet());
  exchange = std::make_unique<BucketExchange>(&ctx, channel.get());
  units = std::make_unique<FsdpUnits>(&ctx, channel.get());
  // Reducers are made on first use, at the membership of that moment.
  JobContext* c = &ctx;
  collectives = std::make_unique<JobCollectives>(c, [c, m](size_t size) {
    return ServerReducer::Make({c, &m->fleet(), m->ucx_addresses(), [m] { return m->Check(); }},
                               size);
  });
  recovery = std::make_unique<RecoveryCoordinator>(
      RecoveryParts{&ctx, channel.get(), m, exchange.get(), units.get(), &ddp, collectives.get(),
                    control.get(), &spec});
  queries = std::make_unique<StateQueries>(StateQueryParts{&ctx, exchange.get(), units.get(), &ddp,
                                                           collectives.get(), control.get(),
                                                           &m->fleet(), &spec});
  return absl::OkStatus();
}

}  // namespace tessel::internal
