// The cuBLAS loader without a GPU: what a missing or wrong library says, and
// that the toolkit's real cuBLAS (where installed) has every function Tessel
// calls. Loading cuBLAS needs no device; nothing here calls into it.
#include "gpu/cublas.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace tessel::gpu {
namespace {

TEST(CublasLibraryTest, AMissingLibraryIsFailedPreconditionWithWhatToDo) {
  auto c = CublasLibrary::Load({"libtessel-no-such-cublas.so.13", "/nonexistent/libcublas.so"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(c.status().message());
  EXPECT_NE(m.find("cuBLAS cannot be loaded"), std::string::npos) << m;
  EXPECT_NE(m.find("libtessel-no-such-cublas.so.13"), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/libcublas.so"), std::string::npos) << m;
  EXPECT_NE(m.find("install cuBLAS 13 or add its directory to LD_LIBRARY_PATH"), std::string::npos)
      << m;
}

TEST(CublasLibraryTest, ALibraryThatIsNotCublasNamesEveryRequiredFunction) {
  // libm loads everywhere and has none of them.
  auto c = CublasLibrary::Load({"libm.so.6"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(c.status().message());
  for (const char* f : {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                        "cublasSetMathMode", "cublasSgemm_v2"}) {
    EXPECT_NE(m.find(f), std::string::npos) << f << " in " << m;
  }
  // Optional: not named.
  EXPECT_EQ(m.find("cublasGetStatusString"), std::string::npos) << m;
}

TEST(CublasLibraryTest, TheDefaultSearchEndsAtTheToolkitPath) {
  const std::vector<std::string> libraries = CublasLibrary::DefaultLibraries();
  ASSERT_FALSE(libraries.empty());
  EXPECT_EQ(libraries.front(), "libcublas.so.13");
  EXPECT_EQ(libraries.back(), "/usr/local/cuda/lib64/libcublas.so.13");
}

// The symbol table is complete: the real library resolves every function,
// the optional one included.
TEST(CublasLibraryTest, TheToolkitsCublasHasEveryFunction) {
  const std::string path = "/usr/local/cuda/lib64/libcublas.so.13";
  if (access(path.c_str(), R_OK) != 0) GTEST_SKIP() << "no " << path;
  auto c = CublasLibrary::Load({path});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->library, path);
  EXPECT_NE(c->create, nullptr);
  EXPECT_NE(c->destroy, nullptr);
  EXPECT_NE(c->set_stream, nullptr);
  EXPECT_NE(c->set_math_mode, nullptr);
  EXPECT_NE(c->sgemm, nullptr);
  ASSERT_NE(c->status_string, nullptr);
  // A lookup of a constant string: safe without a device.
  // cuBLAS's own words ("success"), then the code.
  const std::string ok = c->StatusString(kCublasSuccess);
  EXPECT_NE(ok.find(" (0)"), std::string::npos) << ok;
  EXPECT_NE(ok, "status 0") << ok;
}

TEST(CublasLibraryTest, StatusStringWithoutTheOptionalFunction) {
  CublasLibrary c;
  EXPECT_EQ(c.StatusString(7), "status 7");
}

}  // namespace
}  // namespace tessel::gpu
