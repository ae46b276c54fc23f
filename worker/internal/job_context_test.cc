// JobContext: the prefix every message starts with, which statuses a
// recovery repairs (tagged recoverable only with recovery on), the tag
// itself, the token from the environment, and the strategy predicates.
#include "worker/internal/job_context.h"

#include <cstdlib>

#include "core/wire.h"
#include "gtest/gtest.h"

namespace tessel::internal {
namespace {

WorkerOptions Options() {
  WorkerOptions o;
  o.job = "mlp";
  o.rank = 2;
  o.world_size = 4;
  return o;
}

TEST(JobContextTest, WhereNamesTheJobRankAndStepAndTheRegistryRankOnceTheyDiffer) {
  JobContext ctx(Options());
  ctx.step = 7;
  EXPECT_EQ(ctx.Where(), "job 'mlp' rank 2 step 7");
  EXPECT_EQ(ctx.WhereAnyThread(), "job 'mlp' rank 2");
  ctx.rank = 1;  // renumbered by an elastic recovery
  EXPECT_EQ(ctx.Where(), "job 'mlp' rank 1 (registry rank 2) step 7");
  EXPECT_EQ(ctx.WhereAnyThread(), "job 'mlp' rank 1 (registry rank 2)");
  EXPECT_EQ(ctx.id, 2);
  EXPECT_EQ(ctx.world_size, 4);
  EXPECT_EQ(ctx.job_id, JobId("mlp"));
}

TEST(JobContextTest, OnlyWhatARollbackRepairsIsTaggedAndOnlyWithRecoveryOn) {
  WorkerOptions o = Options();
  JobContext off(o);
  EXPECT_FALSE(IsRecoverable(off.Recoverable(absl::AbortedError("a worker left"))));
  o.recovery = true;
  JobContext on(o);
  for (absl::StatusCode code :
       {absl::StatusCode::kFailedPrecondition, absl::StatusCode::kNotFound,
        absl::StatusCode::kAborted, absl::StatusCode::kUnavailable, absl::StatusCode::kCancelled}) {
    absl::Status s = on.Recoverable(absl::Status(code, "why"));
    EXPECT_TRUE(IsRecoverable(s)) << s;
    EXPECT_EQ(s.code(), code);
    EXPECT_EQ(s.message(), "why");
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kInternal, absl::StatusCode::kDataLoss}) {
    EXPECT_FALSE(IsRecoverable(on.Recoverable(absl::Status(code, "why")))) << code;
  }
  EXPECT_TRUE(on.Recoverable(absl::OkStatus()).ok());
}

TEST(JobContextTest, TheTagTravelsWithTheStatusAndUntaggedDropsIt) {
  EXPECT_FALSE(IsRecoverable(absl::OkStatus()));
  EXPECT_TRUE(MarkRecoverable(absl::OkStatus()).ok());
  absl::Status tagged = MarkRecoverable(absl::UnavailableError("server gone"));
  EXPECT_TRUE(IsRecoverable(tagged));
  absl::Status plain = Untagged(tagged);
  EXPECT_FALSE(IsRecoverable(plain));
  EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(plain.message(), "server gone");
}

TEST(JobContextTest, TheTokenComesFromTheOptionsOrElseTheEnvironment) {
  ASSERT_EQ(setenv("TESSEL_TOKEN", "from-env", 1), 0);
  EXPECT_EQ(JobContext(Options()).token, "from-env");
  WorkerOptions o = Options();
  o.token = "given";
  EXPECT_EQ(JobContext(o).token, "given");
  ASSERT_EQ(unsetenv("TESSEL_TOKEN"), 0);
  EXPECT_EQ(JobContext(Options()).token, "");
}

TEST(JobContextTest, StrategyPredicates) {
  WorkerOptions o = Options();
  o.strategy = Strategy::kZero2;
  EXPECT_FALSE(JobContext(o).unit_grads());
  o.fsdp_units = {0, 3};
  EXPECT_TRUE(JobContext(o).unit_grads());  // per-unit zero2
  o.strategy = Strategy::kFsdp;
  EXPECT_TRUE(JobContext(o).fsdp());
  EXPECT_TRUE(JobContext(o).unit_grads());
  o.strategy = Strategy::kDdp;
  EXPECT_TRUE(JobContext(o).ddp());
  EXPECT_FALSE(JobContext(o).elastic());
  o.elastic_min_workers = 2;
  EXPECT_TRUE(JobContext(o).elastic());
}

}  // namespace
}  // namespace tessel::internal
