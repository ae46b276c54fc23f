// Finds CUDA devices at run time without linking CUDA.
//
// The CUDA runtime library (libcudart.so.N) is loaded with dlopen when
// DetectCuda() is called, and only the few calls detection needs are looked up
// in it. A binary built with this library therefore starts on machines with no
// CUDA at all (the CPU image: no libcudart, no driver) and reports why no device
// is usable; with the runtime library present (the GPU image, or the CUDA
// toolkit on the library path) and a driver and device, it reports the device.
//
// The library is loaded by gpu/internal/dynamic_library.h (the loader
// gpu/cublas.h shares) and never closed: the CUDA runtime keeps threads and
// atexit handlers that must outlive it.
//
// Thread-compatible; DetectCuda() may be called from any thread.
//
// Example:
//   CudaInfo cuda = DetectCuda();
//   if (!cuda.available) LOG << "optimizer on CPU: " << cuda.reason;
#ifndef TESSEL_GPU_DETECT_H_
#define TESSEL_GPU_DETECT_H_

#include <string>
#include <vector>

namespace tessel {

struct CudaInfo {
  bool available = false;
  int devices = 0;
  int runtime_version = 0;  // e.g. 13000; 0 when no runtime library was loaded
  int driver_version = 0;   // e.g. 13000; 0 when no driver is installed
  std::string library;      // the runtime library that was loaded, as named to dlopen
  std::string reason;       // why no device is usable, or device 0's name and capability
};

// The runtime library names DetectCuda() tries, in order: the sonames of CUDA
// 13, 12 and 11, then the unversioned development link.
std::vector<std::string> DefaultCudaRuntimeLibraries();

// Loads the first of `libraries` that dlopen finds (a soname searched on the
// library path, or a path) and asks it for devices. Never fails: when no device
// is usable, `available` is false and `reason` says why (no runtime library, no
// driver, no device, or the runtime's error).
CudaInfo DetectCuda(const std::vector<std::string>& libraries);

// DetectCuda(DefaultCudaRuntimeLibraries()).
CudaInfo DetectCuda();

}  // namespace tessel

#endif  // TESSEL_GPU_DETECT_H_
