#include "gpu/internal/launch_args.h"

namespace tessel::gpu::internal {

kernels::UpdateArgs UpdateArgsFor(const OptimizerParams& p, const OptimizerScalars& s) {
  kernels::UpdateArgs a;
  a.kind = static_cast<kernels::UpdateKind>(static_cast<int>(p.kind));
  a.scale_grad = s.scale_grad;
  a.grad_scale = s.grad_scale;
  a.has_weight_decay = s.has_weight_decay;
  a.weight_decay = s.weight_decay;
  a.has_momentum = s.has_momentum;
  a.momentum = s.momentum;
  a.neg_lr = s.neg_lr;
  a.nesterov = s.nesterov;
  a.first_step = s.first_step;
  a.one_minus_dampening = s.one_minus_dampening;
  a.decay = s.decay;
  a.beta1 = s.beta1;
  a.one_minus_beta1 = s.one_minus_beta1;
  a.beta2 = s.beta2;
  a.one_minus_beta2 = s.one_minus_beta2;
  a.bc2_sqrt = s.bc2_sqrt;
  a.neg_step_size = s.neg_step_size;
  a.eps = s.eps;
  a.centered = s.centered;
  a.alpha = s.alpha;
  a.one_minus_alpha = s.one_minus_alpha;
  a.neg_clr = s.neg_clr;
  return a;
}

kernels::UpdateState UpdateStateFor(const OptimizerParams& p, const OptimizerScalars& s,
                                    float* const* state) {
  kernels::UpdateState st;
  switch (p.kind) {
    case OptimizerParams::Kind::kSgd:
      if (s.has_momentum) st.momentum_buffer = state[0];
      break;
    case OptimizerParams::Kind::kAdam:
    case OptimizerParams::Kind::kAdamW:
      st.exp_avg = state[0];
      st.exp_avg_sq = state[1];
      break;
    case OptimizerParams::Kind::kRmsprop: {
      int slot = 0;
      st.square_avg = state[slot++];
      if (s.has_momentum) st.momentum_buffer = state[slot++];
      if (s.centered) st.grad_avg = state[slot++];
      break;
    }
    case OptimizerParams::Kind::kAdagrad:
      st.sum = state[0];
      break;
  }
  return st;
}

std::vector<kernels::PackSegment> PackTable(const std::vector<Segment>& segments, size_t* total) {
  std::vector<kernels::PackSegment> table;
  table.reserve(segments.size());
  *total = 0;
  for (const Segment& g : segments) {
    if (g.count == 0) continue;
    table.push_back({g.data, g.count, *total});
    *total += g.count;
  }
  return table;
}

}  // namespace tessel::gpu::internal
