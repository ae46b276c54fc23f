#include "core/job_name.h"

#include <limits>
#include <random>
#include <string>

#include "core/layout.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(JobNameTest, BuildersSpellTheGrammar) {
  EXPECT_EQ(GroupJobName("mlp", 0), "mlp");
  EXPECT_EQ(GroupJobName("mlp", 3), "mlp.g3");
  EXPECT_EQ(PartitionJobName("mlp", 12, 3), "mlp.p12.t3");
  EXPECT_EQ(MeshGroupName("mlp"), "mlp.mesh");
  EXPECT_EQ(HelperJobName("mlp", 65536, 12), "mlp~sync65536.e12");
  EXPECT_EQ(HelperJobName(PartitionJobName("mlp", 0, 1), 4, 3), "mlp.p0.t1~sync4.e3");
  EXPECT_EQ(HelperJobName(GroupJobName("mlp", 2), 8, 1), "mlp.g2~sync8.e1");
}

// Every combination the grammar allows, built and parsed back.
TEST(JobNameTest, EveryBuiltNameParsesBackToItsParts) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(0, 40);
  std::uniform_int_distribution<int64_t> big(0, 999999999);
  for (int i = 0; i < 2000; ++i) {
    const int group = (i & 1) ? 1 + small(rng) : 0;
    const int place = (i >> 1) % 3;  // none, partition, mesh
    const bool helper = ((i >> 3) & 1) && place != 2;
    const int stage = small(rng), shard = small(rng);
    const int64_t elements = big(rng), epoch = big(rng);
    std::string name = GroupJobName("job-1.x", group);
    if (place == 1) name = PartitionJobName(name, stage, shard);
    if (place == 2) name = MeshGroupName(name);
    if (helper) name = HelperJobName(name, elements, epoch);
    ASSERT_TRUE(ValidateJobName(name).ok()) << name;
    absl::StatusOr<DerivedSuffix> s = ParseDerivedSuffix(name.substr(7));
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    EXPECT_EQ(s->group, group) << name;
    EXPECT_EQ(s->mesh, place == 2) << name;
    ASSERT_EQ(s->partition.has_value(), place == 1) << name;
    if (place == 1) {
      EXPECT_EQ(s->partition->stage, stage);
      EXPECT_EQ(s->partition->tensor_shard, shard);
    }
    ASSERT_EQ(s->helper.has_value(), helper) << name;
    if (helper) {
      EXPECT_EQ(s->helper->elements, elements);
      EXPECT_EQ(s->helper->epoch, epoch);
    }
    EXPECT_TRUE(JobInScope("job-1.x", name)) << name;
    EXPECT_EQ(IsHelperJob(name), helper) << name;
  }
}

// The largest numbers each builder takes parse back; one more does not.
TEST(JobNameTest, TheLargestNumbersRoundTrip) {
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  const std::string name =
      HelperJobName(PartitionJobName(GroupJobName("j", kMaxInt), kMaxInt, kMaxInt), kMax64, kMax64);
  absl::StatusOr<DerivedSuffix> s = ParseDerivedSuffix(name.substr(1));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->group, kMaxInt);
  EXPECT_EQ(s->partition->stage, kMaxInt);
  EXPECT_EQ(s->partition->tensor_shard, kMaxInt);
  EXPECT_EQ(s->helper->elements, kMax64);
  EXPECT_EQ(s->helper->epoch, kMax64);
  EXPECT_TRUE(IsHelperJob(name));
  EXPECT_TRUE(JobInScope("j", name));
  EXPECT_FALSE(ParseDerivedSuffix(".g2147483648").ok());                 // > int
  EXPECT_FALSE(ParseDerivedSuffix("~sync9223372036854775808.e1").ok());  // > int64
}

TEST(JobNameTest, AnythingElseIsRefusedAndNamesTheGrammar) {
  for (const char* suffix : {".v2",
                             ".g0",
                             ".g",
                             ".gx",
                             ".g01",
                             ".p1",
                             ".p.t1",
                             ".p1.t",
                             ".p1.tx",
                             ".mesh~sync4.e1",
                             ".mesh~x",
                             "~sync",
                             "~sync4",
                             "~syncX.e3",
                             "~sync4.e",
                             "~sync4.e3x",
                             "~x",
                             ".t1.p0",
                             "~sync4.e3.g1",
                             ".p0.t1.g1",
                             ".g1.g2",
                             ".g12345678901",
                             "2",
                             "-x",
                             ".mesh.p0.t0"}) {
    absl::StatusOr<DerivedSuffix> s = ParseDerivedSuffix(suffix);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << suffix;
    EXPECT_NE(s.status().message().find("[.g<N>] [.p<P>.t<T> | .mesh] [~sync<N>.e<E>]"),
              std::string::npos)
        << s.status();
  }
}

TEST(JobNameTest, ScopeCoversTheJobAndWhatIsDerivedFromIt) {
  EXPECT_TRUE(JobInScope("mlp", "mlp"));
  EXPECT_TRUE(JobInScope("mlp", "mlp~sync4.e3"));
  EXPECT_TRUE(JobInScope("mlp", "mlp.mesh"));
  EXPECT_TRUE(JobInScope("mlp", "mlp.p0.t1"));
  EXPECT_TRUE(JobInScope("mlp", "mlp.p12.t3~sync8.e1"));
  EXPECT_TRUE(JobInScope("mlp", "mlp.g1"));  // tessel.torch's second parameter group
  EXPECT_TRUE(JobInScope("mlp", "mlp.g2~sync8.e1"));
  EXPECT_FALSE(JobInScope("mlp", "mlp2"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.v2"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.mesh~x"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.g"));
  EXPECT_FALSE(JobInScope("mlp", "ml"));
  EXPECT_FALSE(JobInScope("mlp", "bert"));
  EXPECT_FALSE(JobInScope("", "mlp"));
}

TEST(JobNameTest, BuffersJobIsTheModelsAndTakesOnlyHelpers) {
  EXPECT_EQ(BuffersJobName("mlp"), "mlp.buffers");
  absl::StatusOr<DerivedSuffix> s = ParseDerivedSuffix(".buffers");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->buffers);
  EXPECT_EQ(s->group, 0);
  s = ParseDerivedSuffix(".buffers~sync4.e1");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->buffers && s->helper.has_value());
  for (const char* bad : {".buffers.g1", ".g1.buffers", ".buffers.mesh", ".buffers.p0.t0",
                          ".p0.t0.buffers", ".buffers.buffers", ".buffersx"}) {
    EXPECT_FALSE(ParseDerivedSuffix(bad).ok()) << bad;
  }
  EXPECT_TRUE(JobInScope("mlp", "mlp.buffers"));
  EXPECT_TRUE(JobInScope("mlp", "mlp.buffers~sync8.e0"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.g1.buffers"));
  EXPECT_FALSE(IsHelperJob("mlp.buffers"));
}

TEST(JobNameTest, HelperJobsAreNamedByTheirLastPart) {
  EXPECT_TRUE(IsHelperJob("mlp~sync4.e3"));
  EXPECT_TRUE(IsHelperJob("mlp.p0.t1~sync65536.e12"));
  EXPECT_TRUE(IsHelperJob("mlp.g1~sync4.e0"));
  EXPECT_TRUE(IsHelperJob("a~b~sync4.e3"));  // J may hold '~' itself
  EXPECT_FALSE(IsHelperJob("mlp"));
  EXPECT_FALSE(IsHelperJob("mlp~sync4"));
  EXPECT_FALSE(IsHelperJob("~sync4.e3"));
  EXPECT_FALSE(IsHelperJob("mlp~syncX.e3"));
  EXPECT_FALSE(IsHelperJob("mlp~sync4.e3.g1"));
}

TEST(JobNameTest, MeshGroupsAreTheMeshNamesOfJobs) {
  EXPECT_TRUE(IsMeshGroup(MeshGroupName("mlp")));
  EXPECT_TRUE(IsMeshGroup("a.b.mesh"));
  EXPECT_FALSE(IsMeshGroup(".mesh"));
  EXPECT_FALSE(IsMeshGroup("mlp"));
  EXPECT_FALSE(IsMeshGroup("mlp.mesh~sync4.e1"));
  EXPECT_FALSE(IsMeshGroup("mlp.meshy"));
}

}  // namespace
}  // namespace tessel
