// The checks before a shard server creates or restores a job, with the
// machine's memory and the checkpoint's manifest supplied by the test.
#include "server/job_admission.h"

#include <string>

#include "gtest/gtest.h"
#include "rpc/job_spec.h"

namespace tessel {
namespace {

// Zero2 over 4 ranks of one tensor of `elements` floats, trained with Adam.
v1::JobSpec Spec(int64_t elements = 1000) {
  v1::JobSpec spec;
  spec.set_job("adm");
  spec.set_strategy(v1::STRATEGY_ZERO2);
  spec.set_world_size(4);
  spec.set_num_shards(1);
  spec.set_bucket_bytes(4096);
  v1::TensorSpec* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(elements);
  w->set_dtype(v1::DTYPE_F32);
  OptimizerParams adam;
  adam.kind = OptimizerParams::Kind::kAdam;
  adam.lr = 1e-3f;
  *spec.mutable_optimizer() = OptimizerToProto(adam);
  return spec;
}

// A checkpoint of `spec` at `step`.
Manifest ManifestOf(const v1::JobSpec& spec, int64_t step = 3) {
  Manifest m;
  m.job = spec.job();
  m.step = step;
  m.num_shards = spec.num_shards();
  absl::StatusOr<Layout> layout = ValidateJobSpec(spec);
  m.num_params = layout.ok() ? layout->num_params() : 0;
  absl::StatusOr<std::string> json = JobSpecToJson(spec);
  m.spec_json = json.ok() ? *json : "";
  return m;
}

TEST(JobAdmissionTest, AShardMustFitInHalfTheMemory) {
  const v1::JobSpec spec = Spec(1000);
  absl::StatusOr<Layout> layout = ValidateJobSpec(spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<OptimizerParams> adam = OptimizerFromProto(spec.optimizer());
  ASSERT_TRUE(adam.ok()) << adam.status();
  // 1000 elements x (two served versions of the masters + 2 Adam slots + 4
  // rank buffers) x 4 bytes.
  const double need = 1000.0 * 4 * (2 + 2 + 4);
  EXPECT_TRUE(CheckShardFits(spec, 0, *layout, *adam, 2 * need).ok());
  const absl::Status s = CheckShardFits(spec, 0, *layout, *adam, 2 * need - 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("use more shard servers"), std::string::npos) << s;
  EXPECT_TRUE(CheckShardFits(spec, 0, *layout, *adam, 0).ok()) << "unknown memory: not checked";
  // DDP keeps one buffer (the mean it serves), not two versions.
  v1::JobSpec ddp = spec;
  ddp.set_strategy(v1::STRATEGY_DDP);
  const double ddp_need = 1000.0 * 4 * (1 + 2 + 4);
  EXPECT_TRUE(CheckShardFits(ddp, 0, *layout, *adam, 2 * ddp_need).ok());
  EXPECT_FALSE(CheckShardFits(ddp, 0, *layout, *adam, 2 * ddp_need - 1).ok());
  EXPECT_GT(PhysicalMemoryBytes(), 0);
}

TEST(JobAdmissionTest, TheSameSpecRestoresItsCheckpoint) {
  EXPECT_TRUE(CheckRestorable(Spec(), ManifestOf(Spec())).ok());
}

TEST(JobAdmissionTest, RefusesWhatCannotRestoreNamingWhy) {
  v1::JobSpec ddp = Spec();
  ddp.set_strategy(v1::STRATEGY_DDP);
  EXPECT_EQ(CheckRestorable(ddp, ManifestOf(Spec())).code(), absl::StatusCode::kFailedPrecondition);

  Manifest unreadable = ManifestOf(Spec());
  unreadable.spec_json = "{not json";
  EXPECT_EQ(CheckRestorable(Spec(), unreadable).code(), absl::StatusCode::kDataLoss);

  const absl::Status other_model = CheckRestorable(Spec(2000), ManifestOf(Spec(1000)));
  EXPECT_EQ(other_model.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other_model.message().find("differ"), std::string::npos) << other_model;

  Manifest short_one = ManifestOf(Spec());
  short_one.num_params = 999;
  EXPECT_EQ(CheckRestorable(Spec(), short_one).code(), absl::StatusCode::kFailedPrecondition);

  Manifest bad_skips = ManifestOf(Spec(), /*step=*/3);
  bad_skips.tensor_skips = {4};  // skipped in more steps than were taken
  EXPECT_EQ(CheckRestorable(Spec(), bad_skips).code(), absl::StatusCode::kDataLoss);

  v1::JobSpec invalid = Spec();
  invalid.set_world_size(0);
  Manifest of_invalid = ManifestOf(Spec());
  of_invalid.spec_json = *JobSpecToJson(invalid);
  EXPECT_EQ(CheckRestorable(invalid, of_invalid).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessel
