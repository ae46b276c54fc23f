// What the CUDA device computes on the host before it launches a kernel of
// gpu/kernels.h: the optimizer's scalars and state arrays in the kernels'
// terms, and a bucket's segment table. Pure logic, tested without a GPU.
//
// Contract:
//   - UpdateArgsFor copies core/optimizer.h's OptimizerScalars field for
//     field (the CPU kernels run on the very same floats) and adds the kind.
//   - UpdateStateFor maps core/optimizer.h's slot order onto the state
//     arrays by meaning: SGD [momentum_buffer if has_momentum]; Adam/AdamW
//     [exp_avg, exp_avg_sq]; RMSprop [square_avg, momentum_buffer if
//     has_momentum, grad_avg if centered]; Adagrad [sum]. Unused ones stay
//     null. `state` holds StateSlots(p) pointers.
//   - PackTable lists the non-empty segments with their offsets in the packed
//     buffer (ascending, gap-free, from 0) and sets *total to the sum of the
//     counts: what kernels::LaunchPack/LaunchUnpack require.
//
// Thread safety: pure functions.
//
// Example (cuda_device_compute.cc):
//   const OptimizerScalars s = MakeOptimizerScalars(p, step);
//   LaunchApplyUpdate(stream, UpdateArgsFor(p, s), params, grad,
//                     UpdateStateFor(p, s, state), n);
#ifndef TESSEL_GPU_INTERNAL_LAUNCH_ARGS_H_
#define TESSEL_GPU_INTERNAL_LAUNCH_ARGS_H_

#include <cstddef>
#include <vector>

#include "core/optimizer.h"
#include "gpu/device.h"
#include "gpu/kernels.h"

namespace tessel::gpu::internal {

kernels::UpdateArgs UpdateArgsFor(const OptimizerParams& p, const OptimizerScalars& s);

kernels::UpdateState UpdateStateFor(const OptimizerParams& p, const OptimizerScalars& s,
                                    float* const* state);

std::vector<kernels::PackSegment> PackTable(const std::vector<Segment>& segments, size_t* total);

}  // namespace tessel::gpu::internal

#endif  // TESSEL_GPU_INTERNAL_LAUNCH_ARGS_H_
