#include "worker/internal/convert.h"

#include "rpc/job_spec.h"

namespace tessel::internal {

v1::Strategy ToProto(Strategy strategy) {
  switch (strategy) {
    case Strategy::kDdp:
      return v1::STRATEGY_DDP;
    case Strategy::kZero1:
      return v1::STRATEGY_ZERO1;
    case Strategy::kZero2:
      return v1::STRATEGY_ZERO2;
    case Strategy::kFsdp:
      return v1::STRATEGY_FSDP;
  }
  return v1::STRATEGY_UNSPECIFIED;
}

v1::DType ToProto(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return v1::DTYPE_F32;
    case Precision::kFp16:
      return v1::DTYPE_F16;
    case Precision::kBf16:
      return v1::DTYPE_BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

v1::CheckpointPolicy ToProto(const CheckpointPolicy& policy) {
  v1::CheckpointPolicy p;
  p.set_every_steps(policy.every_steps);
  p.set_keep_last(policy.keep_last);
  p.set_initial(policy.initial);
  return p;
}

v1::JobSpec MakeJobSpec(const WorkerOptions& o, int world_size,
                        const std::vector<TensorDesc>& tensors, int num_shards) {
  v1::JobSpec spec;
  spec.set_job(o.job);
  spec.set_strategy(ToProto(o.strategy));
  spec.set_world_size(world_size);
  spec.set_num_shards(num_shards);
  for (const TensorDesc& t : tensors) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (int64_t d : t.shape) ts->add_shape(d);
    ts->set_dtype(ToProto(o.precision));
  }
  *spec.mutable_optimizer() = OptimizerToProto(o.optimizer);
  spec.set_bucket_bytes(o.bucket_bytes);
  if (o.topk_ratio != 0) spec.mutable_compression()->set_topk_ratio(o.topk_ratio);
  spec.set_align_elems(o.align_elems);
  *spec.mutable_checkpoint() = ToProto(o.checkpoint);
  for (int u : o.fsdp_units) spec.add_unit_first_tensor(u);
  return spec;
}

}  // namespace tessel::internal
