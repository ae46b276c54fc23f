// Test helpers for the UCX transport's parts against real UCX: a UCP context
// of shared memory and self only (posix, sysv, self: two workers of it talk
// as two processes on one host do), and single-threaded workers of it that
// the test's own thread progresses.
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_UCP_TESTING_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_UCP_TESTING_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "transport/ucx/internal/context.h"

namespace tessel {
namespace ucx_internal {

// nullptr (and a test failure) if UCX refuses.
inline std::shared_ptr<UcxContext> TestContext(const std::string& tls = "posix,sysv,self") {
  UcxOptions o;
  o.tls = tls;
  auto context = UcxContext::Create(o);
  EXPECT_TRUE(context.ok()) << context.status();
  return context.ok() ? *context : nullptr;
}

// nullptr (and a test failure) if UCX refuses.
inline ucp_worker_h TestWorker(ucp_context_h context) {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w = nullptr;
  EXPECT_EQ(ucp_worker_create(context, &wp, &w), UCS_OK);
  return w;
}

// The address peers connect to `worker` with ("" and a test failure if UCX
// refuses).
inline std::string WorkerAddress(ucp_worker_h worker) {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  EXPECT_EQ(ucp_worker_get_address(worker, &addr, &len), UCS_OK);
  if (addr == nullptr) return "";
  std::string address(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(worker, addr);
  return address;
}

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_UCP_TESTING_H_
