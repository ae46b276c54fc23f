// Launchers of the CUDA device's kernels (gpu/kernels.cu and
// gpu/topk_kernels.cu, compiled by nvcc into //gpu:kernels). Internal to
// //gpu: the CUDA device (gpu/cuda_device.cc, cuda_device_compute.cc) is
// their only caller; everyone else goes through device.h.
//
// The header is plain C++ so that gcc-compiled code can include it: a stream
// is a cudaStream_t passed as `void*`, and every launcher returns the
// cudaError_t of enqueueing its work as an int (0 == cudaSuccess). A nonzero
// return means nothing (or not everything) was enqueued; a fault while the
// kernel runs surfaces later, from the next synchronising CUDA call. Work of
// size 0 enqueues nothing and returns 0.
//
// Contract shared by every launcher:
//   - Pointers are device pointers (cudaMalloc) unless a comment says
//     otherwise, and all work runs asynchronously on `stream`, in order.
//   - Element counts are size_t and the kernels index with size_t in
//     grid-stride loops, so any n that fits in memory is handled.
//   - The elementwise arithmetic is the CPU reference's, operation for
//     operation: the file is compiled with -fmad=false (no fused
//     multiply-adds) and with nvcc's default IEEE division and square root, so
//     the wire casts, Pack/Unpack, Fill, the optimizers and top-k give the
//     CPU's bits.
//
// Example (cuda_device.cc):
//   const int e = kernels::LaunchFill(stream, dst, 0.0f, n);
//   if (e != 0) ...  // record cudaGetErrorString(static_cast<cudaError_t>(e))
#ifndef TESSEL_GPU_KERNELS_H_
#define TESSEL_GPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace tessel::gpu::kernels {

// --- copies and casts ------------------------------------------------------

// dst[i] = value for i < n.
int LaunchFill(void* stream, float* dst, float value, size_t n);

// Which 16-bit format LaunchFloatToHalf/LaunchHalfToFloat convert.
enum HalfKind : int { kF16 = 0, kBF16 = 1 };

// out[i] = the fp16/bf16 bit pattern of in[i], rounded to nearest even:
// core/precision.cc's FloatToF16/FloatToBF16 bit for bit (the same integer
// arithmetic; NaN stays a quiet NaN with the same payload bits, overflow
// becomes inf, fp16 subnormals are rounded like the CPU's).
int LaunchFloatToHalf(void* stream, HalfKind kind, const float* in, uint16_t* out, size_t n);
// out[i] = in[i] widened (exact): core/precision.cc's F16ToFloat/BF16ToFloat
// bit for bit (a signalling fp16 NaN comes back quiet, as on the CPU).
int LaunchHalfToFloat(void* stream, HalfKind kind, const uint16_t* in, float* out, size_t n);

// One non-empty segment of a bucket: `count` floats at `data`, which sit at
// [offset, offset + count) of the packed buffer. A table passed to
// LaunchPack/LaunchUnpack lists segments in ascending, gap-free offset order
// (offset[0] == 0, offset[k + 1] == offset[k] + count[k]), none empty, and
// `total` is the sum of the counts.
struct PackSegment {
  float* data;
  size_t count;
  size_t offset;
};

// dst[table[k].offset + i] = table[k].data[i] for every segment k and
// i < table[k].count, in one launch. `table` is a device array of
// `num_segments` entries that must stay valid until the kernel has run.
int LaunchPack(void* stream, const PackSegment* table, size_t num_segments, size_t total,
               float* dst);
// The reverse: table[k].data[i] = src[table[k].offset + i].
int LaunchUnpack(void* stream, const float* src, const PackSegment* table, size_t num_segments,
                 size_t total);

// --- optimizer -------------------------------------------------------------

// The optimizer kinds, numbered like OptimizerParams::Kind.
enum UpdateKind : int { kSgd = 0, kAdam = 1, kAdamW = 2, kRmsprop = 3, kAdagrad = 4 };

// The scalars of one update: core/optimizer.h's OptimizerScalars field for
// field (cuda_device.cc copies them from MakeOptimizerScalars; the CPU kernels
// run on the very same values), plus the kind. Mirrored rather than included
// because core/optimizer.h pulls in Abseil, which nvcc does not compile here.
struct UpdateArgs {
  UpdateKind kind = kSgd;
  bool scale_grad = false;
  float grad_scale = 1.0f;
  bool has_weight_decay = false;
  float weight_decay = 0;
  bool has_momentum = false;
  float momentum = 0;
  float neg_lr = 0;
  bool nesterov = false;
  bool first_step = false;
  float one_minus_dampening = 0;
  float decay = 0;
  float beta1 = 0;
  float one_minus_beta1 = 0;
  float beta2 = 0;
  float one_minus_beta2 = 0;
  float bc2_sqrt = 0;
  float neg_step_size = 0;
  float eps = 0;
  bool centered = false;
  float alpha = 0;
  float one_minus_alpha = 0;
  float neg_clr = 0;
};

// The optimizer state arrays of one update, by meaning (the caller maps
// core/optimizer.h's slot order onto them). Those the configuration does not
// use are null and not touched: SGD reads momentum_buffer when has_momentum;
// Adam/AdamW exp_avg and exp_avg_sq; RMSprop square_avg, momentum_buffer when
// has_momentum and grad_avg when centered; Adagrad sum.
struct UpdateState {
  float* momentum_buffer = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* square_avg = nullptr;
  float* grad_avg = nullptr;
  float* sum = nullptr;
};

// core/optimizer.h's ApplyUpdate on device arrays of n floats: the same
// per-element float operations in the same order (torch 1.13's), grad scaling
// included. params, grad and the state arrays must not overlap.
int LaunchApplyUpdate(void* stream, const UpdateArgs& args, float* params, const float* grad,
                      const UpdateState& state, size_t n);

// --- compression -------------------------------------------------------------

// Device scratch LaunchTopkCompress needs for a bucket of n elements.
size_t TopkScratchBytes(size_t n);

// core/topk.h's TopkCompress: residual[i] += grad[i], then the k entries of
// largest TopkKey (the bits of |v|; ties: the lower index) go to `wire`
// (k rising uint32 indices, then their k floats) and are zeroed in the
// residual. A radix select over the keys (four 8-bit passes) finds the k-th
// largest key T and how many entries equal to T to take; each chunk of
// the bucket counts its entries above and at T, one block scans those counts
// into output offsets, and each chunk then writes its entries in index
// order. Integer comparisons and one IEEE addition: the CPU's bits. `scratch`
// holds TopkScratchBytes(n) bytes; n < 2^32, k <= n (otherwise
// cudaErrorInvalidValue and nothing is enqueued).
int LaunchTopkCompress(void* stream, const float* grad, float* residual, size_t n, size_t k,
                       void* scratch, uint8_t* wire);

}  // namespace tessel::gpu::kernels

#endif  // TESSEL_GPU_KERNELS_H_
