#include "gpu/device.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace tessel::gpu {
namespace {

std::atomic<DeviceFactory> g_cuda_factory{nullptr};

}  // namespace

bool RegisterCudaFactory(DeviceFactory factory) {
  g_cuda_factory.store(factory);
  return true;
}

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view kind) {
  if (kind == "host") return NewHostDevice();
  if (kind == "cuda") {
    DeviceFactory factory = g_cuda_factory.load();
    if (factory == nullptr) {
      return absl::FailedPreconditionError(
          "this binary was built without the CUDA device (it does not link //gpu:cuda_device)");
    }
    return factory();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", kind, "' (known: host, cuda)"));
}

}  // namespace tessel::gpu
