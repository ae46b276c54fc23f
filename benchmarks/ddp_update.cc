#include "benchmarks/ddp_update.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/optimizer.h"
#include "core/reduce.h"

struct ddp_update {
  tessel::OptimizerParams params;
  std::vector<float> weights;
  std::vector<std::vector<float>> slots;
  float* state[tessel::kMaxStateSlots] = {};
  int64_t step = 0;
};

extern "C" struct ddp_update* ddp_update_new(const char* kind, size_t n) {
  if (kind == nullptr || n == 0) return nullptr;
  tessel::OptimizerParams p;
  if (std::strcmp(kind, "sgd") == 0) {
    p.kind = tessel::OptimizerParams::Kind::kSgd;
  } else if (std::strcmp(kind, "adam") == 0) {
    p.kind = tessel::OptimizerParams::Kind::kAdam;
  } else {
    return nullptr;
  }
  auto* u = new ddp_update;
  u->params = p;
  u->weights.assign(n, 0.5f);
  u->slots.assign(static_cast<size_t>(tessel::StateSlots(p)), std::vector<float>(n));
  for (size_t k = 0; k < u->slots.size(); ++k) u->state[k] = u->slots[k].data();
  tessel::InitState(p, u->state, n);
  return u;
}

extern "C" void ddp_update_apply(struct ddp_update* u, const float* sum, int world) {
  const float* srcs[1] = {sum};
  tessel::ReduceAndApply(u->params, ++u->step, u->weights.data(), srcs, 1, u->state,
                         u->weights.size(), world);
}

extern "C" void ddp_update_free(struct ddp_update* u) { delete u; }
