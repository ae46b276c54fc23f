// Launch helpers shared by Tessel's CUDA kernel files (gpu/kernels.cu,
// gpu/topk_kernels.cu, model/cuda_layer_kernels.cu). nvcc only.
//
// Launch shape: elementwise kernels use kThreads threads per block and at
// most kMaxBlocks blocks, each thread walking a grid-stride loop with size_t
// indices; a launcher with nothing to do returns before launching (a grid of
// zero blocks is an error in CUDA). A launcher clears the thread's last error
// first and returns cudaGetLastError() after its launches, so it reports its
// own launches alone.
//
// Example:
//   int LaunchScale(void* stream, float* v, size_t n) {
//     if (n == 0) return cudaSuccess;
//     ClearLastError();
//     ScaleKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(v, n);
//     return cudaGetLastError();
//   }
#ifndef TESSEL_GPU_CUDA_LAUNCH_CUH_
#define TESSEL_GPU_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <cstddef>

namespace tessel::gpu::launch {

inline constexpr unsigned kThreads = 256;
// Enough blocks to fill any current GPU several times over; larger arrays are
// covered by the grid-stride loops.
inline constexpr size_t kMaxBlocks = 65535;

inline unsigned BlocksFor(size_t n) {
  const size_t blocks = n / kThreads + (n % kThreads != 0 ? 1 : 0);
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Clears this thread's last error before a launch, so that the
// cudaGetLastError() after it reports that launch alone. An error left by an
// earlier call was already returned by that call; a sticky error (a kernel
// fault) is not cleared and fails the launch itself.
inline void ClearLastError() { (void)cudaGetLastError(); }

__device__ __forceinline__ size_t FirstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t GridStride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

}  // namespace tessel::gpu::launch

#endif  // TESSEL_GPU_CUDA_LAUNCH_CUH_
