// MakeTransport: the factory in the options when there is one (its error
// passed on as it is), UCX otherwise.
#include "worker/internal/make_transport.h"

#include <memory>

#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"

namespace tessel::internal {
namespace {

TEST(MakeTransportTest, TheOptionsFactoryWinsAndItsErrorIsPassedOn) {
  auto fabric = std::make_shared<InProcFabric>();
  WorkerOptions o;
  o.transport = [fabric]() -> absl::StatusOr<std::unique_ptr<Transport>> {
    return std::unique_ptr<Transport>(InProcTransport::Create(fabric));
  };
  auto made = MakeTransport(o);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->name(), "inproc");
  (*made)->Shutdown();

  o.transport = []() -> absl::StatusOr<std::unique_ptr<Transport>> {
    return absl::ResourceExhaustedError("no endpoints left");
  };
  absl::Status s = MakeTransport(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "no endpoints left");
}

TEST(MakeTransportTest, WithoutAFactoryItIsUcx) {
  WorkerOptions o;
  o.ucx.tls = "posix,sysv,self";  // this host only, as the tests' servers
  auto made = MakeTransport(o);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->name(), "ucx");
  (*made)->Shutdown();
}

}  // namespace
}  // namespace tessel::internal
