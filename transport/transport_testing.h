// Test helpers for code that runs over the transports: each backend as a
// factory of connected-able endpoints, so a suite runs the same tests over
// every backend (TEST_P), and the UCX transport made in one line.
//
// A backend's `make` returns a fresh factory for one test: endpoints made by
// one factory can reach each other (the in-process backend shares one
// fabric per factory; UCX endpoints reach each other by address anyway).
//
// Example:
//   class MyTest : public ::testing::TestWithParam<TransportBackend> {};
//   TEST_P(MyTest, Works) {
//     TransportBackend::Factory make = GetParam().make();
//     std::unique_ptr<Transport> a = make(), b = make();
//   }
//   INSTANTIATE_TEST_SUITE_P(Backends, MyTest,
//                            ::testing::Values(InProcBackend(), UcxBackend("posix,sysv,self")),
//                            TransportBackendName);
#ifndef TESSEL_TRANSPORT_TRANSPORT_TESTING_H_
#define TESSEL_TRANSPORT_TRANSPORT_TESTING_H_

#include <cctype>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {

struct TransportBackend {
  // Makes one endpoint.
  using Factory = std::function<std::unique_ptr<Transport>()>;
  std::string name;  // "inproc", "ucx_posix,sysv,self"
  std::function<Factory()> make;
};

// A UCX transport with `options`; a test failure (and nullptr) if UCX
// cannot make one.
inline std::unique_ptr<UcxTransport> MakeUcxTransport(const UcxOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<UcxTransport>> t = UcxTransport::Create(options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// In-process endpoints on one fabric per factory.
inline TransportBackend InProcBackend() {
  return {"inproc", [] {
            auto fabric = std::make_shared<InProcFabric>();
            return TransportBackend::Factory(
                [fabric] { return std::unique_ptr<Transport>(InProcTransport::Create(fabric)); });
          }};
}

// UCX endpoints with UCX_TLS = `tls`.
inline TransportBackend UcxBackend(std::string tls) {
  return {"ucx_" + tls, [tls] {
            return TransportBackend::Factory([tls] {
              UcxOptions o;
              o.tls = tls;
              return std::unique_ptr<Transport>(MakeUcxTransport(o));
            });
          }};
}

// The backend's name as a test name: "ucx_posix,sysv,self" becomes
// "ucx_posix_sysv_self" (every character but letters and digits is '_').
inline std::string TransportBackendName(const ::testing::TestParamInfo<TransportBackend>& info) {
  std::string n = info.param.name;
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_TRANSPORT_TESTING_H_
