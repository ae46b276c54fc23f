#include "registry/registry_service.h"

#include <map>
#include <optional>
#include <set>

#include "core/status_macros.h"
#include "registry/memory/memory_registry.h"
#include "registry/registry_metrics.h"
#include "rpc/grpc_util.h"
#include "rpc/view_delta.h"
#include "runtime/log.h"

namespace tessel {

RegistryService::RegistryService(std::unique_ptr<Registry> registry,
                                 std::optional<HealthCheckOptions> health, AuthOptions auth)
    : registry_(std::move(registry)), auth_(std::move(auth), "this registry") {
  expirer_ = std::thread([this] {
    absl::Time next_prune = absl::Now();
    while (!stop_.load()) {
      int n = registry_->ExpireLeases();
      if (n > 0) {
        TESSEL_LOG(WARNING) << n << " lease(s) lapsed; members removed";
        RegistryMetrics().evictions.GetCounter({"lease_expired"})->Add(n);
      }
      // Workers that never said Leave (killed, evicted, lapsed in etcd).
      if (n > 0 || absl::Now() >= next_prune) {
        PruneLeases();
        next_prune = absl::Now() + absl::Seconds(10);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  if (health.has_value() && health->period > absl::ZeroDuration()) {
    health_checker_ = std::make_unique<HealthChecker>(registry_.get(), *health);
    health_checker_->Start();
  }
  metrics_ = metrics::Default().AddCollector([this] { CollectMetrics(); });
}

void RegistryService::CollectMetrics() {
  RegistryFamilies& f = RegistryMetrics();
  auto members = registry_->ListMembers();
  auto groups = registry_->ListGroups();
  if (!members.ok() || !groups.ok()) return;  // keep the last values (etcd unreachable)
  std::map<std::vector<std::string>, int> counts;
  for (const Registry::Leased& m : *members) {
    ++counts[{m.member.group(), m.member.role() == v1::ROLE_SERVER ? "server" : "worker"}];
  }
  f.members.RemoveIf([](const std::vector<std::string>&) { return true; });
  f.epoch.RemoveIf([](const std::vector<std::string>&) { return true; });
  for (const auto& [labels, n] : counts) f.members.GetGauge(labels)->Set(n);
  for (const v1::View& v : *groups) {
    f.epoch.GetGauge({v.group()})->Set(static_cast<double>(v.epoch()));
  }
  f.leases.GetGauge({})->Set(static_cast<double>(members->size()));
  f.groups.GetGauge({})->Set(static_cast<double>(groups->size()));
}

RegistryService::RegistryService(absl::Duration default_ttl, AuthOptions auth)
    : RegistryService(std::make_unique<MemoryRegistry>(default_ttl), std::nullopt,
                      std::move(auth)) {}

RegistryService::~RegistryService() { Stop(); }

void RegistryService::PruneLeases() {
  auto members = registry_->ListMembers();
  if (!members.ok()) return;
  std::set<int64_t> live;
  for (const Registry::Leased& m : *members) live.insert(m.lease_id);
  holders_.Retain(live);
  stragglers_.Retain(live);
  absl::MutexLock lock(&progress_mu_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    it = live.count(it->first) ? std::next(it) : leases_.erase(it);
  }
  for (auto it = phases_.begin(); it != phases_.end();) {
    it = leases_.count(it->first) ? std::next(it) : phases_.erase(it);
  }
  for (auto it = liveness_.begin(); it != liveness_.end();) {
    it = leases_.count(it->first) ? std::next(it) : liveness_.erase(it);
  }
}

void RegistryService::AddLiveness(v1::View* view) {
  absl::MutexLock lock(&progress_mu_);
  std::map<int, int64_t> lease_of_rank;  // this group's workers
  for (const auto& [lease, at] : leases_) {
    if (at.first == view->group()) lease_of_rank[at.second] = lease;
  }
  for (v1::Member& m : *view->mutable_members()) {
    if (m.role() != v1::ROLE_WORKER) continue;
    auto lease = lease_of_rank.find(m.rank());
    if (lease == lease_of_rank.end()) continue;
    v1::MemberLiveness* out = m.mutable_liveness();
    if (auto l = liveness_.find(lease->second); l != liveness_.end()) {
      out->set_last_heartbeat_unix_ms(l->second.last_heartbeat_ms);
      out->set_lease_expires_unix_ms(l->second.last_heartbeat_ms + l->second.ttl_ms);
    }
    if (auto p = phases_.find(lease->second); p != phases_.end()) {
      *out->mutable_phases() = p->second.phases;
    }
  }
}

std::map<std::string, std::map<int, RegistryService::RankPhases>> RegistryService::Phases() {
  absl::MutexLock lock(&progress_mu_);
  std::map<std::string, std::map<int, RankPhases>> out;
  for (const auto& [lease, p] : phases_) {
    auto at = leases_.find(lease);
    if (at != leases_.end()) out[at->second.first][at->second.second] = p;
  }
  return out;
}

std::map<std::string, std::vector<RegistryService::ProgressPoint>> RegistryService::Progress() {
  absl::MutexLock lock(&progress_mu_);
  std::map<std::string, std::vector<ProgressPoint>> out;
  for (const auto& [group, points] : progress_) out[group].assign(points.begin(), points.end());
  return out;
}

void RegistryService::Stop() {
  stop_.store(true);
  if (health_checker_ != nullptr) health_checker_->Stop();
  if (expirer_.joinable()) expirer_.join();
}

grpc::Status RegistryService::Join(grpc::ServerContext* ctx, const v1::JoinRequest* req,
                                   v1::JoinResponse* resp) {
  const bool server = req->member().role() == v1::ROLE_SERVER;
  const char* rpc = server ? "Join/SERVER" : "Join/WORKER";
  std::string holder;
  if (auth_.enabled()) {
    const Caller caller = auth_.Identify(*ctx);
    TESSEL_RETURN_IF_ERROR(
        auth_.Check(caller, "Registry", rpc, server ? "" : req->member().group()));
    holder = caller.Identity();
  } else {
    TESSEL_RETURN_IF_ERROR(auth_.Check(*ctx, "Registry", rpc));
  }
  TESSEL_ASSIGN_OR_RETURN_AS(
      auto joined, registry_->Join(req->member(), absl::Milliseconds(req->lease_ttl_ms())), ToGrpc);
  if (auth_.enabled()) holders_.Bind(joined.lease_id, std::move(holder));
  resp->set_lease_id(joined.lease_id);
  resp->set_lease_ttl_ms(absl::ToInt64Milliseconds(joined.ttl));
  if (!server) {
    absl::MutexLock lock(&progress_mu_);
    leases_[joined.lease_id] = {req->member().group(), req->member().rank()};
    liveness_[joined.lease_id] = {absl::ToInt64Milliseconds(joined.ttl),
                                  absl::ToUnixMillis(absl::Now())};
  } else {
    stragglers_.ServerJoined(joined.lease_id);
  }
  *resp->mutable_view() = std::move(joined.view);
  TESSEL_LOG(INFO) << "join " << req->member().group() << " " << v1::Role_Name(req->member().role())
                   << " rank " << req->member().rank() << " -> epoch " << resp->view().epoch();
  return grpc::Status::OK;
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                        v1::HeartbeatResponse* resp) {
  TESSEL_RETURN_IF_ERROR(auth_.Check(*ctx, "Registry", "Heartbeat"));
  std::string holder;
  if (auth_.enabled()) {
    const Caller caller = auth_.Identify(*ctx);
    holder = caller.Identity();
    TESSEL_RETURN_IF_ERROR(CheckHolder(req->lease_id(), caller, "Heartbeat"));
  }
  TESSEL_ASSIGN_OR_RETURN_AS(auto epoch, registry_->Heartbeat(req->lease_id()), ToGrpc);
  // A lease joined through another registry replica (or before this process
  // started) is its first renewer's from now on.
  if (auth_.enabled()) holders_.BindIfUnknown(req->lease_id(), holder);
  resp->set_epoch(epoch);
  // A server's stragglers (a worker's lease may not report any); a worker
  // hears its job's.
  if (!stragglers_.Report(req->lease_id(), {req->stragglers().begin(), req->stragglers().end()}) &&
      req->stragglers_size() > 0) {
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "heartbeat of lease " << req->lease_id() << ": " << req->stragglers_size()
        << " straggler entries dropped (not a shard server's lease, or malformed)";
  }
  std::string group;
  {
    absl::MutexLock lock(&progress_mu_);
    auto lease = leases_.find(req->lease_id());
    if (lease != leases_.end()) {
      group = lease->second.first;
      if (auto l = liveness_.find(req->lease_id()); l != liveness_.end()) {
        l->second.last_heartbeat_ms = absl::ToUnixMillis(absl::Now());
      }
      if (req->has_phases()) {
        phases_[req->lease_id()] = {absl::ToUnixMillis(absl::Now()), req->phases()};
      }
    }
  }
  if (!group.empty()) {
    std::vector<v1::Straggler> named = stragglers_.ForJob(group);
    if (!named.empty()) {
      absl::StatusOr<v1::View> got = registry_->GetView(group);
      const v1::View view = got.ok() ? *std::move(got) : v1::View();
      for (v1::Straggler& s : named) {
        for (const v1::Member& m : view.members()) {
          if (m.role() == v1::ROLE_WORKER && m.rank() == s.registry_rank()) {
            s.set_host(m.host());
            s.set_pid(m.pid());
          }
        }
        *resp->add_stragglers() = std::move(s);
      }
    }
  }
  if (req->has_progress()) {
    absl::MutexLock lock(&progress_mu_);
    auto lease = leases_.find(req->lease_id());
    if (lease != leases_.end() && lease->second.second == 0) {  // rank 0 speaks for the job
      std::deque<ProgressPoint>& points = progress_[lease->second.first];
      if (points.empty() || points.back().step != req->progress().step()) {
        points.push_back(
            {absl::ToUnixMillis(absl::Now()), req->progress().step(), req->progress().loss()});
        if (points.size() > kMaxProgress) points.pop_front();
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status RegistryService::Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                                    v1::LeaveResponse*) {
  TESSEL_RETURN_IF_ERROR(auth_.Check(*ctx, "Registry", "Leave"));
  if (auth_.enabled()) {
    TESSEL_RETURN_IF_ERROR(CheckHolder(req->lease_id(), auth_.Identify(*ctx), "Leave"));
  }
  {
    absl::MutexLock lock(&progress_mu_);
    leases_.erase(req->lease_id());
    phases_.erase(req->lease_id());
    liveness_.erase(req->lease_id());
  }
  holders_.Forget(req->lease_id());
  stragglers_.Forget(req->lease_id());
  return ToGrpc(registry_->Leave(req->lease_id()));
}

grpc::Status RegistryService::CheckHolder(int64_t lease_id, const Caller& caller,
                                          absl::string_view rpc) {
  if (caller.Has(Role::kAdmin)) return grpc::Status::OK;
  const absl::Status s = holders_.Check(lease_id, caller.Identity(), rpc);
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(s.message()));
}

grpc::Status RegistryService::GetView(grpc::ServerContext* ctx, const v1::GetViewRequest* req,
                                      v1::GetViewResponse* resp) {
  TESSEL_RETURN_IF_ERROR(auth_.Check(*ctx, "Registry", "GetView"));
  TESSEL_ASSIGN_OR_RETURN_AS(auto view, registry_->GetView(req->group()), ToGrpc);
  if (req->liveness()) AddLiveness(&view);
  *resp->mutable_view() = std::move(view);
  return grpc::Status::OK;
}

grpc::Status RegistryService::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                    grpc::ServerWriter<v1::View>* writer) {
  TESSEL_RETURN_IF_ERROR(auth_.Check(*ctx, "Registry", "Watch"));
  int64_t after = req->after_epoch();
  // With deltas: the view last sent, which the next message changes.
  std::optional<v1::View> sent;
  if (after == 0) {
    TESSEL_ASSIGN_OR_RETURN_AS(auto view, registry_->GetView(req->group()), ToGrpc);
    if (!writer->Write(view)) return grpc::Status::OK;
    after = view.epoch();
    if (req->deltas()) sent = std::move(view);
  }
  metrics::Gauge* streams = RegistryMetrics().watch_streams.GetGauge({});
  streams->Add(1);
  struct Closed {
    metrics::Gauge* g;
    ~Closed() { g->Add(-1); }
  } closed{streams};
  while (!ctx->IsCancelled() && !stop_.load()) {
    auto view = registry_->WaitForChange(req->group(), after, absl::Milliseconds(200));
    if (absl::IsDeadlineExceeded(view.status())) continue;
    TESSEL_RETURN_IF_ERROR_AS(view, ToGrpc);
    if (req->deltas() && sent.has_value()) {
      if (!writer->Write(ViewDelta(*sent, *view))) break;
    } else if (!writer->Write(*view)) {
      break;
    }
    after = view->epoch();
    if (req->deltas()) sent = std::move(*view);
  }
  return grpc::Status::OK;
}

grpc::Status RegistryService::ListGroups(grpc::ServerContext* ctx, const v1::ListGroupsRequest*,
                                         v1::ListGroupsResponse* resp) {
  TESSEL_RETURN_IF_ERROR(auth_.Check(*ctx, "Registry", "ListGroups"));
  TESSEL_ASSIGN_OR_RETURN_AS(auto views, registry_->ListGroups(), ToGrpc);
  for (v1::View& v : views) *resp->add_views() = std::move(v);
  return grpc::Status::OK;
}

}  // namespace tessel
