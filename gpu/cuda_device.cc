// The CUDA device (device.h): device 0, three non-blocking streams, CUDA
// events, the kernels of gpu/kernels.cu and cuBLAS (loaded with dlopen) for
// the three matrix products. Registered with OpenDevice("cuda") at static
// initialisation; OpenCudaDevice says why, as FailedPrecondition, when there
// is no usable driver, device or cuBLAS.
//
// Errors: every CUDA call's return code is checked. A failure of enqueued
// work (a launch, an asynchronous copy, an event operation, a cuBLAS call, a
// kernel fault reported by a later call) is recorded once, the first one
// wins, and every later Synchronize* returns it:
//   InternalError("CUDA: <cudaGetErrorString> in <op>").
// Failures that are answered directly (Alloc, PinHost, ElapsedMs) are not
// recorded. After any failed call this thread's "last error" is cleared so
// that the next launch's cudaGetLastError() reports that launch alone.
//
// Threads: the device may be used from several threads (each stream fed by
// one thread at a time, as device.h requires). Streams, handles and the memory
// pool are created in the constructor and never change; each stream has its
// own cuBLAS handle, bound to it, so concurrent streams never share one;
// first_error_ is guarded by mu_. The thread's current CUDA device must be 0
// (the default; nothing in Tessel changes it).
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "gpu/device.h"
#include "gpu/kernels.h"

namespace tessel::gpu {
namespace {

// Why OpenDevice("cuda") cannot give a device.
absl::Status Unusable(absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", why));
}

// --- cuBLAS, loaded at run time ----------------------------------------------
// The few declarations of cublas_api.h that this file needs, with the header's
// values and signatures (cuBLAS's stable C ABI). The header itself is not
// included: it pulls in cuda_fp16.hpp and friends, which the @cuda//:cudart_static
// header set does not declare, and no cuBLAS symbol may be linked directly.
struct CublasContext;
using CublasHandle = CublasContext*;  // cublasHandle_t
using CublasStatus = int;             // cublasStatus_t; CUBLAS_STATUS_SUCCESS == 0
constexpr CublasStatus kCublasSuccess = 0;
using CublasOperation = int;               // cublasOperation_t
constexpr CublasOperation kCublasOpN = 0;  // CUBLAS_OP_N
constexpr CublasOperation kCublasOpT = 1;  // CUBLAS_OP_T
using CublasMath = int;                    // cublasMath_t
// CUBLAS_DEFAULT_MATH: fp32 products in fp32 (TF32 and other reduced-precision
// tensor-op modes are opt-in, and we do not opt in).
constexpr CublasMath kCublasDefaultMath = 0;

struct Cublas {
  using CreateFn = CublasStatus (*)(CublasHandle*);
  using DestroyFn = CublasStatus (*)(CublasHandle);
  using SetStreamFn = CublasStatus (*)(CublasHandle, cudaStream_t);
  using SetMathModeFn = CublasStatus (*)(CublasHandle, CublasMath);
  using SgemmFn = CublasStatus (*)(CublasHandle, CublasOperation transa, CublasOperation transb,
                                   int m, int n, int k, const float* alpha, const float* a, int lda,
                                   const float* b, int ldb, const float* beta, float* c, int ldc);
  using GetStatusStringFn = const char* (*)(CublasStatus);

  CreateFn create = nullptr;                  // cublasCreate_v2
  DestroyFn destroy = nullptr;                // cublasDestroy_v2
  SetStreamFn set_stream = nullptr;           // cublasSetStream_v2
  SetMathModeFn set_math_mode = nullptr;      // cublasSetMathMode
  SgemmFn sgemm = nullptr;                    // cublasSgemm_v2
  GetStatusStringFn status_string = nullptr;  // cublasGetStatusString (optional)

  std::string StatusString(CublasStatus status) const {
    const char* s = status_string != nullptr ? status_string(status) : nullptr;
    return s != nullptr ? absl::StrCat(s, " (", status, ")") : absl::StrCat("status ", status);
  }
};

// Loads cuBLAS and resolves the functions used here. dlopen counts
// references, so opening a second device costs nothing; the library is never
// closed (unloading a library that owns CUDA resources is not worth the risk).
absl::StatusOr<Cublas> LoadCublas() {
  void* lib = nullptr;
  std::string errors;
  // The loader's search path first, then the toolkit's default location
  // (which CUDA installs do not always register with ld.so).
  for (const char* name :
       {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* why = dlerror();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", why != nullptr ? why : name);
  }
  if (lib == nullptr) {
    return Unusable(absl::StrCat("cuBLAS cannot be loaded (", errors,
                                 "); install cuBLAS 13 or add its directory to LD_LIBRARY_PATH"));
  }
  Cublas c;
  std::string missing;
  auto resolve = [&](auto* fn, const char* symbol, bool required) {
    void* p = dlsym(lib, symbol);
    if (p == nullptr && required) absl::StrAppend(&missing, missing.empty() ? "" : ", ", symbol);
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
  };
  resolve(&c.create, "cublasCreate_v2", true);
  resolve(&c.destroy, "cublasDestroy_v2", true);
  resolve(&c.set_stream, "cublasSetStream_v2", true);
  resolve(&c.set_math_mode, "cublasSetMathMode", true);
  resolve(&c.sgemm, "cublasSgemm_v2", true);
  resolve(&c.status_string, "cublasGetStatusString", false);
  if (!missing.empty()) {
    return Unusable(absl::StrCat("the cuBLAS library that was loaded lacks ", missing));
  }
  return c;
}

std::string CudaError(cudaError_t e) {
  return absl::StrCat(cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

// "13.0" from cudaRuntimeGetVersion/cudaDriverGetVersion's 13000.
std::string VersionString(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

// Forgets this thread's last CUDA error after a call whose failure was
// already handled from its return code.
void ClearLastError() { (void)cudaGetLastError(); }

class CudaEvent : public Event {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  // Null when creating it failed (the failure is the device's first error).
  cudaEvent_t get() const { return event_; }

 private:
  const cudaEvent_t event_;
};

cudaEvent_t Handle(const Event* e) { return static_cast<const CudaEvent*>(e)->get(); }

class CudaDevice : public Device {
 public:
  // Everything the device needs, created by OpenCudaDevice.
  struct Resources {
    std::string description;
    Cublas cublas;
    std::array<cudaStream_t, kNumStreams> streams{};
    std::array<CublasHandle, kNumStreams> handles{};
    cudaMemPool_t pool = nullptr;
  };

  explicit CudaDevice(Resources r) : r_(std::move(r)) {}

  ~CudaDevice() override {
    for (int i = 0; i < kNumStreams; ++i) {
      if (r_.streams[i] != nullptr) cudaStreamSynchronize(r_.streams[i]);
    }
    Release(&r_);
  }

  // Frees whatever `r` holds (also for a partly built Resources).
  static void Release(Resources* r) {
    for (int i = 0; i < kNumStreams; ++i) {
      if (r->handles[i] != nullptr) r->cublas.destroy(r->handles[i]);
      if (r->streams[i] != nullptr) cudaStreamDestroy(r->streams[i]);
      r->handles[i] = nullptr;
      r->streams[i] = nullptr;
    }
    if (r->pool != nullptr) cudaMemPoolDestroy(r->pool);
    r->pool = nullptr;
    ClearLastError();
  }

  absl::string_view kind() const override { return "cuda"; }
  std::string description() const override { return r_.description; }

  // --- memory ------------------------------------------------------------

  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    ClearLastError();
    const std::string what = absl::StrCat("CUDA: ", CudaError(e), " in cudaMalloc(", bytes,
                                          " bytes) on ", r_.description);
    if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
    return absl::InternalError(what);
  }

  // cudaFree waits for the device's outstanding work, so memory still used by
  // enqueued work is not freed under it.
  void Free(void* p) override {
    if (p != nullptr) Check(cudaFree(p), "cudaFree");
  }

  // Registers the whole pages inside [p, p + bytes) only: two small host
  // buffers may share a page (heap neighbours: a worker's params and grads),
  // and registering a page twice fails. The edge pages stay pageable. A
  // single cudaMemcpyAsync may not span pinned and pageable memory (the
  // driver answers "invalid argument", seen on an H100), so the host copies
  // are split at the registered region's edges (HostPieces).
  absl::Status PinHost(void* p, size_t bytes) override {
    if (p == nullptr || bytes == 0) return absl::OkStatus();
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
    if (end <= begin) return absl::OkStatus();  // no whole page: nothing to gain
    void* base = reinterpret_cast<void*>(begin);
    const cudaError_t e = cudaHostRegister(base, end - begin, cudaHostRegisterDefault);
    if (e == cudaSuccess) {
      absl::MutexLock lock(&pinned_mu_);
      pinned_.push_back({p, base, end - begin});
      return absl::OkStatus();
    }
    ClearLastError();
    const std::string what =
        absl::StrCat("CUDA: ", CudaError(e), " in cudaHostRegister(", bytes, " bytes)");
    if (e == cudaErrorHostMemoryAlreadyRegistered) return absl::AlreadyExistsError(what);
    if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
    return absl::InternalError(what);
  }

  // Unpinning a range that was never pinned (PinHost of 0 bytes, or of less
  // than a page) is not an error worth reporting.
  void UnpinHost(void* p) override {
    void* base = nullptr;
    {
      absl::MutexLock lock(&pinned_mu_);
      for (size_t i = 0; i < pinned_.size(); ++i) {
        if (pinned_[i].p == p) {
          base = pinned_[i].base;
          pinned_.erase(pinned_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    if (base != nullptr && cudaHostUnregister(base) != cudaSuccess) ClearLastError();
  }

  // --- streams and events --------------------------------------------------

  std::unique_ptr<Event> NewEvent() override {
    cudaEvent_t e = nullptr;
    // Default flags: timing enabled (ElapsedMs), spin-waiting synchronisation.
    if (!Check(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate")) e = nullptr;
    return std::make_unique<CudaEvent>(e);
  }

  void Record(Stream s, Event* e) override {
    if (Handle(e) == nullptr) return;  // creating it failed: already the first error
    Check(cudaEventRecord(Handle(e), stream(s)), "cudaEventRecord");
  }

  // A CUDA event never recorded is complete, so waiting on it is a no-op, as
  // device.h requires.
  void Wait(Stream s, const Event* e) override {
    if (Handle(e) == nullptr) return;
    Check(cudaStreamWaitEvent(stream(s), Handle(e), 0), "cudaStreamWaitEvent");
  }

  absl::Status Synchronize(const Event* e) override {
    if (Handle(e) != nullptr) Check(cudaEventSynchronize(Handle(e)), "cudaEventSynchronize");
    return FirstError();
  }

  absl::Status SynchronizeStream(Stream s) override {
    Check(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    return FirstError();
  }

  absl::StatusOr<double> ElapsedMs(const Event* from, const Event* to) override {
    if (absl::Status s = FirstError(); !s.ok()) return s;
    if (Handle(from) == nullptr || Handle(to) == nullptr) {
      return absl::FailedPreconditionError("ElapsedMs: an event could not be created");
    }
    float ms = 0;
    const cudaError_t e = cudaEventElapsedTime(&ms, Handle(from), Handle(to));
    if (e == cudaSuccess) return static_cast<double>(ms);
    ClearLastError();
    if (e == cudaErrorNotReady || e == cudaErrorInvalidResourceHandle) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ElapsedMs: an event was not recorded or not reached (CUDA: ", CudaError(e), ")"));
    }
    return absl::InternalError(absl::StrCat("CUDA: ", CudaError(e), " in cudaEventElapsedTime"));
  }

  // --- copies --------------------------------------------------------------

  void CopyToHost(Stream s, void* host, const void* device, size_t bytes) override {
    HostPieces(host, bytes, [&](size_t at, size_t n) {
      return Check(
          cudaMemcpyAsync(static_cast<char*>(host) + at, static_cast<const char*>(device) + at, n,
                          cudaMemcpyDeviceToHost, stream(s)),
          "CopyToHost");
    });
  }
  void CopyToDevice(Stream s, void* device, const void* host, size_t bytes) override {
    HostPieces(host, bytes, [&](size_t at, size_t n) {
      return Check(
          cudaMemcpyAsync(static_cast<char*>(device) + at, static_cast<const char*>(host) + at, n,
                          cudaMemcpyHostToDevice, stream(s)),
          "CopyToDevice");
    });
  }
  // dst and src must not overlap (cudaMemcpy's rule).
  void CopyOnDevice(Stream s, void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(s)), "CopyOnDevice");
  }
  void Fill(Stream s, float* dst, float value, size_t n) override {
    Launched(kernels::LaunchFill(stream(s), dst, value, n), "Fill");
  }

  // --- wire kernels --------------------------------------------------------

  void FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) override {
    Launched(kernels::LaunchFloatToHalf(stream(s), Kind(t), in, out, n), "FloatToHalf");
  }
  void HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) override {
    Launched(kernels::LaunchHalfToFloat(stream(s), Kind(t), in, out, n), "HalfToFloat");
  }

  void Pack(Stream s, const std::vector<Segment>& segments, float* dst) override {
    size_t total = 0;
    std::vector<kernels::PackSegment> table = Table(segments, &total);
    if (table.empty()) return;
    kernels::PackSegment* device_table = UploadTable(s, table, "Pack");
    if (device_table == nullptr) return;
    Launched(kernels::LaunchPack(stream(s), device_table, table.size(), total, dst), "Pack");
    Check(cudaFreeAsync(device_table, stream(s)), "cudaFreeAsync in Pack");
  }

  void Unpack(Stream s, const float* src, const std::vector<Segment>& segments) override {
    size_t total = 0;
    std::vector<kernels::PackSegment> table = Table(segments, &total);
    if (table.empty()) return;
    kernels::PackSegment* device_table = UploadTable(s, table, "Unpack");
    if (device_table == nullptr) return;
    Launched(kernels::LaunchUnpack(stream(s), src, device_table, table.size(), total), "Unpack");
    Check(cudaFreeAsync(device_table, stream(s)), "cudaFreeAsync in Unpack");
  }

  // --- compression -----------------------------------------------------------

  // The radix select's counts go to a scratch array from the stream-ordered
  // pool, freed on the stream after the write pass.
  void TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                    uint8_t* wire) override {
    if (n < 0 || k < 0 || k > n || n > int64_t{0xffffffff}) {
      RecordError(absl::InvalidArgumentError(
          absl::StrCat("TopkCompress(n=", n, ", k=", k, "): need 0 <= k <= n < 2^32")));
      return;
    }
    if (n == 0) return;
    const size_t count = static_cast<size_t>(n);
    void* scratch = nullptr;
    if (!Check(
            cudaMallocFromPoolAsync(&scratch, kernels::TopkScratchBytes(count), r_.pool, stream(s)),
            "cudaMallocFromPoolAsync in TopkCompress")) {
      return;
    }
    Launched(kernels::LaunchTopkCompress(stream(s), grad, residual, count, static_cast<size_t>(k),
                                         scratch, wire),
             "TopkCompress");
    Check(cudaFreeAsync(scratch, stream(s)), "cudaFreeAsync in TopkCompress");
  }

  // --- optimizer -------------------------------------------------------------

  void ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                   const float* grad, float* const* state, size_t n) override {
    // The CPU's own derivation (core/optimizer.cc), so both run on the same
    // float scalars. Like the CPU's ApplyUpdate it aborts on step < 1.
    const OptimizerScalars scalars = MakeOptimizerScalars(p, step);
    if (n == 0) return;
    kernels::UpdateArgs a;
    a.kind = static_cast<kernels::UpdateKind>(static_cast<int>(p.kind));
    a.scale_grad = scalars.scale_grad;
    a.grad_scale = scalars.grad_scale;
    a.has_weight_decay = scalars.has_weight_decay;
    a.weight_decay = scalars.weight_decay;
    a.has_momentum = scalars.has_momentum;
    a.momentum = scalars.momentum;
    a.neg_lr = scalars.neg_lr;
    a.nesterov = scalars.nesterov;
    a.first_step = scalars.first_step;
    a.one_minus_dampening = scalars.one_minus_dampening;
    a.decay = scalars.decay;
    a.beta1 = scalars.beta1;
    a.one_minus_beta1 = scalars.one_minus_beta1;
    a.beta2 = scalars.beta2;
    a.one_minus_beta2 = scalars.one_minus_beta2;
    a.bc2_sqrt = scalars.bc2_sqrt;
    a.neg_step_size = scalars.neg_step_size;
    a.eps = scalars.eps;
    a.centered = scalars.centered;
    a.alpha = scalars.alpha;
    a.one_minus_alpha = scalars.one_minus_alpha;
    a.neg_clr = scalars.neg_clr;

    // core/optimizer.h's slot order, by meaning.
    kernels::UpdateState st;
    switch (p.kind) {
      case OptimizerParams::Kind::kSgd:
        if (scalars.has_momentum) st.momentum_buffer = state[0];
        break;
      case OptimizerParams::Kind::kAdam:
      case OptimizerParams::Kind::kAdamW:
        st.exp_avg = state[0];
        st.exp_avg_sq = state[1];
        break;
      case OptimizerParams::Kind::kRmsprop: {
        int slot = 0;
        st.square_avg = state[slot++];
        if (scalars.has_momentum) st.momentum_buffer = state[slot++];
        if (scalars.centered) st.grad_avg = state[slot++];
        break;
      }
      case OptimizerParams::Kind::kAdagrad:
        st.sum = state[0];
        break;
    }
    Launched(kernels::LaunchApplyUpdate(stream(s), a, params, grad, st, n), "ApplyUpdate");
  }

  // --- layer kernels ---------------------------------------------------------
  // cuBLAS is column-major. A row-major matrix X [r, c] with leading dimension
  // c is, read column-major, X^T [c, r] with the same leading dimension. So
  // each row-major product C = A * B is computed as the column-major product
  // C^T = B^T * A^T, with the operands' transposes chosen below.

  // output [batch, out] = input [batch, in] * weight [out, in]^T + bias.
  // Column-major: output^T [out, batch] = weight [out, in] * input^T [in, batch].
  //   weight's memory read column-major is weight^T [in, out] (ld in): op T
  //     gives weight, m = out, k = in, lda = in;
  //   input's memory read column-major is input^T [in, batch] (ld in): op N,
  //     k = in, n = batch, ldb = in;
  //   C = output's memory, read column-major output^T [out, batch], ldc = out.
  // beta = 1 accumulates onto the bias rows written first (beta = 0 without
  // a bias: cuBLAS does not read C then).
  void Linear(Stream s, int batch, int in, int out, const float* input, const float* weight,
              const float* bias, float* output) override {
    if (!ValidSizes("Linear", batch, in, out)) return;
    if (batch == 0 || out == 0) return;
    if (bias != nullptr) {
      if (!Launched(kernels::LaunchBiasRows(stream(s), batch, out, bias, output), "Linear bias")) {
        return;
      }
    } else if (in == 0) {
      Launched(kernels::LaunchFill(stream(s), output, 0.0f,
                                   static_cast<size_t>(batch) * static_cast<size_t>(out)),
               "Linear");
      return;
    }
    if (in == 0) return;  // output = bias
    Gemm(s, kCublasOpT, kCublasOpN, /*m=*/out, /*n=*/batch, /*k=*/in, weight, /*lda=*/in, input,
         /*ldb=*/in, bias != nullptr ? 1.0f : 0.0f, output, /*ldc=*/out, "Linear");
  }

  void Relu(Stream s, float* v, size_t n) override {
    Launched(kernels::LaunchRelu(stream(s), v, n), "Relu");
  }

  // The per-row losses go to a scratch array from the stream-ordered pool,
  // freed on the stream after the mean is taken.
  void SoftmaxCrossEntropy(Stream s, const float* logits, const int32_t* y, int batch, int classes,
                           float* loss, float* dlogits) override {
    if (batch < 0 || classes < 0) {
      RecordError(absl::InvalidArgumentError(absl::StrCat(
          "SoftmaxCrossEntropy(batch=", batch, ", classes=", classes, "): negative size")));
      return;
    }
    float* row_loss = nullptr;
    if (batch > 0) {
      void* p = nullptr;
      if (!Check(cudaMallocFromPoolAsync(&p, static_cast<size_t>(batch) * sizeof(float), r_.pool,
                                         stream(s)),
                 "cudaMallocFromPoolAsync in SoftmaxCrossEntropy")) {
        return;
      }
      row_loss = static_cast<float*>(p);
    }
    Launched(kernels::LaunchSoftmaxCrossEntropy(stream(s), logits, y, batch, classes, row_loss,
                                                loss, dlogits),
             "SoftmaxCrossEntropy");
    if (row_loss != nullptr) {
      Check(cudaFreeAsync(row_loss, stream(s)), "cudaFreeAsync in SoftmaxCrossEntropy");
    }
  }

  void BiasGrad(Stream s, int batch, int out, const float* d_output, float* d_bias) override {
    if (!ValidSizes("BiasGrad", batch, 0, out)) return;
    Launched(kernels::LaunchBiasGrad(stream(s), batch, out, d_output, d_bias), "BiasGrad");
  }

  // d_weight [out, in] = d_output^T [out, batch] * input [batch, in].
  // Column-major: d_weight^T [in, out] = input^T [in, batch] * d_output [batch, out].
  //   input's memory read column-major is input^T [in, batch] (ld in): op N,
  //     m = in, k = batch, lda = in;
  //   d_output's memory read column-major is d_output^T [out, batch] (ld out):
  //     op T gives d_output [batch, out], k = batch, n = out, ldb = out;
  //   C = d_weight's memory, read column-major d_weight^T [in, out], ldc = in.
  // beta = 0: overwrites, as the CPU kernel does.
  void WeightGrad(Stream s, int batch, int in, int out, const float* d_output, const float* input,
                  float* d_weight) override {
    if (!ValidSizes("WeightGrad", batch, in, out)) return;
    if (in == 0 || out == 0) return;
    if (batch == 0) {  // no rows: the zero matrix (cuBLAS is not asked for k = 0)
      Launched(kernels::LaunchFill(stream(s), d_weight, 0.0f,
                                   static_cast<size_t>(out) * static_cast<size_t>(in)),
               "WeightGrad");
      return;
    }
    Gemm(s, kCublasOpN, kCublasOpT, /*m=*/in, /*n=*/out, /*k=*/batch, input, /*lda=*/in, d_output,
         /*ldb=*/out, 0.0f, d_weight, /*ldc=*/in, "WeightGrad");
  }

  // d_input [batch, in] = d_output [batch, out] * weight [out, in].
  // Column-major: d_input^T [in, batch] = weight^T [in, out] * d_output^T [out, batch].
  //   weight's memory read column-major is weight^T [in, out] (ld in): op N,
  //     m = in, k = out, lda = in;
  //   d_output's memory read column-major is d_output^T [out, batch] (ld out):
  //     op N, k = out, n = batch, ldb = out;
  //   C = d_input's memory, read column-major d_input^T [in, batch], ldc = in.
  // beta = 0: overwrites, as the CPU kernel does.
  void InputGrad(Stream s, int batch, int in, int out, const float* d_output, const float* weight,
                 float* d_input) override {
    if (!ValidSizes("InputGrad", batch, in, out)) return;
    if (batch == 0 || in == 0) return;
    if (out == 0) {  // an empty sum: zeros
      Launched(kernels::LaunchFill(stream(s), d_input, 0.0f,
                                   static_cast<size_t>(batch) * static_cast<size_t>(in)),
               "InputGrad");
      return;
    }
    Gemm(s, kCublasOpN, kCublasOpN, /*m=*/in, /*n=*/batch, /*k=*/out, weight, /*lda=*/in, d_output,
         /*ldb=*/out, 0.0f, d_input, /*ldc=*/in, "InputGrad");
  }

  void ReluMask(Stream s, const float* activation, float* d, size_t n) override {
    Launched(kernels::LaunchReluMask(stream(s), activation, d, n), "ReluMask");
  }

 private:
  cudaStream_t stream(Stream s) const { return r_.streams[static_cast<int>(s)]; }
  CublasHandle handle(Stream s) const { return r_.handles[static_cast<int>(s)]; }

  static kernels::HalfKind Kind(HalfType t) {
    return t == HalfType::kBF16 ? kernels::kBF16 : kernels::kF16;
  }

  void RecordError(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok()) first_error_ = std::move(status);
  }

  absl::Status FirstError() {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

  // Records a failed CUDA call as the device's error; true if it succeeded.
  bool Check(cudaError_t e, absl::string_view op) {
    if (e == cudaSuccess) return true;
    ClearLastError();
    RecordError(absl::InternalError(absl::StrCat("CUDA: ", cudaGetErrorString(e), " in ", op)));
    return false;
  }

  // The same for a launcher's result (a cudaError_t as int).
  bool Launched(int e, absl::string_view op) { return Check(static_cast<cudaError_t>(e), op); }

  // Negative sizes are a caller's bug, recorded like a bad launch.
  bool ValidSizes(const char* op, int batch, int in, int out) {
    if (batch >= 0 && in >= 0 && out >= 0) return true;
    RecordError(absl::InvalidArgumentError(
        absl::StrCat(op, "(batch=", batch, ", in=", in, ", out=", out, "): negative size")));
    return false;
  }

  // C = A' * B' + beta * C, column-major, alpha = 1, on stream s (see the
  // derivations at Linear, WeightGrad and InputGrad).
  void Gemm(Stream s, CublasOperation trans_a, CublasOperation trans_b, int m, int n, int k,
            const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
            const char* op) {
    const float alpha = 1.0f;
    // The handle is this stream's own and already bound to it; setting the
    // stream again costs nothing and keeps the binding local to the call.
    CublasStatus status = r_.cublas.set_stream(handle(s), stream(s));
    if (status == kCublasSuccess) {
      status = r_.cublas.sgemm(handle(s), trans_a, trans_b, m, n, k, &alpha, a, lda, b, ldb, &beta,
                               c, ldc);
    }
    if (status != kCublasSuccess) {
      ClearLastError();
      RecordError(absl::InternalError(absl::StrCat("CUDA: cuBLAS ", r_.cublas.StatusString(status),
                                                   " in cublasSgemm (", op, ")")));
    }
  }

  // The non-empty segments with their offsets in the packed buffer.
  static std::vector<kernels::PackSegment> Table(const std::vector<Segment>& segments,
                                                 size_t* total) {
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

  // A device copy of `table`, allocated from the stream-ordered pool on
  // stream s (the caller frees it on s after the kernel). The host side is
  // pageable: cudaMemcpyAsync has consumed it (staged it, or copied it) by the
  // time it returns, so `table` may go away right after. Null on failure,
  // which is recorded.
  kernels::PackSegment* UploadTable(Stream s, const std::vector<kernels::PackSegment>& table,
                                    const char* op) {
    const size_t bytes = table.size() * sizeof(kernels::PackSegment);
    void* p = nullptr;
    if (!Check(cudaMallocFromPoolAsync(&p, bytes, r_.pool, stream(s)),
               absl::StrCat("cudaMallocFromPoolAsync in ", op))) {
      return nullptr;
    }
    if (!Check(cudaMemcpyAsync(p, table.data(), bytes, cudaMemcpyHostToDevice, stream(s)),
               absl::StrCat("cudaMemcpyAsync in ", op))) {
      cudaFreeAsync(p, stream(s));
      ClearLastError();
      return nullptr;
    }
    return static_cast<kernels::PackSegment*>(p);
  }

  // Calls copy(offset, bytes) for consecutive pieces of the host range
  // [host, host + bytes), each wholly inside one registered region or wholly
  // outside all of them, until a copy returns false. At most three pieces
  // (pageable head, pinned middle, pageable tail) for a range inside one
  // PinHost buffer; a range over several regions gets more.
  template <typename CopyFn>
  void HostPieces(const void* host, size_t bytes, CopyFn copy) {
    if (bytes == 0) return;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(host);
    const uintptr_t end = begin + bytes;
    std::vector<std::pair<uintptr_t, uintptr_t>> pinned;  // overlapping regions, clipped
    {
      absl::MutexLock lock(&pinned_mu_);
      for (const PinnedRegion& r : pinned_) {
        const uintptr_t rb = reinterpret_cast<uintptr_t>(r.base);
        const uintptr_t re = rb + r.bytes;
        if (rb < end && begin < re) pinned.push_back({std::max(rb, begin), std::min(re, end)});
      }
    }
    std::sort(pinned.begin(), pinned.end());
    uintptr_t at = begin;
    for (const auto& [pb, pe] : pinned) {
      if (at < pb && !copy(at - begin, pb - at)) return;  // pageable gap
      if (!copy(pb - begin, pe - pb)) return;             // pinned
      at = pe;
    }
    if (at < end) copy(at - begin, end - at);  // pageable tail
  }

  // A PinHost registration: the caller's pointer and the whole pages
  // registered for it.
  struct PinnedRegion {
    void* p;
    void* base;
    size_t bytes;
  };

  Resources r_;
  absl::Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  absl::Mutex pinned_mu_;
  std::vector<PinnedRegion> pinned_ ABSL_GUARDED_BY(pinned_mu_);
};

// Creates the device's streams, cuBLAS handles and pool; `r` keeps whatever
// was created, for CudaDevice::Release on failure.
absl::Status CreateResources(CudaDevice::Resources* r) {
  cudaError_t e = cudaSetDevice(0);
  if (e != cudaSuccess) return Unusable(absl::StrCat("cudaSetDevice(0): ", CudaError(e)));
  for (int i = 0; i < kNumStreams; ++i) {
    e = cudaStreamCreateWithFlags(&r->streams[i], cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      r->streams[i] = nullptr;
      return Unusable(absl::StrCat("cudaStreamCreate: ", CudaError(e)));
    }
    CublasStatus status = r->cublas.create(&r->handles[i]);
    if (status != kCublasSuccess) {
      r->handles[i] = nullptr;
      return Unusable(absl::StrCat("cublasCreate: ", r->cublas.StatusString(status)));
    }
    status = r->cublas.set_math_mode(r->handles[i], kCublasDefaultMath);
    if (status == kCublasSuccess) status = r->cublas.set_stream(r->handles[i], r->streams[i]);
    if (status != kCublasSuccess) {
      return Unusable(
          absl::StrCat("cublasSetMathMode/SetStream: ", r->cublas.StatusString(status)));
    }
  }
  // A pool of our own for the small stream-ordered allocations (Pack tables,
  // per-row losses). It keeps its memory between uses instead of returning it
  // at every synchronisation as the default pool does, and it may not reuse a
  // block freed on another stream by making one stream wait for the other
  // (that would order the copy streams behind compute): it grows instead.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  e = cudaMemPoolCreate(&r->pool, &props);
  if (e != cudaSuccess) {
    r->pool = nullptr;
    return Unusable(absl::StrCat("cudaMemPoolCreate: ", CudaError(e)));
  }
  uint64_t keep = UINT64_MAX;
  e = cudaMemPoolSetAttribute(r->pool, cudaMemPoolAttrReleaseThreshold, &keep);
  int no = 0;
  if (e == cudaSuccess) {
    e = cudaMemPoolSetAttribute(r->pool, cudaMemPoolReuseAllowInternalDependencies, &no);
  }
  if (e != cudaSuccess) return Unusable(absl::StrCat("cudaMemPoolSetAttribute: ", CudaError(e)));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice() {
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  ClearLastError();
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    ClearLastError();
    return Unusable(absl::StrCat(driver == 0 ? "no NVIDIA driver is installed; " : "",
                                 "cudaGetDeviceCount: ", CudaError(e), " (CUDA runtime ",
                                 VersionString(runtime), ", driver ",
                                 driver == 0 ? "none" : VersionString(driver), ")"));
  }
  if (count == 0) return Unusable("the driver reports no CUDA device");
  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    ClearLastError();
    return Unusable(absl::StrCat("cudaGetDeviceProperties(0): ", CudaError(e)));
  }
  if (prop.major < 8) {
    return Unusable(absl::StrCat("device 0 (", prop.name, ") has compute capability ", prop.major,
                                 ".", prop.minor,
                                 "; Tessel's CUDA kernels need 8.0 (Ampere) or newer"));
  }
  int pools = 0;
  e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0);
  if (e != cudaSuccess || pools == 0) {
    ClearLastError();
    return Unusable(
        absl::StrCat("device 0 (", prop.name, ") does not support stream-ordered memory pools"));
  }
  absl::StatusOr<Cublas> cublas = LoadCublas();
  if (!cublas.ok()) return cublas.status();

  CudaDevice::Resources r;
  r.cublas = *cublas;
  r.description = absl::StrCat("cuda:0 ", prop.name, " (sm_", prop.major, prop.minor, ", runtime ",
                               VersionString(runtime), ", driver ", VersionString(driver), ")");
  if (absl::Status s = CreateResources(&r); !s.ok()) {
    CudaDevice::Release(&r);
    return s;
  }
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(std::move(r)));
}

}  // namespace

// OpenDevice("cuda") reaches the device through this registration, made when
// the binary that links //gpu:cuda_device (alwayslink) starts.
[[maybe_unused]] static const bool registered = RegisterCudaFactory(&OpenCudaDevice);

}  // namespace tessel::gpu
