#include "gpu/internal/dynamic_library.h"

#include <string>

#include "gtest/gtest.h"

namespace tessel::gpu::internal {
namespace {

void Marker() {}

TEST(DynamicLibraryTest, NoCandidateLoadsIsNotFoundNamingEach) {
  auto lib = DynamicLibrary::OpenFirst({"libtessel-no-such.so.1", "/nonexistent/libx.so"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kNotFound);
  const std::string m(lib.status().message());
  EXPECT_NE(m.find("tried libtessel-no-such.so.1, /nonexistent/libx.so"), std::string::npos) << m;
  // dlerror's reason for each.
  EXPECT_NE(m.find("libtessel-no-such.so.1: cannot open"), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/libx.so: cannot open"), std::string::npos) << m;
  EXPECT_FALSE(DynamicLibrary::OpenFirst({}).ok());
}

TEST(DynamicLibraryTest, TheFirstThatLoadsIsKept) {
  auto lib = DynamicLibrary::OpenFirst({"libtessel-no-such.so.1", "libm.so.6", "libc.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ(lib->name(), "libm.so.6");
  EXPECT_NE(lib->Symbol("cos"), nullptr);
  EXPECT_EQ(lib->Symbol("tessel_no_such_symbol"), nullptr);
}

TEST(DynamicLibraryTest, ResolveFillsTheTableAndNamesEveryMissingRequiredSymbol) {
  auto lib = DynamicLibrary::OpenFirst({"libm.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status();
  double (*cos_fn)(double) = nullptr;
  double (*sqrt_fn)(double) = nullptr;
  void (*absent)() = &Marker;
  ASSERT_TRUE(lib->Resolve({Required("cos", &cos_fn), Required("sqrt", &sqrt_fn),
                            Optional("tessel_no_such_symbol", &absent)})
                  .ok());
  ASSERT_NE(cos_fn, nullptr);
  EXPECT_EQ(cos_fn(0.0), 1.0);
  EXPECT_EQ(sqrt_fn(4.0), 2.0);
  EXPECT_EQ(absent, nullptr);  // optional and missing: null

  void (*a)() = nullptr;
  void (*b)() = nullptr;
  absl::Status s = lib->Resolve({Required("tessel_missing_a", &a), Required("cos", &cos_fn),
                                 Required("tessel_missing_b", &b)});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("libm.so.6 lacks tessel_missing_a, tessel_missing_b"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace tessel::gpu::internal
