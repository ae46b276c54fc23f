// The CUDA device's kernels for the worker (contract: cuda_device.h,
// device.h): the wire casts, bucket pack/unpack, the optimizers and top-k,
// each one or a few launches of gpu/kernels.h on the given stream, with the
// host-side arguments from gpu/internal/launch_args.h.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "gpu/cuda_device.h"
#include "gpu/internal/launch_args.h"
#include "gpu/kernels.h"

namespace tessel::gpu {
namespace {

kernels::HalfKind Kind(HalfType t) { return t == HalfType::kBF16 ? kernels::kBF16 : kernels::kF16; }

}  // namespace

// --- wire kernels ----------------------------------------------------------------

void CudaDevice::FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) {
  Launched(kernels::LaunchFloatToHalf(stream(s), Kind(t), in, out, n), "FloatToHalf");
}

void CudaDevice::HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) {
  Launched(kernels::LaunchHalfToFloat(stream(s), Kind(t), in, out, n), "HalfToFloat");
}

// The host side of the copy is pageable: cudaMemcpyAsync has consumed it
// (staged it, or copied it) by the time it returns, so the table may go away
// right after.
void* CudaDevice::UploadTable(Stream s, const void* table, size_t bytes, const char* op) {
  void* p = nullptr;
  if (!Check(cudaMallocFromPoolAsync(&p, bytes, pool_, stream(s)),
             absl::StrCat("cudaMallocFromPoolAsync in ", op))) {
    return nullptr;
  }
  if (!Check(cudaMemcpyAsync(p, table, bytes, cudaMemcpyHostToDevice, stream(s)),
             absl::StrCat("cudaMemcpyAsync in ", op))) {
    cudaFreeAsync(p, stream(s));
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void CudaDevice::Pack(Stream s, const std::vector<Segment>& segments, float* dst) {
  size_t total = 0;
  const std::vector<kernels::PackSegment> table = internal::PackTable(segments, &total);
  if (table.empty()) return;
  auto* device_table = static_cast<kernels::PackSegment*>(
      UploadTable(s, table.data(), table.size() * sizeof(kernels::PackSegment), "Pack"));
  if (device_table == nullptr) return;
  Launched(kernels::LaunchPack(stream(s), device_table, table.size(), total, dst), "Pack");
  Check(cudaFreeAsync(device_table, stream(s)), "cudaFreeAsync in Pack");
}

void CudaDevice::Unpack(Stream s, const float* src, const std::vector<Segment>& segments) {
  size_t total = 0;
  const std::vector<kernels::PackSegment> table = internal::PackTable(segments, &total);
  if (table.empty()) return;
  auto* device_table = static_cast<kernels::PackSegment*>(
      UploadTable(s, table.data(), table.size() * sizeof(kernels::PackSegment), "Unpack"));
  if (device_table == nullptr) return;
  Launched(kernels::LaunchUnpack(stream(s), src, device_table, table.size(), total), "Unpack");
  Check(cudaFreeAsync(device_table, stream(s)), "cudaFreeAsync in Unpack");
}

// --- optimizer -------------------------------------------------------------------

void CudaDevice::ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                             const float* grad, float* const* state, size_t n) {
  // The CPU's own derivation (core/optimizer.cc), so both run on the same
  // float scalars. Like the CPU's ApplyUpdate it aborts on step < 1.
  const OptimizerScalars scalars = MakeOptimizerScalars(p, step);
  if (n == 0) return;
  Launched(kernels::LaunchApplyUpdate(stream(s), internal::UpdateArgsFor(p, scalars), params, grad,
                                      internal::UpdateStateFor(p, scalars, state), n),
           "ApplyUpdate");
}

// --- compression -----------------------------------------------------------------

// The radix select's counts go to a scratch array from the stream-ordered
// pool, freed on the stream after the write pass.
void CudaDevice::TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                              uint8_t* wire) {
  if (n < 0 || k < 0 || k > n || n > int64_t{0xffffffff}) {
    RecordError(absl::InvalidArgumentError(
        absl::StrCat("TopkCompress(n=", n, ", k=", k, "): need 0 <= k <= n < 2^32")));
    return;
  }
  if (n == 0) return;
  const size_t count = static_cast<size_t>(n);
  void* scratch = nullptr;
  if (!Check(cudaMallocFromPoolAsync(&scratch, kernels::TopkScratchBytes(count), pool_, stream(s)),
             "cudaMallocFromPoolAsync in TopkCompress")) {
    return;
  }
  Launched(kernels::LaunchTopkCompress(stream(s), grad, residual, count, static_cast<size_t>(k),
                                       scratch, wire),
           "TopkCompress");
  Check(cudaFreeAsync(scratch, stream(s)), "cudaFreeAsync in TopkCompress");
}

}  // namespace tessel::gpu
