#include "gpu/detect.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/internal/dynamic_library.h"

namespace tessel {
namespace {

// The CUDA runtime's C API as far as detection needs it. cudaError_t is a C
// enum (int-sized); 0 is cudaSuccess.
using IntOutFn = int (*)(int*);
using ErrorStringFn = const char* (*)(int);
using AttributeFn = int (*)(int*, int, int);
using PropertiesFn = int (*)(void*, int);

constexpr int kAttrComputeCapabilityMajor = 75;  // cudaDevAttrComputeCapabilityMajor
constexpr int kAttrComputeCapabilityMinor = 76;  // cudaDevAttrComputeCapabilityMinor

// cudaDeviceProp starts with `char name[256]` in every CUDA release; the rest of
// the struct grows between releases, so it is written into a buffer far larger
// than any release's struct (about 1 KiB in CUDA 13).
constexpr size_t kPropertiesBufferBytes = 16384;
constexpr size_t kNameBytes = 256;

std::string VersionText(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

}  // namespace

std::vector<std::string> DefaultCudaRuntimeLibraries() {
  return {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
}

CudaInfo DetectCuda(const std::vector<std::string>& libraries) {
  using gpu::internal::DynamicLibrary;
  using gpu::internal::Optional;
  using gpu::internal::Required;
  CudaInfo info;
  absl::StatusOr<DynamicLibrary> lib = DynamicLibrary::OpenFirst(libraries);
  if (!lib.ok()) {
    info.reason = absl::StrCat("no CUDA runtime library (", lib.status().message(), ")");
    return info;
  }
  info.library = lib->name();

  IntOutFn runtime_version = nullptr, driver_version = nullptr, device_count = nullptr;
  ErrorStringFn error_string = nullptr;
  AttributeFn attribute = nullptr;
  PropertiesFn properties = nullptr, properties_v1 = nullptr;
  const absl::Status resolved = lib->Resolve({Required("cudaRuntimeGetVersion", &runtime_version),
                                              Required("cudaGetDeviceCount", &device_count),
                                              Optional("cudaDriverGetVersion", &driver_version),
                                              Optional("cudaGetErrorString", &error_string),
                                              Optional("cudaDeviceGetAttribute", &attribute),
                                              Optional("cudaGetDeviceProperties_v2", &properties),
                                              Optional("cudaGetDeviceProperties", &properties_v1)});
  if (!resolved.ok()) {
    info.reason =
        absl::StrCat(info.library, " is not a CUDA runtime library (", resolved.message(), ")");
    return info;
  }
  runtime_version(&info.runtime_version);
  if (driver_version != nullptr) driver_version(&info.driver_version);

  int n = 0;
  const int e = device_count(&n);
  if (e != 0) {
    const char* text = error_string != nullptr ? error_string(e) : nullptr;
    info.reason = absl::StrCat(
        "no usable CUDA device (cudaGetDeviceCount error ", e, ": ",
        text != nullptr ? text : "unknown error", "; CUDA runtime ",
        VersionText(info.runtime_version), " from ", info.library,
        info.driver_version == 0
            ? "; no CUDA driver installed (libcuda.so.1)"
            : absl::StrCat("; driver supports CUDA ", VersionText(info.driver_version)),
        ")");
    return info;
  }
  if (n <= 0) {
    info.reason = absl::StrCat("no CUDA device (CUDA runtime ", VersionText(info.runtime_version),
                               " from ", info.library, ")");
    return info;
  }
  info.available = true;
  info.devices = n;

  std::string name = "CUDA device 0";
  if (properties == nullptr) properties = properties_v1;
  if (properties != nullptr) {
    std::vector<char> buffer(kPropertiesBufferBytes, 0);  // operator new: aligned for any type
    if (properties(buffer.data(), 0) == 0) {
      name.assign(buffer.data(), strnlen(buffer.data(), kNameBytes));
    }
  }
  std::string capability;
  int major = 0, minor = 0;
  if (attribute != nullptr && attribute(&major, kAttrComputeCapabilityMajor, 0) == 0 &&
      attribute(&minor, kAttrComputeCapabilityMinor, 0) == 0) {
    capability = absl::StrCat(", compute capability ", major, ".", minor);
  }
  info.reason =
      absl::StrCat(name, capability, "; ", n, n == 1 ? " device" : " devices", "; CUDA runtime ",
                   VersionText(info.runtime_version), " from ", info.library);
  return info;
}

CudaInfo DetectCuda() { return DetectCuda(DefaultCudaRuntimeLibraries()); }

}  // namespace tessel
