// DetectCuda against whatever this machine has: no runtime library, a runtime
// without a driver or device, or a GPU. The binary itself links no CUDA.
#include "gpu/detect.h"

#include <glob.h>
#include <link.h>

#include <iostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

// The shared objects loaded in this process whose path contains `part`.
std::vector<std::string> LoadedObjects(const std::string& part) {
  struct Search {
    std::string part;
    std::vector<std::string> found;
  } search{part, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (name.find(s->part) != std::string::npos) s->found.push_back(name);
        return 0;
      },
      &search);
  return search.found;
}

// A CUDA runtime library of an installed toolkit, or "" when there is none.
std::string ToolkitRuntimeLibrary() {
  for (const char* pattern : {"/usr/local/cuda/lib64/libcudart.so.*",
                              "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.*"}) {
    glob_t g;
    if (glob(pattern, 0, nullptr, &g) == 0 && g.gl_pathc > 0) {
      std::string path = g.gl_pathv[0];
      globfree(&g);
      return path;
    }
    globfree(&g);
  }
  return "";
}

TEST(DetectTest, AMissingRuntimeLibraryIsAReasonNotAFailure) {
  CudaInfo info = DetectCuda({"libtessel-no-such-cudart.so.1", "/nonexistent/libcudart.so"});
  EXPECT_FALSE(info.available);
  EXPECT_EQ(info.devices, 0);
  EXPECT_EQ(info.runtime_version, 0);
  EXPECT_TRUE(info.library.empty());
  EXPECT_NE(info.reason.find("no CUDA runtime library"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("libtessel-no-such-cudart.so.1"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("/nonexistent/libcudart.so"), std::string::npos) << info.reason;
}

TEST(DetectTest, ALibraryThatIsNotTheRuntimeIsRefused) {
  // libm is loaded in every C++ process and has no cudaGetDeviceCount.
  CudaInfo info = DetectCuda({"libm.so.6"});
  EXPECT_FALSE(info.available);
  EXPECT_EQ(info.library, "libm.so.6");
  EXPECT_NE(info.reason.find("not a CUDA runtime library"), std::string::npos) << info.reason;
}

// Taken before main, so before any test has called DetectCuda.
const std::vector<std::string> kCudaObjectsAtStart = LoadedObjects("libcudart");

TEST(DetectTest, NothingCudaIsLinked) {
  // This binary, like tessel-server, has no CUDA in its link: libcudart is
  // mapped only once DetectCuda loads it.
  EXPECT_TRUE(kCudaObjectsAtStart.empty()) << kCudaObjectsAtStart[0];
}

TEST(DetectTest, TheDefaultSearchExplainsItselfEitherWay) {
  CudaInfo info = DetectCuda();
  EXPECT_FALSE(info.reason.empty());
  if (info.available) {
    EXPECT_GT(info.devices, 0);
    EXPECT_GT(info.runtime_version, 0);
    EXPECT_GT(info.driver_version, 0);
  } else {
    EXPECT_EQ(info.devices, 0);
  }
  std::cout << "DetectCuda(): available=" << info.available << " library=" << info.library
            << " reason: " << info.reason << "\n";
}

TEST(DetectTest, AToolkitRuntimeLoadedByPathReportsItsVersion) {
  const std::string path = ToolkitRuntimeLibrary();
  if (path.empty()) GTEST_SKIP() << "no CUDA toolkit under /usr/local/cuda";
  CudaInfo info = DetectCuda({path});
  EXPECT_EQ(info.library, path);
  EXPECT_GT(info.runtime_version, 0) << info.reason;
  EXPECT_FALSE(info.reason.empty());
  EXPECT_FALSE(LoadedObjects("libcudart").empty());
  if (!info.available) {
    EXPECT_NE(info.reason.find("CUDA runtime"), std::string::npos) << info.reason;
  }
  std::cout << "DetectCuda({" << path << "}): " << info.reason << "\n";
}

}  // namespace
}  // namespace tessel
