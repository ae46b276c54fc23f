#include "client/output.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/shard.pb.h"

namespace tessel::ctl {
namespace {

TEST(OutputTest, EnumWordDropsTheTypePrefix) {
  EXPECT_EQ(EnumWord("Role", "ROLE_SERVER"), "server");
  EXPECT_EQ(EnumWord("Kind", "SGD"), "sgd");
}

TEST(OutputTest, ProtoJsonUsesProtoNamesAndNumbers) {
  v1::ShardStats st;
  st.set_job("mlp");
  st.set_shard_index(1);
  st.set_num_params(int64_t{1} << 40);  // stays a number, not a string
  st.add_worker_ids(3);
  const nlohmann::json j = ProtoJson(st);
  EXPECT_EQ(j.at("job"), "mlp");
  EXPECT_EQ(j.at("shard_index"), 1);
  EXPECT_TRUE(j.at("num_params").is_number_integer());
  EXPECT_EQ(j.at("num_params").get<int64_t>(), int64_t{1} << 40);
  EXPECT_EQ(j.at("worker_ids"), nlohmann::json::array({3}));
  EXPECT_TRUE(j.contains("step"));  // unset fields carry their defaults
  EXPECT_EQ(j.at("step"), 0);
}

TEST(OutputTest, CheckpointHealthSaysSinceWhen) {
  v1::ShardStats st;
  st.set_checkpoint_failing_since(-1);
  EXPECT_EQ(CheckpointHealth(st), "");
  st.set_checkpoint_failing_since(20);
  st.set_checkpoint_error("disk full");
  const std::string h = CheckpointHealth(st);
  EXPECT_NE(h.find("since step 20"), std::string::npos) << h;
  EXPECT_NE(h.find("disk full"), std::string::npos) << h;
}

// A shard without elements takes no part in the job's steps: no step shown.
TEST(OutputTest, AShardWithoutElementsHasNoStep) {
  v1::ShardStats st;
  st.set_range_begin(12);
  st.set_range_end(12);
  st.set_step(0);
  EXPECT_TRUE(HoldsNoElements(st));
  EXPECT_EQ(ShardStep(st), "-");
  st.set_range_begin(0);
  st.set_step(5);
  EXPECT_FALSE(HoldsNoElements(st));
  EXPECT_EQ(ShardStep(st), "5");
}

TEST(OutputTest, YamlKeepsOrderAndTypes) {
  const nlohmann::json v = nlohmann::json::parse(R"({"b": 1, "a": ["x", true]})");
  const std::string y = ToYaml(v);
  EXPECT_NE(y.find("b: 1"), std::string::npos) << y;
  EXPECT_NE(y.find("- x"), std::string::npos) << y;
  EXPECT_NE(y.find("- true"), std::string::npos) << y;
}

// A float JSON writes with an exponent and no point ("2e-05", a straggler's
// lateness) is written as a YAML 1.1 float: PyYAML read "2e-05" as a string,
// so `tesselctl jobs -o yaml` and `-o json` disagreed (//tests:ctl_test).
TEST(OutputTest, YamlFloatsWithExponentsStayNumbers) {
  const nlohmann::json v = nlohmann::json::parse(R"({"a": 2e-05, "b": 1e+20, "c": 0.5, "d": 3})");
  const std::string y = ToYaml(v);
  EXPECT_NE(y.find("a: 2.0e-05"), std::string::npos) << y;
  EXPECT_NE(y.find("b: 1.0e+20"), std::string::npos) << y;
  EXPECT_NE(y.find("c: 0.5"), std::string::npos) << y;
  EXPECT_NE(y.find("d: 3"), std::string::npos) << y;
}

}  // namespace
}  // namespace tessel::ctl
