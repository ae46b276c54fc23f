#include "model/split_mlp.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "model/internal/check.h"
#include "model/layer_kernels.h"

namespace tessel::model {

const char* LayerSplitName(LayerSplit split) {
  switch (split) {
    case LayerSplit::kColumn:
      return "column-parallel";
    case LayerSplit::kRow:
      return "row-parallel";
    case LayerSplit::kReplicated:
      return "replicated";
  }
  return "?";
}

namespace {

// Layers pair up (0, 1), (2, 3), ...: column then row; an unpaired last
// layer is replicated.
LayerSplit SplitOf(int layer, int layers) {
  if (layer % 2 == 1) return LayerSplit::kRow;
  return layer + 1 < layers ? LayerSplit::kColumn : LayerSplit::kReplicated;
}

// Stage p holds layers [p*L/pp, (p+1)*L/pp).
int StageOf(int layer, int layers, int pp) {
  int p = 0;
  while ((p + 1) * layers / pp <= layer) ++p;
  return p;
}

}  // namespace

absl::StatusOr<SplitMlp> SplitMlp::Create(std::vector<int> sizes, int tp, int pp) {
  TESSEL_ASSIGN_OR_RETURN(Mlp model, Mlp::Create(sizes));
  const std::string shape = absl::StrJoin(sizes, ",");
  const int layers = model.num_layers();
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel size tp must be >= 1, got tp=", tp));
  }
  if (pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline-parallel size pp must be >= 1, got pp=", pp));
  }
  if (pp > layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pp=", pp, " pipeline stages but the MLP ", shape, " has only ", layers,
        " layer(s); every stage needs at least one: use pp <= ", layers, " or add layers"));
  }
  if (tp > 1 && layers < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", tp,
                     " needs at least 2 layers (a column-parallel layer followed by a "
                     "row-parallel one), but the MLP ",
                     shape, " has ", layers, "; use tp=1 or add a layer"));
  }
  if (tp > 1) {
    std::vector<int> split_sizes;
    for (int l = 0; l + 1 < layers; l += 2) split_sizes.push_back(sizes[l + 1]);
    for (int l = 0; l + 1 < layers; l += 2) {
      if (sizes[l + 1] % tp != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tp=", tp, " does not divide hidden size ", sizes[l + 1], " (output of fc", l,
            ", split column-parallel, and input of fc", l + 1,
            ", split row-parallel, over the tensor-parallel group); choose a tp that divides "
            "every split hidden size (",
            absl::StrJoin(split_sizes, ", "), ") or change the layer sizes ", shape));
      }
    }
  }
  // The cut as a generic partition description, tensor by tensor.
  std::vector<TensorSpec> specs;
  for (int l = 0; l < layers; ++l) {
    const LayerSplit split = SplitOf(l, layers);
    const int stage = StageOf(l, layers, pp);
    const std::vector<TensorInfo>& full = model.tensors();
    specs.push_back({full[2 * static_cast<size_t>(l)].name, full[2 * static_cast<size_t>(l)].shape,
                     split == LayerSplit::kColumn ? TensorSplit::kDim0
                     : split == LayerSplit::kRow  ? TensorSplit::kDim1
                                                  : TensorSplit::kReplicated,
                     stage});
    specs.push_back(
        {full[2 * static_cast<size_t>(l) + 1].name, full[2 * static_cast<size_t>(l) + 1].shape,
         split == LayerSplit::kColumn ? TensorSplit::kDim0 : TensorSplit::kReplicated, stage});
  }
  TESSEL_ASSIGN_OR_RETURN(PartitionPlan plan, PartitionPlan::Create(std::move(specs), tp, pp));
  return SplitMlp(std::move(model), tp, pp, std::move(plan));
}

SplitMlp::SplitMlp(Mlp model, int tp, int pp, PartitionPlan plan)
    : model_(std::move(model)), tp_(tp), pp_(pp), plan_(std::move(plan)) {
  const int num = model_.num_layers();
  for (int p = 0; p <= pp_; ++p) stage_first_.push_back(p * num / pp_);
  partitions_.resize(pp_);
  for (int p = 0; p < pp_; ++p) {
    for (const PartitionEntry& e : plan_.partition(p)) {
      partitions_[p].tensors.push_back(TensorInfo{e.name, e.shape, e.offset, e.numel});
    }
    partitions_[p].size = plan_.partition_size(p);
  }
  layers_.resize(num);
  for (int l = 0; l < num; ++l) {
    LayerPlan& layer = layers_[l];
    layer.split = SplitOf(l, num);
    layer.stage = StageOf(l, num, pp_);
    const PartitionEntry& weight = plan_.entry(2 * l);
    layer.local_out = static_cast<int>(weight.shape[0]);
    layer.local_in = static_cast<int>(weight.shape[1]);
    // The weight's position in its stage's partition (entries are in order).
    const auto& entries = plan_.partition(layer.stage);
    while (entries[layer.weight_index].tensor != 2 * l) ++layer.weight_index;
  }
}

int SplitMlp::stage_in(int stage) const {
  return stage == 0 ? model_.num_inputs() : local_out(stage_begin(stage) - 1);
}

const TensorInfo& SplitMlp::weight(int layer) const {
  return partitions_[layers_[layer].stage].tensors[layers_[layer].weight_index];
}

const TensorInfo& SplitMlp::bias(int layer) const {
  return partitions_[layers_[layer].stage].tensors[layers_[layer].weight_index + 1];
}

bool SplitMlp::replicated(int layer, bool is_bias) const {
  return split(layer) == LayerSplit::kReplicated || (split(layer) == LayerSplit::kRow && is_bias);
}

std::vector<float> SplitMlp::Slice(const std::vector<float>& full, int stage, int t) const {
  absl::StatusOr<std::vector<float>> part = plan_.Slice(full, stage, t);
  TESSEL_MODEL_CHECK(part.ok(), std::string(part.status().message()));
  return std::move(*part);
}

absl::StatusOr<std::vector<float>> SplitMlp::Assemble(
    const std::vector<std::vector<float>>& parts) const {
  return plan_.Assemble(parts);
}

float SplitMlp::ReferenceGradients(const std::vector<std::vector<float>>& parts, const float* x,
                                   const int32_t* y, int batch, int micro_batches,
                                   std::vector<std::vector<float>>* grads) const {
  TESSEL_MODEL_CHECK(micro_batches >= 1 && batch % micro_batches == 0, "batch ", batch,
                     " is not a multiple of micro_batches ", micro_batches);
  TESSEL_MODEL_CHECK(parts.size() == static_cast<size_t>(pp_ * tp_), "need pp*tp partitions");
  const int rows = batch / micro_batches;
  grads->resize(parts.size());
  std::vector<std::vector<float>> scratch(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    (*grads)[i].resize(parts[i].size());
    scratch[i].resize(parts[i].size());
  }
  float loss = 0.0f;
  const size_t in = static_cast<size_t>(model_.num_inputs());
  for (int j = 0; j < micro_batches; ++j) {
    // Micro-batch 0 writes the sums directly; later ones are added in order.
    std::vector<std::vector<float>>* g = j == 0 ? grads : &scratch;
    loss += ReferenceMicroBatch(parts, x + static_cast<size_t>(j) * rows * in,
                                y + static_cast<size_t>(j) * rows, rows, g);
    if (j == 0) continue;
    for (size_t i = 0; i < parts.size(); ++i) {
      float* acc = (*grads)[i].data();
      const float* add = scratch[i].data();
      for (size_t e = 0; e < scratch[i].size(); ++e) acc[e] += add[e];
    }
  }
  const float m = static_cast<float>(micro_batches);
  for (auto& v : *grads) {
    for (float& e : v) e /= m;
  }
  return loss / m;
}

float SplitMlp::ReferenceMicroBatch(const std::vector<std::vector<float>>& parts, const float* x,
                                    const int32_t* y, int rows,
                                    std::vector<std::vector<float>>* grads) const {
  const int num = num_layers();
  const size_t m = static_cast<size_t>(rows);
  std::vector<float> scratch;
  // acts[l][t]: output of layer l on tensor rank t (one entry when replicated).
  std::vector<std::vector<std::vector<float>>> acts(num);
  auto input_of = [&](int l, int t) -> const float* {
    if (l == 0) return x;
    const auto& a = acts[l - 1];
    return a.size() == 1 ? a[0].data() : a[t].data();
  };
  auto param = [&](int l, int t, bool want_bias) -> const float* {
    const std::vector<float>& part = parts[stage_of(l) * tp_ + t];
    return part.data() + (want_bias ? bias(l) : weight(l)).offset;
  };
  auto grad = [&](int l, int t, bool want_bias) -> float* {
    std::vector<float>& part = (*grads)[stage_of(l) * tp_ + t];
    return part.data() + (want_bias ? bias(l) : weight(l)).offset;
  };

  for (int l = 0; l < num; ++l) {
    const bool relu = l + 1 < num;
    const int in = local_in(l);
    const int out = local_out(l);
    switch (split(l)) {
      case LayerSplit::kColumn:
        acts[l].resize(tp_);
        for (int t = 0; t < tp_; ++t) {
          acts[l][t].resize(m * out);
          kernels::Linear(rows, in, out, input_of(l, t), param(l, t, false), param(l, t, true),
                          acts[l][t].data(), &scratch);
          if (relu) kernels::Relu(acts[l][t].data(), acts[l][t].size());
        }
        break;
      case LayerSplit::kRow: {
        std::vector<std::vector<float>> partial(tp_, std::vector<float>(m * out));
        for (int t = 0; t < tp_; ++t) {
          kernels::Linear(rows, in, out, input_of(l, t), param(l, t, false),
                          t == 0 ? param(l, 0, true) : nullptr, partial[t].data(), &scratch);
        }
        std::vector<float> sum = partial[0];
        for (int t = 1; t < tp_; ++t) {
          for (size_t e = 0; e < sum.size(); ++e) sum[e] += partial[t][e];
        }
        if (relu) kernels::Relu(sum.data(), sum.size());
        acts[l] = {std::move(sum)};
        break;
      }
      case LayerSplit::kReplicated: {
        std::vector<float> o(m * out);
        kernels::Linear(rows, in, out, input_of(l, 0), param(l, 0, false), param(l, 0, true),
                        o.data(), &scratch);
        if (relu) kernels::Relu(o.data(), o.size());
        acts[l] = {std::move(o)};
        break;
      }
    }
  }

  const int classes = model_.num_classes();
  // d: gradient w.r.t. the pre-activation output of the current layer, per
  // tensor rank (one entry when replicated).
  std::vector<std::vector<float>> d(1, std::vector<float>(m * classes));
  const float loss =
      kernels::SoftmaxCrossEntropy(acts[num - 1][0].data(), y, rows, classes, d[0].data());
  for (int l = num - 1; l >= 0; --l) {
    const int in = local_in(l);
    const int out = local_out(l);
    switch (split(l)) {
      case LayerSplit::kReplicated: {
        kernels::BiasGrad(rows, out, d[0].data(), grad(l, 0, true));
        kernels::WeightGrad(rows, in, out, d[0].data(), input_of(l, 0), grad(l, 0, false),
                            &scratch);
        for (int t = 1; t < tp_; ++t) {
          std::copy(grad(l, 0, true), grad(l, 0, true) + out, grad(l, t, true));
          std::copy(grad(l, 0, false), grad(l, 0, false) + static_cast<size_t>(out) * in,
                    grad(l, t, false));
        }
        if (l == 0) break;
        std::vector<float> dx(m * in);
        kernels::InputGrad(rows, in, out, d[0].data(), param(l, 0, false), dx.data());
        kernels::ReluMask(input_of(l, 0), dx.data(), dx.size());
        d = {std::move(dx)};
        break;
      }
      case LayerSplit::kRow: {
        kernels::BiasGrad(rows, out, d[0].data(), grad(l, 0, true));
        for (int t = 1; t < tp_; ++t) {
          std::copy(grad(l, 0, true), grad(l, 0, true) + out, grad(l, t, true));
        }
        std::vector<std::vector<float>> dh(tp_, std::vector<float>(m * in));
        for (int t = 0; t < tp_; ++t) {
          kernels::WeightGrad(rows, in, out, d[0].data(), input_of(l, t), grad(l, t, false),
                              &scratch);
          kernels::InputGrad(rows, in, out, d[0].data(), param(l, t, false), dh[t].data());
          kernels::ReluMask(input_of(l, t), dh[t].data(), dh[t].size());
        }
        d = std::move(dh);
        break;
      }
      case LayerSplit::kColumn: {
        std::vector<std::vector<float>> partial(tp_, std::vector<float>(m * in));
        for (int t = 0; t < tp_; ++t) {
          kernels::BiasGrad(rows, out, d[t].data(), grad(l, t, true));
          kernels::WeightGrad(rows, in, out, d[t].data(), input_of(l, t), grad(l, t, false),
                              &scratch);
          if (l > 0) {
            kernels::InputGrad(rows, in, out, d[t].data(), param(l, t, false), partial[t].data());
          }
        }
        if (l == 0) break;
        std::vector<float> dx = partial[0];
        for (int t = 1; t < tp_; ++t) {
          for (size_t e = 0; e < dx.size(); ++e) dx[e] += partial[t][e];
        }
        kernels::ReluMask(input_of(l, 0), dx.data(), dx.size());
        d = {std::move(dx)};
        break;
      }
    }
  }
  return loss;
}

}  // namespace tessel::model
