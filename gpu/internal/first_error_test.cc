#include "gpu/internal/first_error.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessel::gpu::internal {
namespace {

TEST(FirstErrorTest, TheFirstFailureStaysAndOkIsIgnored) {
  FirstError e;
  EXPECT_TRUE(e.Get().ok());
  e.Record(absl::OkStatus());
  EXPECT_TRUE(e.Get().ok());
  e.Record(absl::InternalError("first"));
  e.Record(absl::InvalidArgumentError("second"));
  e.Record(absl::OkStatus());
  EXPECT_EQ(e.Get(), absl::InternalError("first"));
  EXPECT_EQ(e.Get(), absl::InternalError("first"));  // sticky
}

TEST(FirstErrorTest, ConcurrentRecordsKeepExactlyOne) {
  FirstError e;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&e, t] {
      for (int i = 0; i < 100; ++i) {
        e.Record(absl::InternalError(absl::StrCat(t, ":", i)));
        (void)e.Get();
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string m(e.Get().message());
  EXPECT_TRUE(m == "0:0" || m == "1:0" || m == "2:0" || m == "3:0") << m;
}

}  // namespace
}  // namespace tessel::gpu::internal
