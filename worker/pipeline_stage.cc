#include "worker/pipeline_stage.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "worker/collectives.h"

namespace tessel {
namespace {

// The tag's micro-batch and index fields have 12 bits (HybridTag).
constexpr int kMaxSumIndex = 4095;

}  // namespace

PipelineStage::PipelineStage(PeerGroup* peers, const HybridConfig& config, int rank)
    : peers_(peers),
      config_(config),
      rank_(rank),
      coords_(CoordsOf(config, rank)),
      tensor_group_(TensorGroup(config, rank)),
      prev_(PrevStageRank(config, rank)),
      next_(NextStageRank(config, rank)) {}

std::string PipelineStage::Where(int j) const {
  return absl::StrCat("step ", step_, " micro-batch ", j);
}

absl::Status PipelineStage::CheckSize(const std::vector<float>& v, int64_t expected, int j,
                                      absl::string_view what) const {
  if (expected < 0 || static_cast<int64_t>(v.size()) == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(DescribeRank(config_, rank_), ": ", what, " of ",
                                                 Where(j), " returned ", v.size(),
                                                 " floats, expected ", expected));
}

absl::Status PipelineStage::Step(int64_t step, const StageFunctions& functions) {
  if (!functions.forward || !functions.backward) {
    return absl::InvalidArgumentError("PipelineStage::Step needs both forward and backward");
  }
  if (step < 0 || step >= kMaxHybridSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " is outside [0, ", kMaxHybridSteps, ")"));
  }
  step_ = step;
  loss_grads_.assign(last_stage() ? config_.micro_batches : 0, {});
  for (const PipelineOp& op : OneFOneBSchedule(coords_.p, config_.pp, config_.micro_batches)) {
    TESSEL_RETURN_IF_ERROR(op.forward ? Forward(op.micro_batch, functions)
                                      : Backward(op.micro_batch, functions));
  }
  loss_grads_.clear();
  return absl::OkStatus();
}

absl::Status PipelineStage::Forward(int j, const StageFunctions& f) {
  std::vector<float> input;
  if (prev_ >= 0) {
    TESSEL_ASSIGN_OR_RETURN(
        std::vector<float> in,
        peers_->Recv(prev_, HybridTag(HybridMessage::kActivation, step_, j, coords_.p - 1),
                     absl::StrCat("the activation of ", Where(j), " from stage ", coords_.p - 1),
                     f.input_size));
    input = std::move(in);
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> out, f.forward(j, std::move(input)));
  if (last_stage()) {
    TESSEL_RETURN_IF_ERROR(
        CheckSize(out, f.output_size, j, "forward (d(loss)/d(output), output_size)"));
    loss_grads_[j] = std::move(out);
    return absl::OkStatus();
  }
  TESSEL_RETURN_IF_ERROR(CheckSize(out, f.output_size, j, "forward (the activation, output_size)"));
  return peers_->Send(next_, HybridTag(HybridMessage::kActivation, step_, j, coords_.p),
                      std::move(out));
}

absl::Status PipelineStage::Backward(int j, const StageFunctions& f) {
  std::vector<float> d;
  if (last_stage()) {
    d = std::move(loss_grads_[j]);
  } else {
    TESSEL_ASSIGN_OR_RETURN(
        std::vector<float> g,
        peers_->Recv(
            next_, HybridTag(HybridMessage::kActivationGrad, step_, j, coords_.p),
            absl::StrCat("the gradient of ", Where(j), "'s activation from stage ", coords_.p + 1),
            f.output_size));
    d = std::move(g);
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> dx, f.backward(j, std::move(d)));
  if (prev_ < 0) return absl::OkStatus();  // nobody needs d(loss)/d(stage 0's input)
  TESSEL_RETURN_IF_ERROR(CheckSize(dx, f.input_size, j, "backward (d(loss)/d(input), input_size)"));
  return peers_->Send(prev_, HybridTag(HybridMessage::kActivationGrad, step_, j, coords_.p - 1),
                      std::move(dx));
}

absl::Status PipelineStage::SumOverTensorGroup(TensorSum kind, int64_t step, int micro_batch,
                                               int index, absl::Span<float> data,
                                               absl::string_view what) {
  if (step < 0 || step >= kMaxHybridSteps || micro_batch < 0 || micro_batch > kMaxMicroBatches ||
      index < 0 || index > kMaxSumIndex) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SumOverTensorGroup(", what, "): step ", step, ", micro-batch ", micro_batch, ", index ",
        index, " outside the tag's range (step < 2^32, micro-batch and index in [0, 4095])"));
  }
  const HybridMessage message =
      kind == TensorSum::kForward ? HybridMessage::kForwardSum : HybridMessage::kBackwardSum;
  return AllReduceSum(*peers_, tensor_group_, HybridTag(message, step, micro_batch, index), data,
                      absl::StrCat("the tensor-parallel sum of ", what, ", step ", step,
                                   " micro-batch ", micro_batch));
}

absl::StatusOr<std::vector<float>> CollectPartitions(PeerGroup& peers, const HybridConfig& config,
                                                     int rank, const PartitionPlan& plan,
                                                     std::vector<float> mine, int64_t step) {
  if (plan.tp() != config.tp || plan.pp() != config.pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("CollectPartitions: the plan is for tp=", plan.tp(), " pp=", plan.pp(),
                     ", the job has tp=", config.tp, " pp=", config.pp));
  }
  const RankCoords me = CoordsOf(config, rank);
  const int partition = me.p * config.tp + me.t;
  if (rank != 0 && me.d != 0) return std::vector<float>();
  if (rank != 0) {
    TESSEL_RETURN_IF_ERROR(
        peers.Send(0, HybridTag(HybridMessage::kCollect, step, 0, partition), std::move(mine)));
    return std::vector<float>();
  }
  std::vector<std::vector<float>> parts(config.pp * config.tp);
  parts[0] = std::move(mine);
  for (int p = 0; p < config.pp; ++p) {
    for (int t = 0; t < config.tp; ++t) {
      const int i = p * config.tp + t;
      if (i == 0) continue;
      TESSEL_ASSIGN_OR_RETURN(
          std::vector<float> part,
          peers.Recv(RankOf(config, {0, p, t}), HybridTag(HybridMessage::kCollect, step, 0, i),
                     absl::StrCat("the final parameters of partition (stage ", p, ", tensor rank ",
                                  t, ")"),
                     static_cast<int64_t>(plan.partition_size(p))));
      parts[i] = std::move(part);
    }
  }
  return plan.Assemble(parts);
}

}  // namespace tessel
