#include "rpc/registry_client.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "rpc/host_identity.h"
#include "rpc/view_delta.h"
#include "runtime/log.h"

namespace tessel {

RegistryClient::RegistryClient(const std::string& address, const ClientCredentials& credentials,
                               std::string token)
    : address_(address),
      token_(std::move(token)),
      stub_(v1::Registry::NewStub(MakeChannel(address, credentials))) {}

void RegistryClient::Prepare(grpc::ClientContext* ctx) const {
  CountClientCall(RpcService::kRegistry);
  AddToken(ctx, token_);
}

RegistryClient::~RegistryClient() {
  if (absl::Status s = Leave(); !s.ok()) {
    TESSEL_LOG(WARNING) << "leaving the registry at " << address_
                        << " failed (the lease lapses on its own after its TTL): " << s;
  }
}

absl::StatusOr<v1::View> RegistryClient::Join(const v1::Member& member, absl::Duration ttl) {
  v1::JoinRequest req;
  *req.mutable_member() = member;
  if (member.host().empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    req.mutable_member()->set_host(host);
  }
  if (member.pid() == 0) req.mutable_member()->set_pid(getpid());
  if (member.host_id().empty()) req.mutable_member()->set_host_id(HostIdentity());
  if (member.incarnation().empty()) req.mutable_member()->set_incarnation(ProcessIncarnation());
  // Under Kubernetes, the pod (the downward API's metadata.name).
  if (member.pod().empty()) {
    if (const char* pod = std::getenv("POD_NAME"); pod != nullptr) {
      req.mutable_member()->set_pod(pod);
    }
  }
  req.set_lease_ttl_ms(absl::ToInt64Milliseconds(ttl));
  v1::JoinResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  SetDeadline(&ctx);
  TESSEL_RETURN_IF_ERROR(
      FromGrpc(stub_->Join(&ctx, req, &resp), absl::StrCat("joining registry at ", address_)));
  StopHeartbeats();
  {
    absl::MutexLock lock(&mu_);
    lease_id_ = resp.lease_id();
    lease_status_ = absl::OkStatus();
    stop_ = false;
  }
  group_epoch_.store(resp.view().epoch());
  // This membership in the view right after the join (its role and rank are
  // unique in the group).
  int64_t joined = 0;
  for (const v1::Member& m : resp.view().members()) {
    if (m.role() == member.role() && m.rank() == member.rank()) joined = m.joined_epoch();
  }
  joined_epoch_.store(joined);
  last_contact_ns_.store(absl::ToUnixNanos(absl::Now()));
  const absl::Duration period = absl::Milliseconds(resp.lease_ttl_ms()) / 3;
  heartbeat_ = std::thread([this, id = resp.lease_id(), period] { HeartbeatLoop(id, period); });
  return resp.view();
}

void RegistryClient::HeartbeatLoop(int64_t lease_id, absl::Duration period) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      struct Arg {
        decltype(stopping)* f;
      } arg{&stopping};
      if (mu_.AwaitWithTimeout(absl::Condition(
                                   +[](Arg* a) { return (*a->f)(); }, &arg),
                               period)) {
        return;
      }
    }
    v1::HeartbeatRequest req;
    req.set_lease_id(lease_id);
    StragglerSource source;
    StragglerListener listener;
    {
      absl::MutexLock lock(&mu_);
      source = straggler_source_;
      listener = straggler_listener_;
      if (phases_) *req.mutable_phases() = *phases_;
    }
    if (source) {
      for (v1::Straggler& s : source()) *req.add_stragglers() = std::move(s);
    }
    if (const int64_t step = progress_step_.load(); step >= 0) {
      req.mutable_progress()->set_step(step);
      req.mutable_progress()->set_loss(progress_loss_.load());
    }
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    SetDeadline(&ctx, period);
    grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      absl::MutexLock lock(&mu_);
      lease_status_ = absl::UnavailableError(absl::StrCat(
          "registry at ", address_, " no longer knows lease ", lease_id, ": ", s.error_message()));
      TESSEL_LOG(ERROR) << lease_status_.message();
      return;
    }
    if (s.ok()) {
      group_epoch_.store(resp.epoch());
      last_contact_ns_.store(absl::ToUnixNanos(absl::Now()));
      std::vector<std::tuple<std::string, int, double, double>> heard;
      for (const v1::Straggler& g : resp.stragglers()) {
        heard.emplace_back(g.job(), g.rank(), g.score(), g.lateness_seconds());
      }
      if (heard != stragglers_heard_) {
        stragglers_heard_ = std::move(heard);
        if (listener) listener({resp.stragglers().begin(), resp.stragglers().end()});
      }
    }
    if (!s.ok()) TESSEL_LOG(WARNING) << "heartbeat failed (will retry): " << s.error_message();
  }
}

void RegistryClient::SetProgress(int64_t step, double loss) {
  progress_loss_.store(loss);
  progress_step_.store(step);
}

void RegistryClient::SetPhases(int64_t step, int64_t compute_ns, int64_t push_ns, int64_t wait_ns,
                               int64_t pull_ns) {
  v1::StepPhases p;
  p.set_step(step);
  p.set_compute_ns(compute_ns);
  p.set_push_ns(push_ns);
  p.set_wait_ns(wait_ns);
  p.set_pull_ns(pull_ns);
  absl::MutexLock lock(&mu_);
  phases_ = std::move(p);
}

void RegistryClient::SetStragglerSource(StragglerSource source) {
  absl::MutexLock lock(&mu_);
  straggler_source_ = std::move(source);
}

void RegistryClient::SetStragglerListener(StragglerListener listener) {
  absl::MutexLock lock(&mu_);
  straggler_listener_ = std::move(listener);
}

void RegistryClient::StopHeartbeats() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (heartbeat_.joinable()) heartbeat_.join();
}

absl::Status RegistryClient::Leave() {
  StopHeartbeats();
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = lease_id_;
    lease_id_ = 0;
  }
  if (id == 0) return absl::OkStatus();
  v1::LeaveRequest req;
  req.set_lease_id(id);
  v1::LeaveResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  SetDeadline(&ctx, absl::Seconds(2));
  return FromGrpc(stub_->Leave(&ctx, req, &resp), "leaving registry");
}

absl::Time RegistryClient::last_contact() const {
  const int64_t ns = last_contact_ns_.load();
  return ns == std::numeric_limits<int64_t>::min() ? absl::InfinitePast() : absl::FromUnixNanos(ns);
}

absl::Status RegistryClient::lease_status() {
  absl::MutexLock lock(&mu_);
  return lease_status_;
}

absl::StatusOr<v1::View> RegistryClient::GetView(const std::string& group, bool liveness) {
  v1::GetViewRequest req;
  req.set_group(group);
  req.set_liveness(liveness);
  v1::GetViewResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  SetDeadline(&ctx);
  TESSEL_RETURN_IF_ERROR(FromGrpc(stub_->GetView(&ctx, req, &resp),
                                  absl::StrCat("registry at ", address_, " GetView(", group, ")")));
  return resp.view();
}

absl::StatusOr<std::vector<v1::View>> RegistryClient::ListGroups() {
  v1::ListGroupsRequest req;
  v1::ListGroupsResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  SetDeadline(&ctx);
  TESSEL_RETURN_IF_ERROR(FromGrpc(stub_->ListGroups(&ctx, req, &resp),
                                  absl::StrCat("registry at ", address_, " ListGroups")));
  return std::vector<v1::View>(resp.views().begin(), resp.views().end());
}

absl::StatusOr<v1::View> RegistryClient::WaitForView(
    const std::string& group, const std::function<bool(const v1::View&)>& ready,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::View last;
  std::string last_error;
  while (absl::Now() < deadline) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::WatchRequest req;
    req.set_group(group);
    req.set_deltas(true);  // a full view first, then only what changed
    auto reader = stub_->Watch(&ctx, req);
    v1::View message, view;
    while (reader->Read(&message)) {
      if (absl::Status s = ApplyViewDelta(message, &view); !s.ok()) {
        last_error = std::string(s.message());
        ctx.TryCancel();
        break;  // out of step: watch afresh
      }
      last = view;
      if (ready(view)) {
        ctx.TryCancel();
        reader->Finish();
        return view;
      }
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) last_error = std::string(FromGrpc(s, "Watch").message());
    absl::SleepFor(absl::Milliseconds(100));  // registry unreachable: retry until the deadline
  }
  return absl::DeadlineExceededError(
      absl::StrCat("timed out after ", absl::FormatDuration(timeout), " waiting for group '", group,
                   "' at registry ", address_, "; last seen ", DescribeView(last),
                   last_error.empty() ? "" : absl::StrCat(" (last error: ", last_error, ")")));
}

std::string DescribeView(const v1::View& view) {
  std::string s = absl::StrCat("epoch ", view.epoch(), ":");
  if (view.members_size() == 0) absl::StrAppend(&s, " no members");
  for (int i = 0; i < view.members_size(); ++i) {
    const v1::Member& m = view.members(i);
    absl::StrAppend(&s, i ? ", " : " ", m.role() == v1::ROLE_SERVER ? "server " : "worker ",
                    m.rank());
  }
  return s;
}

}  // namespace tessel
