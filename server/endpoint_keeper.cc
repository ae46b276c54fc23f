#include "server/endpoint_keeper.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/log.h"

namespace tessel {

EndpointKeeper::EndpointKeeper(Transport* transport, RegistryClient* registry, v1::Member member,
                               EndpointKeeperOptions options)
    : transport_(transport), registry_(registry), member_(std::move(member)), options_(options) {}

absl::Status EndpointKeeper::Check(const std::function<bool()>& stopping) {
  auto stop = [&] { return stopping && stopping(); };
  absl::Status queue = transport_->CheckReceiveQueue(options_.probe_timeout);
  if (queue.ok() || absl::IsUnimplemented(queue) || stop()) return absl::OkStatus();
  if (options_.on_wedged) options_.on_wedged();
  return Renew(queue, stop);
}

absl::Status EndpointKeeper::Renew(const absl::Status& why, const std::function<bool()>& stop) {
  TESSEL_LOG(ERROR) << why.message()
                    << "; re-creating the UCX endpoint at a new address and re-joining the "
                       "registry, so every worker reconnects and recovers";
  absl::Status left = registry_->Leave();
  if (!left.ok()) TESSEL_LOG(WARNING) << "leaving the registry: " << left.message();
  absl::Status reset = transport_->Reset();
  if (!reset.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot re-create the UCX endpoint: ", reset.message()));
  }
  ++renewals_;
  member_.set_ucx_address(transport_->address());
  const absl::Time deadline = absl::Now() + options_.join_timeout;
  auto view = registry_->Join(member_, options_.lease_ttl);
  while (!view.ok() && absl::Now() < deadline && !stop()) {
    absl::SleepFor(absl::Milliseconds(100));
    view = registry_->Join(member_, options_.lease_ttl);
  }
  if (!view.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot re-join the registry with the new UCX address: ", view.status().message()));
  }
  TESSEL_LOG(WARNING) << "UCX endpoint re-created; re-joined the registry at epoch "
                      << view->epoch();
  return absl::OkStatus();
}

}  // namespace tessel
