#include "model/device_layers.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "gpu/host_device.h"
#include "model/host_layers.h"

namespace tessel::model {
namespace {

std::atomic<DeviceLayersFactory> g_cuda_layers{nullptr};

}  // namespace

bool RegisterCudaLayers(DeviceLayersFactory factory) {
  g_cuda_layers.store(factory);
  return true;
}

absl::StatusOr<std::unique_ptr<DeviceLayers>> OpenDeviceLayers(gpu::Device* device) {
  if (gpu::HostDevice* host = gpu::HostDevice::From(device); host != nullptr) {
    return NewHostLayers(host);
  }
  if (device != nullptr && device->kind() == "cuda") {
    DeviceLayersFactory factory = g_cuda_layers.load();
    if (factory == nullptr) {
      return absl::FailedPreconditionError(
          "this binary was built without the model's CUDA layers (it does not link "
          "//model:cuda_layers)");
    }
    return factory(device);
  }
  return absl::InvalidArgumentError(absl::StrCat("no layers for device '",
                                                 device != nullptr ? device->kind() : "null",
                                                 "' (known: host, cuda)"));
}

}  // namespace tessel::model
