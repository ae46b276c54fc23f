// Precondition checks for the model library.
//
// Only for programmer errors (a batch of the wrong width, a rank outside the
// world): they abort with the failed condition and a message. Errors in input
// that a user can fix are returned as absl::Status instead.

#ifndef TESSEL_MODEL_INTERNAL_CHECK_H_
#define TESSEL_MODEL_INTERNAL_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"

namespace tessel::model::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     const std::string& message) {
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, condition, message.c_str());
  std::abort();
}

}  // namespace tessel::model::internal

// TESSEL_MODEL_CHECK(cond, message parts...): the parts go through
// absl::StrCat, and only when the check fails.
#define TESSEL_MODEL_CHECK(cond, ...)                                    \
  do {                                                                   \
    if (ABSL_PREDICT_FALSE(!(cond))) {                                   \
      ::tessel::model::internal::CheckFailed(__FILE__, __LINE__, #cond,  \
                                             absl::StrCat(__VA_ARGS__)); \
    }                                                                    \
  } while (false)

#endif  // TESSEL_MODEL_INTERNAL_CHECK_H_
