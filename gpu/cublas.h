// cuBLAS, loaded at run time: the few functions of its stable C ABI that
// Tessel calls (the demo model's matrix products, model/cuda_layers.cc), found
// with dlopen so that no binary links cuBLAS and every binary starts without
// it.
//
// The declarations are cublas_api.h's, with the header's values and
// signatures. The header itself is not included: it pulls in cuda_fp16.hpp
// and friends, which the @cuda//:cudart_static header set does not declare.
// A cudaStream_t is passed as `void*` (the same pointer), so this header needs
// no CUDA header either.
//
// Contract: CublasLibrary::Load opens the first candidate that loads and
// resolves every required function; otherwise FailedPrecondition saying
// what is missing and what to install. A loaded CublasLibrary's required
// pointers are non-null; `status_string` may be null (older cuBLAS).
//
// Thread safety: an immutable table of function pointers; cuBLAS's own rules
// apply to the handles made with it (one handle per stream, here).
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(CublasLibrary cublas, CublasLibrary::Load());
//   CublasHandle h = nullptr;
//   if (cublas.create(&h) != kCublasSuccess) ...
#ifndef TESSEL_GPU_CUBLAS_H_
#define TESSEL_GPU_CUBLAS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessel::gpu {

struct CublasContext;
using CublasHandle = CublasContext*;  // cublasHandle_t
using CublasStatus = int;             // cublasStatus_t
inline constexpr CublasStatus kCublasSuccess = 0;
using CublasOperation = int;                      // cublasOperation_t
inline constexpr CublasOperation kCublasOpN = 0;  // CUBLAS_OP_N
inline constexpr CublasOperation kCublasOpT = 1;  // CUBLAS_OP_T
using CublasMath = int;                           // cublasMath_t
// CUBLAS_DEFAULT_MATH: fp32 products in fp32 (TF32 and other reduced-precision
// tensor-op modes are opt-in, and Tessel does not opt in).
inline constexpr CublasMath kCublasDefaultMath = 0;

struct CublasLibrary {
  using CreateFn = CublasStatus (*)(CublasHandle*);
  using DestroyFn = CublasStatus (*)(CublasHandle);
  using SetStreamFn = CublasStatus (*)(CublasHandle, void* stream);
  using SetMathModeFn = CublasStatus (*)(CublasHandle, CublasMath);
  using SgemmFn = CublasStatus (*)(CublasHandle, CublasOperation transa, CublasOperation transb,
                                   int m, int n, int k, const float* alpha, const float* a, int lda,
                                   const float* b, int ldb, const float* beta, float* c, int ldc);
  using GetStatusStringFn = const char* (*)(CublasStatus);

  // The libraries Load() tries, in order: the loader's search path first,
  // then the toolkit's default location (which CUDA installs do not always
  // register with ld.so).
  static std::vector<std::string> DefaultLibraries();

  static absl::StatusOr<CublasLibrary> Load(const std::vector<std::string>& libraries);
  static absl::StatusOr<CublasLibrary> Load() { return Load(DefaultLibraries()); }

  // "CUBLAS_STATUS_... (n)", or "status n" without cublasGetStatusString.
  std::string StatusString(CublasStatus status) const;

  std::string library;                        // the candidate that loaded
  CreateFn create = nullptr;                  // cublasCreate_v2
  DestroyFn destroy = nullptr;                // cublasDestroy_v2
  SetStreamFn set_stream = nullptr;           // cublasSetStream_v2
  SetMathModeFn set_math_mode = nullptr;      // cublasSetMathMode
  SgemmFn sgemm = nullptr;                    // cublasSgemm_v2
  GetStatusStringFn status_string = nullptr;  // cublasGetStatusString (optional)
};

}  // namespace tessel::gpu

#endif  // TESSEL_GPU_CUBLAS_H_
