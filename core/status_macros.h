// Early-return helpers for absl::Status and absl::StatusOr<T>, as Abseil's
// own status_macros.h (not shipped by Debian's libabsl) spells them.
//
//   TESSEL_RETURN_IF_ERROR(expr): evaluates `expr` once; if it is not OK,
//     returns its status from the enclosing function. `expr` is an
//     absl::StatusOr<T> (its status is returned) or any status type with
//     .ok() (returned as it is: an absl::Status, or a grpc::Status in a gRPC
//     handler that passes on what its authorization check said).
//   TESSEL_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an
//     absl::StatusOr<T>) once; if it is not OK, returns its status; else
//     moves its value into `lhs`, which may be a declaration
//     (`auto x`, `const Layout& layout`) or an existing lvalue (`*resp`).
//   TESSEL_RETURN_IF_ERROR_AS(expr, convert) and
//   TESSEL_ASSIGN_OR_RETURN_AS(lhs, expr, convert): the same, but an error is
//     returned as `convert(status)`, for functions that return another status
//     type (a gRPC handler passes ToGrpc from rpc/grpc_util.h, which keeps the
//     code and message). This header depends on no such type.
//
// The enclosing function returns absl::Status or any absl::StatusOr<U> (or,
// for the _AS forms and a passed-through status, whatever type that is).
//
// Example:
//   absl::StatusOr<int> Shards(const Spec& spec) {
//     TESSEL_RETURN_IF_ERROR(Validate(spec));
//     TESSEL_ASSIGN_OR_RETURN(Layout layout, MakeLayout(spec));
//     return layout.num_shards();
//   }
//
//   grpc::Status Service::Get(grpc::ServerContext* ctx, const Ref* req, Info* resp) {
//     TESSEL_RETURN_IF_ERROR(Authorize(ctx, "Get"));  // a grpc::Status
//     TESSEL_ASSIGN_OR_RETURN_AS(*resp, store_->Read(req->name()), ToGrpc);
//     return grpc::Status::OK;
//   }
#ifndef TESSEL_CORE_STATUS_MACROS_H_
#define TESSEL_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessel::status_internal {
// The status of an absl::StatusOr<T>; any other status type as it is.
template <typename S>
const S& AsStatus(const S& s) {
  return s;
}
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

#define TESSEL_RETURN_IF_ERROR_AS(expr, convert)                                      \
  do {                                                                                \
    const auto& tessel_status_macro_value = (expr);                                   \
    if (!tessel_status_macro_value.ok()) {                                            \
      return convert(::tessel::status_internal::AsStatus(tessel_status_macro_value)); \
    }                                                                                 \
  } while (false)

#define TESSEL_STATUS_MACROS_CONCAT_INNER(a, b) a##b
#define TESSEL_STATUS_MACROS_CONCAT(a, b) TESSEL_STATUS_MACROS_CONCAT_INNER(a, b)

#define TESSEL_ASSIGN_OR_RETURN(lhs, expr) \
  TESSEL_ASSIGN_OR_RETURN_IMPL(TESSEL_STATUS_MACROS_CONCAT(tessel_statusor_, __LINE__), lhs, expr)

#define TESSEL_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#define TESSEL_ASSIGN_OR_RETURN_AS(lhs, expr, convert)                                          \
  TESSEL_ASSIGN_OR_RETURN_AS_IMPL(TESSEL_STATUS_MACROS_CONCAT(tessel_statusor_, __LINE__), lhs, \
                                  expr, convert)

#define TESSEL_ASSIGN_OR_RETURN_AS_IMPL(statusor, lhs, expr, convert) \
  auto statusor = (expr);                                             \
  if (!statusor.ok()) return convert(statusor.status());              \
  lhs = std::move(statusor).value()

#endif  // TESSEL_CORE_STATUS_MACROS_H_
