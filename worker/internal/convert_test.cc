// The SDK's option types in the protocol's words: every enum value has its
// proto counterpart, and the job spec a worker registers carries its
// options and tensors, so the servers' validation lays it out as the
// worker's options say.
#include "worker/internal/convert.h"

#include <set>

#include "gtest/gtest.h"
#include "rpc/job_spec.h"

namespace tessel::internal {
namespace {

TEST(ConvertTest, EveryStrategyAndPrecisionHasItsOwnProtoValue) {
  std::set<int> strategies;
  for (Strategy s : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kFsdp}) {
    EXPECT_NE(ToProto(s), v1::STRATEGY_UNSPECIFIED);
    strategies.insert(ToProto(s));
  }
  EXPECT_EQ(strategies.size(), 4u);
  EXPECT_EQ(ToProto(Precision::kFp32), v1::DTYPE_F32);
  EXPECT_EQ(ToProto(Precision::kFp16), v1::DTYPE_F16);
  EXPECT_EQ(ToProto(Precision::kBf16), v1::DTYPE_BF16);
}

TEST(ConvertTest, TheJobSpecCarriesTheOptionsAndLaysOutAsTheySay) {
  WorkerOptions o;
  o.job = "spec";
  o.strategy = Strategy::kFsdp;
  o.precision = Precision::kBf16;
  o.bucket_bytes = 256;
  o.align_elems = 16;
  o.topk_ratio = 0.25;
  o.fsdp_units = {0, 1};
  o.checkpoint.every_steps = 5;
  o.checkpoint.keep_last = 2;
  o.checkpoint.initial = true;
  const v1::JobSpec spec = MakeJobSpec(o, 3, {{"a", {8, 16}}, {"b", {32}}}, 2);
  EXPECT_EQ(spec.job(), "spec");
  EXPECT_EQ(spec.strategy(), v1::STRATEGY_FSDP);
  EXPECT_EQ(spec.world_size(), 3);
  EXPECT_EQ(spec.num_shards(), 2);
  ASSERT_EQ(spec.tensors_size(), 2);
  EXPECT_EQ(spec.tensors(0).name(), "a");
  EXPECT_EQ(spec.tensors(0).shape_size(), 2);
  EXPECT_EQ(spec.tensors(0).shape(1), 16);
  EXPECT_EQ(spec.tensors(1).dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(spec.bucket_bytes(), 256);
  EXPECT_EQ(spec.align_elems(), 16);
  EXPECT_DOUBLE_EQ(spec.compression().topk_ratio(), 0.25);
  EXPECT_EQ(spec.checkpoint().every_steps(), 5);
  EXPECT_EQ(spec.checkpoint().keep_last(), 2);
  EXPECT_TRUE(spec.checkpoint().initial());
  EXPECT_EQ(spec.unit_first_tensor_size(), 2);

  // Without compression the field stays unset; the servers lay it out.
  o.topk_ratio = 0;
  o.precision = Precision::kFp32;
  o.strategy = Strategy::kZero1;
  o.fsdp_units.clear();
  const v1::JobSpec plain = MakeJobSpec(o, 1, {{"w", {100}}}, 2);
  EXPECT_FALSE(plain.has_compression());
  auto layout = ValidateJobSpec(plain);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_params(), 100);
  EXPECT_EQ(layout->num_shards(), 2);
}

}  // namespace
}  // namespace tessel::internal
