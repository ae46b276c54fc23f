#include "transport/ucx/internal/context.h"

#include <ucs/memory/memory_type.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {
namespace ucx_internal {

absl::Status UcsError(const char* what, ucs_status_t s) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ucs_status_string(s)));
}

absl::StatusOr<std::shared_ptr<UcxContext>> UcxContext::Create(const UcxOptions& options) {
  TESSEL_RETURN_IF_ERROR(ValidateUcxOptions(options));
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcsError("ucp_config_read", s);
  if (!options.tls.empty()) {
    s = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("UCX rejected TLS '", options.tls, "': ", ucs_status_string(s)));
    }
  }
  if (!options.tcp_port_range.empty()) {
    // Transport-level settings are read from the environment when UCX opens
    // its interfaces (ucp_config_modify does not reach them in UCX 1.13):
    // the range is process-wide, as one process has one data endpoint.
    setenv("UCX_TCP_PORT_RANGE", options.tcp_port_range.c_str(), /*overwrite=*/1);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // RMA: payload memory is registered for peers (packed rkeys, mapped with
  // ucp_rkey_ptr). Shared: it is mapped and unmapped from any thread while
  // the progress thread runs the workers.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA;
  params.mt_workers_shared = 1;
  std::shared_ptr<UcxContext> context(new UcxContext);
  s = ucp_init(&params, config, &context->h_);
  ucp_config_release(config);
  if (s != UCS_OK) {
    context->h_ = nullptr;
    return UcsError("ucp_init (is libucx installed and UCX_TLS valid?)", s);
  }
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context->h_, &attr) == UCS_OK) {
    for (int t = 0; t < UCS_MEMORY_TYPE_LAST; ++t) {
      if (t != UCS_MEMORY_TYPE_HOST && (attr.memory_types & UCS_BIT(t)) != 0) {
        context->device_memory_types_.push_back(ucs_memory_type_names[t]);
      }
    }
  }
  return context;
}

UcxContext::~UcxContext() {
  if (h_ != nullptr) ucp_cleanup(h_);
}

}  // namespace ucx_internal
}  // namespace tessel
