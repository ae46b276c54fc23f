#include "model/split_mlp.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

absl::StatusOr<SplitMlp> SplitMlp::Create(std::vector<int> sizes, int tp, int pp) {
  absl::StatusOr<Mlp> model = Mlp::Create(sizes);
  if (!model.ok()) return model.status();
  const std::string shape = absl::StrJoin(sizes, ",");
  const int layers = model->num_layers();
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
  return SplitMlp(std::move(*model), tp, pp);
}

SplitMlp::SplitMlp(Mlp model, int tp, int pp) : model_(std::move(model)), tp_(tp), pp_(pp) {
  const int num = model_.num_layers();
  const std::vector<int>& s = model_.sizes();
  for (int p = 0; p <= pp_; ++p) stage_first_.push_back(p * num / pp_);
  layers_.resize(num);
  partitions_.resize(pp_);
  for (int l = 0; l < num; ++l) {
    LayerPlan& plan = layers_[l];
    if (l % 2 == 0 && l + 1 < num) {
      plan.split = LayerSplit::kColumn;
    } else if (l % 2 == 1) {
      plan.split = LayerSplit::kRow;
    } else {
      plan.split = LayerSplit::kReplicated;
    }
    plan.local_in = plan.split == LayerSplit::kRow ? s[l] / tp_ : s[l];
    plan.local_out = plan.split == LayerSplit::kColumn ? s[l + 1] / tp_ : s[l + 1];
    plan.stage = 0;
    while (stage_first_[plan.stage + 1] <= l) ++plan.stage;
    Partition& part = partitions_[plan.stage];
    plan.weight_index = part.tensors.size();
    const size_t w = static_cast<size_t>(plan.local_out) * plan.local_in;
    part.tensors.push_back(TensorInfo{
        absl::StrCat("fc", l, ".weight"), {plan.local_out, plan.local_in}, part.size, w});
    part.size += w;
    part.tensors.push_back(TensorInfo{absl::StrCat("fc", l, ".bias"),
                                      {plan.local_out},
                                      part.size,
                                      static_cast<size_t>(plan.local_out)});
    part.size += static_cast<size_t>(plan.local_out);
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

void SplitMlp::ForEachRun(int layer, int t,
                          const std::function<void(size_t, size_t, size_t)>& fn) const {
  const LayerPlan& plan = layers_[layer];
  const size_t fw = model_.tensors()[2 * static_cast<size_t>(layer)].offset;
  const size_t fb = model_.tensors()[2 * static_cast<size_t>(layer) + 1].offset;
  const size_t pw = weight(layer).offset;
  const size_t pb = bias(layer).offset;
  const size_t in = static_cast<size_t>(model_.sizes()[layer]);
  const size_t out = static_cast<size_t>(model_.sizes()[layer + 1]);
  const size_t rank = static_cast<size_t>(t);
  switch (plan.split) {
    case LayerSplit::kColumn: {
      const size_t rows = static_cast<size_t>(plan.local_out);
      fn(fw + rank * rows * in, pw, rows * in);
      fn(fb + rank * rows, pb, rows);
      break;
    }
    case LayerSplit::kRow: {
      const size_t cols = static_cast<size_t>(plan.local_in);
      for (size_t r = 0; r < out; ++r) fn(fw + r * in + rank * cols, pw + r * cols, cols);
      fn(fb, pb, out);
      break;
    }
    case LayerSplit::kReplicated:
      fn(fw, pw, out * in);
      fn(fb, pb, out);
      break;
  }
}

bool SplitMlp::replicated(int layer, bool is_bias) const {
  return split(layer) == LayerSplit::kReplicated || (split(layer) == LayerSplit::kRow && is_bias);
}

std::vector<float> SplitMlp::Slice(const std::vector<float>& full, int stage, int t) const {
  TESSEL_MODEL_CHECK(full.size() == model_.num_params(), "full vector has ", full.size(),
                     " floats, the MLP ", model_.num_params());
  TESSEL_MODEL_CHECK(stage >= 0 && stage < pp_ && t >= 0 && t < tp_, "partition (", stage, ", ", t,
                     ") outside pp=", pp_, ", tp=", tp_);
  std::vector<float> part(partition_size(stage));
  for (int l = stage_begin(stage); l < stage_end(stage); ++l) {
    ForEachRun(l, t, [&](size_t f, size_t p, size_t n) {
      std::copy(full.begin() + f, full.begin() + f + n, part.begin() + p);
    });
  }
  return part;
}

absl::StatusOr<std::vector<float>> SplitMlp::Assemble(
    const std::vector<std::vector<float>>& parts) const {
  if (parts.size() != static_cast<size_t>(pp_ * tp_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Assemble needs pp*tp = ", pp_ * tp_, " partitions, got ", parts.size()));
  }
  for (int p = 0; p < pp_; ++p) {
    for (int t = 0; t < tp_; ++t) {
      if (parts[p * tp_ + t].size() != partition_size(p)) {
        return absl::InvalidArgumentError(absl::StrCat("partition (stage ", p, ", tensor rank ", t,
                                                       ") has ", parts[p * tp_ + t].size(),
                                                       " floats, expected ", partition_size(p)));
      }
    }
  }
  std::vector<float> full(model_.num_params());
  for (int p = 0; p < pp_; ++p) {
    const std::vector<float>& first = parts[p * tp_];
    for (int t = 0; t < tp_; ++t) {
      const std::vector<float>& part = parts[p * tp_ + t];
      for (int l = stage_begin(p); l < stage_end(p); ++l) {
        // Replicated tensors: every copy must equal tensor rank 0's.
        for (const bool is_bias : {false, true}) {
          if (t == 0 || !replicated(l, is_bias)) continue;
          const TensorInfo& info = is_bias ? bias(l) : weight(l);
          for (size_t i = info.offset; i < info.offset + info.numel; ++i) {
            if (std::memcmp(&first[i], &part[i], sizeof(float)) != 0) {
              return absl::InternalError(absl::StrCat("replicated tensor ", info.name, " of stage ",
                                                      p, " differs between tensor ranks 0 and ", t,
                                                      " at element ", i - info.offset, " (",
                                                      first[i], " vs ", part[i], ")"));
            }
          }
        }
        ForEachRun(l, t, [&](size_t f, size_t q, size_t n) {
          std::copy(part.begin() + q, part.begin() + q + n, full.begin() + f);
        });
      }
    }
  }
  return full;
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
