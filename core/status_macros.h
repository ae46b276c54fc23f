// Early-return helpers for absl::Status and absl::StatusOr<T>, as Abseil's
// own status_macros.h (not shipped by Debian's libabsl) spells them.
//
//   TESSEL_RETURN_IF_ERROR(expr): evaluates `expr` (an absl::Status or
//     anything with .ok() and a conversion to absl::Status, e.g. a StatusOr)
//     once; if it is not OK, returns its status from the enclosing function.
//   TESSEL_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an
//     absl::StatusOr<T>) once; if it is not OK, returns its status; else
//     moves its value into `lhs`, which may be a declaration
//     (`auto x`, `const Layout& layout`) or an existing variable.
//
// The enclosing function returns absl::Status or any absl::StatusOr<U>.
//
// Example:
//   absl::StatusOr<int> Shards(const Spec& spec) {
//     TESSEL_RETURN_IF_ERROR(Validate(spec));
//     TESSEL_ASSIGN_OR_RETURN(Layout layout, MakeLayout(spec));
//     return layout.num_shards();
//   }
#ifndef TESSEL_CORE_STATUS_MACROS_H_
#define TESSEL_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessel::status_internal {
// The status of an absl::Status or an absl::StatusOr<T>.
inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace tessel::status_internal

#define TESSEL_RETURN_IF_ERROR(expr)                                         \
  do {                                                                       \
    const auto& tessel_status_macro_value = (expr);                          \
    if (!tessel_status_macro_value.ok()) {                                   \
      return ::tessel::status_internal::AsStatus(tessel_status_macro_value); \
    }                                                                        \
  } while (false)

#define TESSEL_STATUS_MACROS_CONCAT_INNER(a, b) a##b
#define TESSEL_STATUS_MACROS_CONCAT(a, b) TESSEL_STATUS_MACROS_CONCAT_INNER(a, b)

#define TESSEL_ASSIGN_OR_RETURN(lhs, expr) \
  TESSEL_ASSIGN_OR_RETURN_IMPL(TESSEL_STATUS_MACROS_CONCAT(tessel_statusor_, __LINE__), lhs, expr)

#define TESSEL_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // TESSEL_CORE_STATUS_MACROS_H_
