// StateQueries of a DDP job of two ranks, each a thread with its own parts,
// meeting through in-memory collectives (memory_reducer.h): DDP's state
// lives on the workers, so every query runs without shard servers (the ZeRO
// paths, which read and write the servers, run in worker/worker_test.cc).
// Gradients and metrics are averaged over ranks, a drifted rank is found and
// repaired from rank 0, a blob round-trips, and a bad blob or a wrong
// parameter count on one rank is refused on every rank with nothing changed.
#include "worker/internal/state_queries.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/convert.h"
#include "worker/internal/memory_reducer.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;
const std::vector<TensorDesc> kTensors = {{"a", {24}}, {"b", {40}}};

// One rank's parts, as WorkerParts wires them, without servers.
struct QueryRank {
  QueryRank(int rank, MemoryMean* mean, const std::shared_ptr<InProcFabric>& fabric,
            const std::function<void(WorkerOptions*)>& adjust)
      : ctx(Options(rank, adjust)), ddp(ctx.options.optimizer) {
    spec = MakeJobSpec(ctx.options, kWorld, kTensors, 1);
    auto layout = ValidateJobSpec(spec);
    EXPECT_TRUE(layout.ok()) << layout.status();
    ctx.layout = std::make_unique<Layout>(std::move(*layout));
    channel = std::make_unique<DataChannel>(&ctx, InProcTransport::Create(fabric));
    channel->SetShards(1);  // never connected: DDP's queries send nothing
    exchange = std::make_unique<BucketExchange>(&ctx, channel.get());
    exchange->Allocate();
    units = std::make_unique<FsdpUnits>(&ctx, channel.get());
    ddp.Init(static_cast<size_t>(ctx.layout->num_params()), /*holds=*/true);
    collectives = std::make_unique<JobCollectives>(&ctx, [mean, rank](size_t) {
      return absl::StatusOr<std::unique_ptr<Reducer>>(std::make_unique<MemoryReducer>(mean, rank));
    });
    control = std::make_unique<JobControl>(&ctx, &fleet);
    queries = std::make_unique<StateQueries>(StateQueryParts{
        &ctx, exchange.get(), units.get(), &ddp, collectives.get(), control.get(), &fleet, &spec});
    ModelBuffers& b = exchange->buffers();
    for (size_t i = 0; i < b.params.size(); ++i) b.params[i] = 0.25f * static_cast<float>(i);
  }
  ~QueryRank() { channel.reset(); }

  static WorkerOptions Options(int rank, const std::function<void(WorkerOptions*)>& adjust) {
    WorkerOptions o;
    o.job = "queries";
    o.rank = rank;
    o.world_size = kWorld;
    o.strategy = Strategy::kDdp;
    o.align_elems = 8;
    if (adjust) adjust(&o);
    return o;
  }

  JobContext ctx;
  v1::JobSpec spec;
  ShardFleet fleet;  // no servers
  std::unique_ptr<DataChannel> channel;
  std::unique_ptr<BucketExchange> exchange;
  std::unique_ptr<FsdpUnits> units;
  DdpState ddp;
  std::unique_ptr<JobCollectives> collectives;
  std::unique_ptr<JobControl> control;
  std::unique_ptr<StateQueries> queries;
};

class StateQueriesTest : public ::testing::Test {
 protected:
  void Make(const std::function<void(WorkerOptions*)>& adjust = nullptr) {
    for (int r = 0; r < kWorld; ++r) {
      ranks_.push_back(std::make_unique<QueryRank>(r, &mean_, fabric_, adjust));
    }
  }
  // `body` on every rank at once.
  void OnRanks(const std::function<void(QueryRank&, int rank)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) threads.emplace_back([&, r] { body(*ranks_[r], r); });
    for (auto& t : threads) t.join();
  }

  MemoryMean mean_{kWorld};
  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  std::vector<std::unique_ptr<QueryRank>> ranks_;
};

TEST_F(StateQueriesTest, GradientsAndMetricsAreAveragedOverTheRanks) {
  Make([&](WorkerOptions* o) {
    o->early_stop_hook = [](double mean, const EarlyStopping&) { return mean > 1.5; };
  });
  OnRanks([&](QueryRank& q, int rank) {
    PayloadVector<float>& grads = q.exchange->buffers().grads;
    std::fill(grads.begin(), grads.end(), static_cast<float>(rank + 1));
    auto synced = q.queries->SynchronizeGradients();
    ASSERT_TRUE(synced.ok()) << synced.status();
    ASSERT_EQ(synced->size(), grads.size());
    for (float g : *synced) ASSERT_EQ(g, 1.5f);
    EXPECT_EQ(grads[0], static_cast<float>(rank + 1));  // the buffer is the caller's still

    auto stop = q.queries->ReportMetric(rank == 0 ? 1.f : 2.f);  // mean 1.5: go on
    ASSERT_TRUE(stop.ok()) << stop.status();
    EXPECT_FALSE(*stop);
    stop = q.queries->ReportMetric(rank == 0 ? 1.f : 3.f);  // mean 2: stop, on both
    ASSERT_TRUE(stop.ok()) << stop.status();
    EXPECT_TRUE(*stop);
    EXPECT_TRUE(q.queries->ShouldEarlyStop());
  });
  auto stats = ranks_[0]->queries->ServerStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->empty());  // no shard servers
}

TEST_F(StateQueriesTest, ADriftedRankIsFoundAndGivenRankZerosState) {
  Make();
  ranks_[1]->exchange->buffers().params[5] += 1.f;
  OnRanks([&](QueryRank& q, int) {
    auto report = q.queries->SynchronizeOptimizerState();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_FALSE(report->consistent);
    EXPECT_EQ(report->repaired_ranks, std::vector<int>{1});
    EXPECT_EQ(report->digests.size(), 2u);
    EXPECT_NE(report->digests[0], report->digests[1]);
    report = q.queries->SynchronizeOptimizerState();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->consistent);
  });
  EXPECT_EQ(ranks_[1]->exchange->buffers().params[5], 1.25f);

  // Ranks at different steps are told so, on every rank, and nothing changes.
  ranks_[1]->ctx.step = 1;
  OnRanks([&](QueryRank& q, int) {
    absl::Status s = q.queries->SynchronizeOptimizerState().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("at the same step"));
  });
}

TEST_F(StateQueriesTest, ABlobRoundTripsAndABadOneOnAnyRankChangesNothing) {
  Make();
  std::vector<std::string> blobs(kWorld);
  OnRanks([&](QueryRank& q, int rank) {
    auto blob = q.queries->Serialize();
    ASSERT_TRUE(blob.ok()) << blob.status();
    blobs[rank] = *blob;
  });
  for (auto& q : ranks_) {
    std::fill(q->exchange->buffers().params.begin(), q->exchange->buffers().params.end(), 9.f);
  }
  OnRanks([&](QueryRank& q, int rank) {
    absl::Status s = q.queries->Deserialize(rank == 1 ? std::string("not a blob") : blobs[rank]);
    EXPECT_FALSE(s.ok());
    if (rank == 0) {
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("failed on another rank"));
    } else {
      EXPECT_THAT(std::string(s.message()), HasSubstr("Deserialize: "));
    }
    EXPECT_EQ(q.exchange->buffers().params[3], 9.f);  // nothing changed
  });
  OnRanks([&](QueryRank& q, int rank) {
    absl::Status s = q.queries->Deserialize(blobs[rank]);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(q.exchange->buffers().params[3], 0.75f);
  });
}

TEST_F(StateQueriesTest, LoadParametersReplacesThemKeepingTheStepOnEveryRankOrNone) {
  Make();
  for (auto& q : ranks_) q->ctx.step = 4;
  const size_t n = ranks_[0]->exchange->buffers().params.size();
  OnRanks([&](QueryRank& q, int rank) {
    std::vector<float> values(rank == 1 ? n - 1 : n, 2.f);
    absl::Status s = q.queries->LoadParameters(values);
    EXPECT_EQ(s.code(), rank == 1 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kAborted)
        << s;
    EXPECT_EQ(q.exchange->buffers().params[1], 0.25f);
  });
  OnRanks([&](QueryRank& q, int) {
    absl::Status s = q.queries->LoadParameters(std::vector<float>(n, 2.f));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(q.exchange->buffers().params[1], 2.f);
    EXPECT_EQ(q.ctx.step, 4);
  });
}

}  // namespace
}  // namespace tessel::internal
