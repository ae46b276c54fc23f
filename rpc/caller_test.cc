// Caller and Grant (rpc/caller.h): what a worker's job scope covers, by
// core/job_name.h's grammar of derived names.
#include "rpc/caller.h"

#include <gtest/gtest.h>

#include "core/job_name.h"

namespace tessel {
namespace {

TEST(JobScopeTest, TheJobAndTheNamesTheSdkDerives) {
  EXPECT_TRUE(JobInScope("mlp", "mlp"));
  EXPECT_TRUE(JobInScope("mlp", "mlp~sync4.e3"));         // reducer helper job
  EXPECT_TRUE(JobInScope("mlp", "mlp.mesh"));             // hybrid mesh group
  EXPECT_TRUE(JobInScope("mlp", "mlp.p0.t1"));            // hybrid partition job
  EXPECT_TRUE(JobInScope("mlp", "mlp.p12.t3~sync8.e1"));  // its helper job
  EXPECT_FALSE(JobInScope("mlp", "mlp2"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.v2"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.mesh~x"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.p.t1"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.p1.t"));
  EXPECT_FALSE(JobInScope("mlp", "ml"));
  EXPECT_FALSE(JobInScope("mlp", "bert"));
  EXPECT_FALSE(JobInScope("", "mlp"));
  EXPECT_TRUE(IsHelperJob("mlp~sync4.e3"));
  EXPECT_TRUE(IsHelperJob("mlp.p0.t1~sync65536.e12"));
  EXPECT_FALSE(IsHelperJob("mlp"));
  EXPECT_FALSE(IsHelperJob("mlp~sync4"));
  EXPECT_FALSE(IsHelperJob("~sync4.e3"));
  EXPECT_FALSE(IsHelperJob("mlp~syncX.e3"));
}

// tessel.torch's parameter groups are jobs "J", "J.g1", ... (and their helper
// jobs): a worker scoped to J covers them all.
TEST(CallerTest, ScopedWorkerCoversGroupsPartitionsAndHelpers) {
  Caller c;
  c.grants.push_back({Role::kWorker, {"mlp"}, "token"});
  EXPECT_TRUE(c.MayActOnJob("mlp"));
  EXPECT_TRUE(c.MayActOnJob("mlp.g1"));
  EXPECT_TRUE(c.MayActOnJob("mlp.g1~sync8.e1"));
  EXPECT_TRUE(c.MayActOnJob("mlp.g2.p0.t1"));
  EXPECT_TRUE(c.MayActOnJob("mlp.mesh"));
  EXPECT_FALSE(c.MayActOnJob("mlp2"));
  EXPECT_FALSE(c.MayActOnJob("mlp.g01"));
  EXPECT_FALSE(c.MayActOnJob("bert.g1"));
  EXPECT_TRUE(c.grants[0].Covers(""));  // RPCs about no job
  EXPECT_TRUE(c.Has(Role::kWorker));
  EXPECT_FALSE(c.Has(Role::kAdmin));
}

TEST(CallerTest, AdminAndUnscopedWorkerCoverEveryJob) {
  Caller admin;
  admin.grants.push_back({Role::kAdmin, {}, "token"});
  EXPECT_TRUE(admin.MayActOnJob("anything"));
  Caller worker;
  worker.grants.push_back({Role::kWorker, {}, "certificate CN=x, O=tessel:worker"});
  EXPECT_TRUE(worker.MayActOnJob("anything.g3"));
  Caller reader;
  reader.grants.push_back({Role::kReader, {}, "token"});
  EXPECT_FALSE(reader.MayActOnJob("anything"));  // a reader acts on no job
  EXPECT_FALSE(Caller().MayActOnJob("anything"));
}

}  // namespace
}  // namespace tessel
