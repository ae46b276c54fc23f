// The demo MLP's layers on the host device (device_layers.h): each call is
// model/layer_kernels.h's function of the same name, run as a task on the
// host device's stream thread, so the results are the CPU's bit for bit.
//
// Each stream has its own scratch (the transposes of Linear and WeightGrad),
// touched only by that stream's thread.
//
// Thread safety: as device_layers.h.
//
// Example:
//   std::unique_ptr<gpu::Device> d = gpu::NewHostDevice();
//   std::unique_ptr<DeviceLayers> layers = NewHostLayers(gpu::HostDevice::From(d.get()));
#ifndef TESSEL_MODEL_HOST_LAYERS_H_
#define TESSEL_MODEL_HOST_LAYERS_H_

#include <memory>

#include "gpu/host_device.h"
#include "model/device_layers.h"

namespace tessel::model {

// `device` must not be null and must outlive the layers.
std::unique_ptr<DeviceLayers> NewHostLayers(gpu::HostDevice* device);

}  // namespace tessel::model

#endif  // TESSEL_MODEL_HOST_LAYERS_H_
