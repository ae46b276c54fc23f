#include "tools/internal/hybrid_mlp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/reduce.h"
#include "core/status_macros.h"
#include "model/layer_kernels.h"
#include "worker/train_flags.h"

ABSL_FLAG(int, dp, 1, "hybrid: data-parallel replicas");
ABSL_FLAG(int, tp, 1, "hybrid: tensor-parallel ranks per pipeline stage");
ABSL_FLAG(int, pp, 1, "hybrid: pipeline stages");

namespace tessel {

namespace kernels = model::kernels;
using model::LayerSplit;

HybridConfig HybridConfigFromFlags() {
  HybridConfig c;
  c.dp = absl::GetFlag(FLAGS_dp);
  c.tp = absl::GetFlag(FLAGS_tp);
  c.pp = absl::GetFlag(FLAGS_pp);
  c.micro_batches = absl::GetFlag(FLAGS_micro_batches);
  return c;
}

absl::StatusOr<model::SplitMlp> ValidateHybrid(const HybridConfig& config, int world_size,
                                               const MlpJobConfig& mlp) {
  TESSEL_RETURN_IF_ERROR(ValidateHybridConfig(config, world_size));
  TESSEL_ASSIGN_OR_RETURN(model::SplitMlp split,
                          model::SplitMlp::Create(mlp.layers, config.tp, config.pp));
  if (split.num_layers() > 4095) {
    return absl::InvalidArgumentError("at most 4095 layers (the message tags' layer field)");
  }
  if (mlp.batch % config.micro_batches != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch=", mlp.batch, " is not divisible by --micro_batches=", config.micro_batches,
        ": each micro-batch takes batch/micro_batches rows; choose a batch that is a multiple of "
        "micro_batches"));
  }
  return split;
}

HybridMlpStage::HybridMlpStage(const model::SplitMlp& split, const HybridConfig& config, int rank,
                               PeerGroup* peers)
    : split_(split),
      config_(config),
      rank_(rank),
      pipeline_(peers, config, rank),
      first_layer_(split.stage_begin(pipeline_.coords().p)),
      end_layer_(split.stage_end(pipeline_.coords().p)) {}

absl::StatusOr<float> HybridMlpStage::Step(
    int64_t step, absl::Span<const float> params, const float* x, const int32_t* y, int batch,
    absl::Span<float> grads, const std::function<absl::Status(int64_t, int64_t)>& on_ready) {
  const int p = pipeline_.coords().p;
  const size_t n = split_.partition_size(p);
  if (params.size() != n || grads.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeRank(config_, rank_), ": partition of stage ", p, " has ", n,
                     " parameters; got params of ", params.size(), " and grads of ", grads.size()));
  }
  if (batch < 1 || batch % config_.micro_batches != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " is not a multiple of ",
                                                   config_.micro_batches, " micro-batches"));
  }
  if ((pipeline_.first_stage() && x == nullptr) || (pipeline_.last_stage() && y == nullptr)) {
    return absl::InvalidArgumentError("stage 0 needs x and the last stage needs y");
  }
  step_ = step;
  rows_ = batch / config_.micro_batches;
  params_ = params.data();
  x_ = x;
  y_ = y;
  grads_ = grads.data();
  on_ready_ = &on_ready;
  loss_sum_ = 0;
  micro_.assign(config_.micro_batches, MicroBatch{});
  scratch_grads_.resize(n);
  StageFunctions f;
  f.input_size = static_cast<int64_t>(rows_) * split_.stage_in(p);
  f.output_size = static_cast<int64_t>(rows_) * split_.stage_out(p);
  f.forward = [this](int j, std::vector<float> in) { return Forward(j, std::move(in)); };
  f.backward = [this](int j, std::vector<float> d) { return Backward(j, std::move(d)); };
  absl::Status s = pipeline_.Step(step, f);
  micro_.clear();
  if (!s.ok()) return s;
  return pipeline_.last_stage() ? loss_sum_ / static_cast<float>(config_.micro_batches) : 0.0f;
}

absl::StatusOr<std::vector<float>> HybridMlpStage::Forward(int j, std::vector<float> input) {
  MicroBatch& mb = micro_[j];
  const size_t m = static_cast<size_t>(rows_);
  if (pipeline_.first_stage()) {
    mb.input = x_ + static_cast<size_t>(j) * m * split_.model().num_inputs();
  } else {
    mb.received = std::move(input);
    mb.input = mb.received.data();
  }
  mb.activations.resize(end_layer_ - first_layer_);
  const float* in = mb.input;
  for (int l = first_layer_; l < end_layer_; ++l) {
    const bool relu = l + 1 < split_.num_layers();
    const float* w = params_ + split_.weight(l).offset;
    const float* b = params_ + split_.bias(l).offset;
    std::vector<float>& out = mb.activations[l - first_layer_];
    out.resize(m * split_.local_out(l));
    if (split_.split(l) == LayerSplit::kRow) {
      // Only tensor rank 0's partial starts from the bias.
      kernels::Linear(rows_, split_.local_in(l), split_.local_out(l), in, w,
                      pipeline_.coords().t == 0 ? b : nullptr, out.data(), &scratch_);
      TESSEL_RETURN_IF_ERROR(pipeline_.SumOverTensorGroup(TensorSum::kForward, step_, j, l,
                                                          absl::MakeSpan(out),
                                                          absl::StrCat("fc", l, "'s output")));
    } else {
      kernels::Linear(rows_, split_.local_in(l), split_.local_out(l), in, w, b, out.data(),
                      &scratch_);
    }
    if (relu) kernels::Relu(out.data(), out.size());
    in = out.data();
  }
  // The stage's output feeds nothing else here: backward needs only inputs.
  std::vector<float> output = std::move(mb.activations.back());
  if (!pipeline_.last_stage()) return output;
  const int classes = split_.model().num_classes();
  std::vector<float> d_logits(m * classes);
  loss_sum_ += kernels::SoftmaxCrossEntropy(output.data(), y_ + static_cast<size_t>(j) * m, rows_,
                                            classes, d_logits.data());
  return d_logits;
}

absl::StatusOr<std::vector<float>> HybridMlpStage::Backward(int j, std::vector<float> d) {
  MicroBatch& mb = micro_[j];
  const size_t m = static_cast<size_t>(rows_);
  const bool first = j == 0;
  const bool final_micro = j + 1 == config_.micro_batches;
  float* target = first ? grads_ : scratch_grads_.data();
  // d: d(loss)/d(pre-activation output of layer l)
  for (int l = end_layer_ - 1; l >= first_layer_; --l) {
    const int in = split_.local_in(l);
    const int out = split_.local_out(l);
    const float* input = l == first_layer_ ? mb.input : mb.activations[l - 1 - first_layer_].data();
    const model::TensorInfo& wt = split_.weight(l);
    const model::TensorInfo& bt = split_.bias(l);
    kernels::BiasGrad(rows_, out, d.data(), target + bt.offset);
    kernels::WeightGrad(rows_, in, out, d.data(), input, target + wt.offset, &scratch_);
    // Micro-batch order: g_0 is written in place, g_1, g_2, ... added, then
    // the sum divided by the count once the last one is in.
    for (const model::TensorInfo* t : {&bt, &wt}) {
      float* acc = grads_ + t->offset;
      if (!first) {
        const float* add = scratch_grads_.data() + t->offset;
        for (size_t e = 0; e < t->numel; ++e) acc[e] += add[e];
      }
      if (final_micro) {
        const float count = static_cast<float>(config_.micro_batches);
        for (size_t e = 0; e < t->numel; ++e) acc[e] /= count;
        TESSEL_RETURN_IF_ERROR((*on_ready_)(static_cast<int64_t>(t->offset),
                                            static_cast<int64_t>(t->offset + t->numel)));
      }
    }
    if (l == 0) break;  // nobody needs d(loss)/d(x)
    std::vector<float> dx(m * in);
    kernels::InputGrad(rows_, in, out, d.data(), params_ + wt.offset, dx.data());
    if (split_.split(l) == LayerSplit::kColumn) {
      TESSEL_RETURN_IF_ERROR(
          pipeline_.SumOverTensorGroup(TensorSum::kBackward, step_, j, l, absl::MakeSpan(dx),
                                       absl::StrCat("fc", l, "'s input gradient")));
    }
    kernels::ReluMask(input, dx.data(), dx.size());
    d = std::move(dx);
  }
  micro_[j] = MicroBatch{};  // its activations are no longer needed
  return d;                  // stage 0's goes nowhere
}

absl::StatusOr<std::vector<float>> TrainHybridReference(const MlpJob& job,
                                                        const OptimizerParams& optimizer,
                                                        const HybridConfig& config, int steps,
                                                        std::optional<HalfType> half) {
  TESSEL_ASSIGN_OR_RETURN(model::SplitMlp split,
                          ValidateHybrid(config, config.world(), job.config()));
  std::vector<float> full(job.model().num_params());
  job.Init(full.data());
  const int partitions = config.pp * config.tp;
  std::vector<std::vector<float>> parts;
  for (int p = 0; p < config.pp; ++p) {
    for (int t = 0; t < config.tp; ++t) parts.push_back(split.Slice(full, p, t));
  }
  // Optimizer state per partition, as each partition job's servers keep it.
  std::vector<std::vector<std::vector<float>>> state(partitions);
  for (int i = 0; i < partitions; ++i) {
    state[i].assign(StateSlots(optimizer), std::vector<float>(parts[i].size(), 0.0f));
    float* ptrs[kMaxStateSlots] = {};
    for (size_t k = 0; k < state[i].size(); ++k) ptrs[k] = state[i][k].data();
    InitState(optimizer, ptrs, parts[i].size());
  }
  std::vector<std::vector<std::vector<float>>> grads(config.dp);
  // Mixed precision: every process computes from its partition's masters
  // rounded to half (what it pulls), and pushes its gradients rounded to half
  // after the micro-batch accumulation. Without `half` both are the masters
  // and the fp32 gradients themselves.
  std::vector<std::vector<float>> working = parts;
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < partitions; ++i) {
      working[i] = parts[i];
      RoundTrip(half, working[i].data(), working[i].size());
    }
    for (int d = 0; d < config.dp; ++d) {
      model::Dataset b = job.Batch(step, d, config.dp);
      split.ReferenceGradients(working, b.x.data(), b.y.data(), job.config().batch,
                               config.micro_batches, &grads[d]);
      for (std::vector<float>& g : grads[d]) RoundTrip(half, g.data(), g.size());
    }
    for (int i = 0; i < partitions; ++i) {
      const size_t n = parts[i].size();
      std::vector<const float*> srcs(config.dp);
      for (int d = 0; d < config.dp; ++d) srcs[d] = grads[d][i].data();
      std::vector<float> mean(n);
      ReduceMean(srcs.data(), config.dp, mean.data(), n);
      float* ptrs[kMaxStateSlots] = {};
      for (size_t k = 0; k < state[i].size(); ++k) ptrs[k] = state[i][k].data();
      ApplyUpdate(optimizer, step + 1, parts[i].data(), mean.data(), ptrs, n);
    }
  }
  for (std::vector<float>& part : parts) RoundTrip(half, part.data(), part.size());
  return split.Assemble(parts);
}

double NormRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

absl::StatusOr<HybridReferenceDiffs> CompareWithReferences(const MlpJob& job,
                                                           const OptimizerParams& optimizer,
                                                           const HybridConfig& config, int steps,
                                                           const std::vector<float>& final_params,
                                                           std::optional<HalfType> half) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> hybrid,
                          TrainHybridReference(job, optimizer, config, steps, half));
  HybridReferenceDiffs out;
  out.hybrid = MaxRelativeDifference(final_params, hybrid);
  const std::vector<float> same_micro =
      TrainReference(job, optimizer, config.dp, steps, half, config.micro_batches);
  const std::vector<float> whole = TrainReference(job, optimizer, config.dp, steps, half, 1);
  out.unsplit_same_micro_batches = MaxRelativeDifference(final_params, same_micro);
  out.unsplit_whole_batch = MaxRelativeDifference(final_params, whole);
  out.unsplit_same_micro_batches_norm = NormRelativeDifference(final_params, same_micro);
  out.unsplit_whole_batch_norm = NormRelativeDifference(final_params, whole);
  return out;
}

}  // namespace tessel
