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
  c.grants.push_back({Role::kWorker, {"mlp"}, "token", "token sha256:01"});
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
  admin.grants.push_back({Role::kAdmin, {}, "token", "token sha256:02"});
  EXPECT_TRUE(admin.MayActOnJob("anything"));
  Caller worker;
  worker.grants.push_back(
      {Role::kWorker, {}, "certificate CN=x, O=tessel:worker", "certificate CN=x,O=tessel:worker"});
  EXPECT_TRUE(worker.MayActOnJob("anything.g3"));
  Caller reader;
  reader.grants.push_back({Role::kReader, {}, "token", "token sha256:03"});
  EXPECT_FALSE(reader.MayActOnJob("anything"));  // a reader acts on no job
  EXPECT_FALSE(Caller().MayActOnJob("anything"));
}

// Issue 42, part 5: a name derived from the scope is the caller's only where
// nothing of it exists yet or its own credential created it; a scope that
// names the job itself, an unscoped worker and an admin reach it whoever
// created it.
TEST(CallerTest, DerivedNamesAreReachedOnlyWhereTheCredentialCreatedThem) {
  Caller a;
  a.grants.push_back({Role::kWorker, {"A"}, "token", "token sha256:aa"});
  EXPECT_EQ(a.Identity(), "token sha256:aa");
  EXPECT_TRUE(a.MayActOnJob("A.g1"));                      // nothing exists yet
  EXPECT_TRUE(a.MayActOnJob("A.g1", "token sha256:aa"));   // its own
  EXPECT_FALSE(a.MayActOnJob("A.g1", "token sha256:bb"));  // another tenant's
  EXPECT_FALSE(a.MayActOnJob("A.g1", ""));                 // nobody's on record
  EXPECT_TRUE(a.MayActOnJob("A", "token sha256:bb"));      // its scope names A
  EXPECT_TRUE(a.ReachesOnlyByDerivation("A.g1"));
  EXPECT_FALSE(a.ReachesOnlyByDerivation("A"));
  EXPECT_FALSE(a.ReachesOnlyByDerivation("B"));  // not reached at all

  Caller x;  // the tenant whose job is literally "A.g1"
  x.grants.push_back({Role::kWorker, {"A.g1"}, "token", "token sha256:bb"});
  EXPECT_TRUE(x.MayActOnJob("A.g1", "token sha256:aa"));
  EXPECT_FALSE(x.ReachesOnlyByDerivation("A.g1"));

  Caller unscoped;
  unscoped.grants.push_back({Role::kWorker, {}, "token", "token sha256:cc"});
  EXPECT_TRUE(unscoped.MayActOnJob("A.g1", "token sha256:bb"));
  Caller admin;
  admin.grants.push_back({Role::kAdmin, {}, "token", "token sha256:dd"});
  EXPECT_TRUE(admin.MayActOnJob("A.g1", "token sha256:bb"));
  EXPECT_FALSE(admin.ReachesOnlyByDerivation("A.g1"));

  // A token and a certificate together: one identity, both named once.
  Caller both;
  both.grants.push_back({Role::kWorker, {"A"}, "token", "token sha256:aa"});
  both.grants.push_back({Role::kWorker, {"A"}, "certificate", "certificate CN=worker:A"});
  both.grants.push_back({Role::kReader, {}, "certificate", "certificate CN=worker:A"});
  EXPECT_EQ(both.Identity(), "token sha256:aa + certificate CN=worker:A");
  EXPECT_TRUE(both.MayActOnJob("A.g1", both.Identity()));
  EXPECT_FALSE(both.MayActOnJob("A.g1", "token sha256:aa"));
  EXPECT_EQ(Caller().Identity(), "");
}

}  // namespace
}  // namespace tessel
