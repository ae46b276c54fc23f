// QuietLogs: the frame-handler fuzz targets' LLVMFuzzerInitialize. A handler
// logs what it refuses (rate-limited, but a fuzzer sends little else), which
// would bury libFuzzer's own output: only errors are logged, unless
// TESSEL_FUZZ_LOG is set (to see what a reproduced input made it log).
//
// Example:
//   extern "C" int LLVMFuzzerInitialize(int*, char***) { return tessel::fuzz::QuietLogs(); }
#ifndef TESSEL_FUZZ_QUIET_LOGS_H_
#define TESSEL_FUZZ_QUIET_LOGS_H_

#include <cstdlib>

#include "runtime/log.h"

namespace tessel::fuzz {

// Returns 0, as LLVMFuzzerInitialize does.
inline int QuietLogs() {
  if (std::getenv("TESSEL_FUZZ_LOG") == nullptr) SetMinLogLevel(LogLevel::kError);
  return 0;
}

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_QUIET_LOGS_H_
