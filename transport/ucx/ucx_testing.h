// Test helpers for the UCX transport's paths.
#ifndef TESSEL_TRANSPORT_UCX_UCX_TESTING_H_
#define TESSEL_TRANSPORT_UCX_UCX_TESTING_H_

#include <fstream>
#include <string>

namespace tessel {

// The transport an endpoint made with UCX_TLS=cma,tcp,self moves payloads
// by RMA over: UCX uses cma where processes of one user may read each
// other's memory; under a Yama ptrace restriction (ptrace_scope >= 1) it can
// leave cma out, and those endpoints use tcp instead.
inline std::string CmaOrTcp() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  return f >> scope && scope > 0 ? "tcp" : "cma";
}

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_UCX_TESTING_H_
