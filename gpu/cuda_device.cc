// The CUDA device's memory, streams, events and copies, and how it opens
// (contract: cuda_device.h). Its kernels are in cuda_device_compute.cc.
#include "gpu/cuda_device.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gpu/kernels.h"

namespace tessel::gpu {
namespace {

// Why OpenDevice("cuda") cannot give a device.
absl::Status Unusable(absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", why));
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

}  // namespace

std::string CudaErrorText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

CudaDevice* CudaDevice::From(Device* device) {
  return device != nullptr && device->kind() == "cuda" ? static_cast<CudaDevice*>(device) : nullptr;
}

CudaDevice::~CudaDevice() {
  for (cudaStream_t s : streams_) {
    if (s != nullptr) cudaStreamSynchronize(s);
  }
  for (cudaStream_t& s : streams_) {
    if (s != nullptr) cudaStreamDestroy(s);
    s = nullptr;
  }
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
  pool_ = nullptr;
  ClearLastError();
}

bool CudaDevice::Check(cudaError_t e, absl::string_view op) {
  if (e == cudaSuccess) return true;
  ClearLastError();
  RecordError(absl::InternalError(absl::StrCat("CUDA: ", cudaGetErrorString(e), " in ", op)));
  return false;
}

// --- memory ------------------------------------------------------------------

absl::StatusOr<void*> CudaDevice::Alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaSuccess) return p;
  ClearLastError();
  const std::string what = absl::StrCat("CUDA: ", CudaErrorText(e), " in cudaMalloc(", bytes,
                                        " bytes) on ", description_);
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
  return absl::InternalError(what);
}

// cudaFree waits for the device's outstanding work, so memory still used by
// enqueued work is not freed under it.
void CudaDevice::Free(void* p) {
  if (p != nullptr) Check(cudaFree(p), "cudaFree");
}

// Registers the whole pages inside [p, p + bytes) only (PinnedRegions says
// why); the host copies are split at the registered regions' edges.
absl::Status CudaDevice::PinHost(void* p, size_t bytes) {
  const internal::PageRange pages =
      internal::PinnedRegions::WholePages(p, bytes, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  if (pages.empty()) return absl::OkStatus();  // no whole page: nothing to gain
  const cudaError_t e = cudaHostRegister(pages.base, pages.bytes, cudaHostRegisterDefault);
  if (e == cudaSuccess) {
    pinned_.Add(p, pages);
    return absl::OkStatus();
  }
  ClearLastError();
  const std::string what =
      absl::StrCat("CUDA: ", CudaErrorText(e), " in cudaHostRegister(", bytes, " bytes)");
  if (e == cudaErrorHostMemoryAlreadyRegistered) return absl::AlreadyExistsError(what);
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
  return absl::InternalError(what);
}

// Unpinning a range that was never pinned (PinHost of 0 bytes, or of less
// than a page) is not an error worth reporting.
void CudaDevice::UnpinHost(void* p) {
  void* base = pinned_.Remove(p);
  if (base != nullptr && cudaHostUnregister(base) != cudaSuccess) ClearLastError();
}

// --- streams and events --------------------------------------------------------

std::unique_ptr<Event> CudaDevice::NewEvent() {
  cudaEvent_t e = nullptr;
  // Default flags: timing enabled (ElapsedMs), spin-waiting synchronisation.
  if (!Check(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate")) e = nullptr;
  return std::make_unique<CudaEvent>(e);
}

void CudaDevice::Record(Stream s, Event* e) {
  if (Handle(e) == nullptr) return;  // creating it failed: already the first error
  Check(cudaEventRecord(Handle(e), stream(s)), "cudaEventRecord");
}

// A CUDA event never recorded is complete, so waiting on it is a no-op, as
// device.h requires.
void CudaDevice::Wait(Stream s, const Event* e) {
  if (Handle(e) == nullptr) return;
  Check(cudaStreamWaitEvent(stream(s), Handle(e), 0), "cudaStreamWaitEvent");
}

absl::Status CudaDevice::Synchronize(const Event* e) {
  if (Handle(e) != nullptr) Check(cudaEventSynchronize(Handle(e)), "cudaEventSynchronize");
  return first_error_.Get();
}

absl::Status CudaDevice::SynchronizeStream(Stream s) {
  Check(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
  return first_error_.Get();
}

absl::StatusOr<double> CudaDevice::ElapsedMs(const Event* from, const Event* to) {
  TESSEL_RETURN_IF_ERROR(first_error_.Get());
  if (Handle(from) == nullptr || Handle(to) == nullptr) {
    return absl::FailedPreconditionError("ElapsedMs: an event could not be created");
  }
  float ms = 0;
  const cudaError_t e = cudaEventElapsedTime(&ms, Handle(from), Handle(to));
  if (e == cudaSuccess) return static_cast<double>(ms);
  ClearLastError();
  if (e == cudaErrorNotReady || e == cudaErrorInvalidResourceHandle) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ElapsedMs: an event was not recorded or not reached (CUDA: ", CudaErrorText(e), ")"));
  }
  return absl::InternalError(absl::StrCat("CUDA: ", CudaErrorText(e), " in cudaEventElapsedTime"));
}

// --- copies --------------------------------------------------------------------

void CudaDevice::CopyToHost(Stream s, void* host, const void* device, size_t bytes) {
  pinned_.ForEachPiece(host, bytes, [&](size_t at, size_t n) {
    return Check(
        cudaMemcpyAsync(static_cast<char*>(host) + at, static_cast<const char*>(device) + at, n,
                        cudaMemcpyDeviceToHost, stream(s)),
        "CopyToHost");
  });
}

void CudaDevice::CopyToDevice(Stream s, void* device, const void* host, size_t bytes) {
  pinned_.ForEachPiece(host, bytes, [&](size_t at, size_t n) {
    return Check(
        cudaMemcpyAsync(static_cast<char*>(device) + at, static_cast<const char*>(host) + at, n,
                        cudaMemcpyHostToDevice, stream(s)),
        "CopyToDevice");
  });
}

// dst and src must not overlap (cudaMemcpy's rule).
void CudaDevice::CopyOnDevice(Stream s, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(s)), "CopyOnDevice");
}

void CudaDevice::Fill(Stream s, float* dst, float value, size_t n) {
  Launched(kernels::LaunchFill(stream(s), dst, value, n), "Fill");
}

// --- opening -------------------------------------------------------------------

absl::Status CudaDevice::CreateResources() {
  cudaError_t e = cudaSetDevice(0);
  if (e != cudaSuccess) return Unusable(absl::StrCat("cudaSetDevice(0): ", CudaErrorText(e)));
  for (cudaStream_t& s : streams_) {
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      s = nullptr;
      return Unusable(absl::StrCat("cudaStreamCreate: ", CudaErrorText(e)));
    }
  }
  // A pool of our own for the small stream-ordered allocations (Pack tables,
  // top-k counts, the layers' scratch). It keeps its memory between uses
  // instead of returning it at every synchronisation as the default pool
  // does, and it may not reuse a block freed on another stream by making one
  // stream wait for the other (that would order the copy streams behind
  // compute): it grows instead.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  e = cudaMemPoolCreate(&pool_, &props);
  if (e != cudaSuccess) {
    pool_ = nullptr;
    return Unusable(absl::StrCat("cudaMemPoolCreate: ", CudaErrorText(e)));
  }
  uint64_t keep = UINT64_MAX;
  e = cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep);
  int no = 0;
  if (e == cudaSuccess) {
    e = cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &no);
  }
  if (e != cudaSuccess) {
    return Unusable(absl::StrCat("cudaMemPoolSetAttribute: ", CudaErrorText(e)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Device>> CudaDevice::Open() {
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
                                 "cudaGetDeviceCount: ", CudaErrorText(e), " (CUDA runtime ",
                                 VersionString(runtime), ", driver ",
                                 driver == 0 ? "none" : VersionString(driver), ")"));
  }
  if (count == 0) return Unusable("the driver reports no CUDA device");
  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    ClearLastError();
    return Unusable(absl::StrCat("cudaGetDeviceProperties(0): ", CudaErrorText(e)));
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
  std::unique_ptr<CudaDevice> device(new CudaDevice());
  device->description_ =
      absl::StrCat("cuda:0 ", prop.name, " (sm_", prop.major, prop.minor, ", runtime ",
                   VersionString(runtime), ", driver ", VersionString(driver), ")");
  TESSEL_RETURN_IF_ERROR(device->CreateResources());  // the destructor releases a partial one
  return std::unique_ptr<Device>(std::move(device));
}

// OpenDevice("cuda") reaches the device through this registration, made when
// the binary that links //gpu:cuda_device (alwayslink) starts.
[[maybe_unused]] static const bool registered = RegisterCudaFactory(&CudaDevice::Open);

}  // namespace tessel::gpu
