#include "registry/health_checker.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "registry/registry_metrics.h"
#include "rpc/grpc_util.h"
#include "runtime/log.h"

namespace tessel {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {
std::string DescribeFailure(const grpc::Status& status, const HealthCheckResponse& resp,
                            absl::Duration timeout) {
  if (status.ok()) return HealthCheckResponse::ServingStatus_Name(resp.status());
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::StrCat("no answer within ", absl::FormatDuration(timeout));
  }
  return absl::StrCat("rpc failed (code ", static_cast<int>(status.error_code()),
                      "): ", status.error_message());
}
}  // namespace

HealthChecker::HealthChecker(Registry* registry, HealthCheckOptions options)
    : registry_(registry), options_(options) {}

HealthChecker::~HealthChecker() { Stop(); }

void HealthChecker::Start() {
  if (options_.period <= absl::ZeroDuration() || thread_.joinable()) return;
  thread_ = std::thread([this] {
    // Fixed rate: a round that waits out its timeouts does not stretch the period.
    for (absl::Time next = absl::Now();;) {
      RunOnce();
      next = std::max(next + options_.period, absl::Now());
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithDeadline(absl::Condition(&stop_), next)) return;
    }
  });
}

void HealthChecker::Stop() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

grpc::health::v1::Health::Stub* HealthChecker::StubFor(const std::string& address) {
  auto& stub = stubs_[address];
  if (stub == nullptr)
    stub = grpc::health::v1::Health::NewStub(MakeChannel(address, options_.credentials));
  return stub.get();
}

std::vector<Registry::Leased> HealthChecker::RunOnce() {
  absl::MutexLock round(&round_mu_);
  auto members = registry_->ListMembers();
  if (!members.ok()) {
    TESSEL_LOG(WARNING) << "health checks skipped this round: " << members.status().message();
    return {};
  }
  std::vector<Registry::Leased> checked;
  for (Registry::Leased& m : *members) {
    if (!m.member.grpc_address().empty()) checked.push_back(std::move(m));
  }

  struct Call {
    grpc::ClientContext ctx;
    HealthCheckRequest req;
    HealthCheckResponse resp;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls(checked.size());
  // A Mutex rather than absl::BlockingCounter: TSan sees a Mutex's ordering
  // (third_party/absl_tsan), so the answers written on gRPC's threads are
  // visibly ordered before this thread reads them.
  absl::Mutex mu;
  size_t pending = checked.size();
  for (size_t i = 0; i < checked.size(); ++i) {
    calls[i] = std::make_unique<Call>();
    Call* call = calls[i].get();
    SetDeadline(&call->ctx, options_.timeout);
    StubFor(checked[i].member.grpc_address())
        ->async()
        ->Check(&call->ctx, &call->req, &call->resp, [call, &mu, &pending](grpc::Status s) {
          absl::MutexLock lock(&mu);
          call->status = std::move(s);
          --pending;
        });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](size_t* left) { return *left == 0; }, &pending));
  }

  std::vector<Registry::Leased> evicted;
  absl::flat_hash_set<int64_t> live;
  absl::flat_hash_set<std::string> addresses;
  for (size_t i = 0; i < checked.size(); ++i) {
    const Registry::Leased& m = checked[i];
    const Call& call = *calls[i];
    live.insert(m.lease_id);
    addresses.insert(m.member.grpc_address());
    Target& t = targets_[m.lease_id];
    if (call.status.ok() && call.resp.status() == HealthCheckResponse::SERVING) {
      t = Target{};
      continue;
    }
    ++t.failures;
    t.last_error = DescribeFailure(call.status, call.resp, options_.timeout);
    if (t.failures < options_.failure_threshold) continue;
    TESSEL_LOG(WARNING) << "evicting group '" << m.member.group() << "' "
                        << DescribeMember(m.member) << " at " << m.member.grpc_address()
                        << " (lease " << m.lease_id << "): " << t.failures
                        << " consecutive failed health checks; last error: " << t.last_error;
    absl::Status left = registry_->Leave(m.lease_id);
    if (!left.ok() && !absl::IsNotFound(left)) {
      TESSEL_LOG(WARNING) << "eviction of lease " << m.lease_id
                          << " failed (will retry): " << left.message();
      continue;
    }
    live.erase(m.lease_id);
    RegistryMetrics().evictions.GetCounter({"health_check"})->Add();
    evicted.push_back(m);
  }
  // Forget members that are gone, and channels nobody needs.
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (live.contains(it->first)) {
      ++it;
    } else {
      targets_.erase(it++);
    }
  }
  for (auto it = stubs_.begin(); it != stubs_.end();) {
    if (addresses.contains(it->first)) {
      ++it;
    } else {
      stubs_.erase(it++);
    }
  }
  return evicted;
}

}  // namespace tessel
