#include "registry/etcd/etcd_registry.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "runtime/log.h"

namespace tessel {
namespace {

// Bounds every compare-and-swap loop: contention beyond this is an error.
constexpr int kMaxCasAttempts = 32;

std::string Escape(const std::string& group) {
  std::string out;
  for (char c : group) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && s.substr(i, 3) == "%25") {
      out += '%';
      i += 2;
    } else if (s[i] == '%' && s.substr(i, 3) == "%2F") {
      out += '/';
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

etcdserverpb::RangeRequest PrefixRange(const std::string& prefix) {
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(EtcdClient::PrefixEnd(prefix));
  return req;
}

v1::View MakeView(const std::string& group, int64_t epoch,
                  const std::vector<Registry::Leased>& members) {
  v1::View view;
  view.set_group(group);
  view.set_epoch(epoch);
  for (const Registry::Leased& m : members) *view.add_members() = m.member;
  return view;
}

void SortMembers(std::vector<Registry::Leased>* members) {
  std::sort(members->begin(), members->end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.member.role(), a.member.rank()) <
           std::make_pair(b.member.role(), b.member.rank());
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdRegistry>> EtcdRegistry::Connect(EtcdRegistryOptions options) {
  while (absl::EndsWith(options.prefix, "/")) options.prefix.pop_back();
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("etcd key prefix must not be empty or '/' (e.g. /tessel)");
  }
  TESSEL_ASSIGN_OR_RETURN(
      auto etcd, EtcdClient::Connect(options.endpoints, options.rpc_timeout, options.credentials));
  auto registry =
      std::unique_ptr<EtcdRegistry>(new EtcdRegistry(std::move(options), std::move(etcd)));
  int64_t revision = 0;
  TESSEL_RETURN_IF_ERROR(registry->ResyncAll(&revision));
  registry->watcher_ = std::thread([r = registry.get(), revision] { r->WatchLoop(revision); });
  return registry;
}

EtcdRegistry::EtcdRegistry(EtcdRegistryOptions options, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)), etcd_(std::move(etcd)) {}

EtcdRegistry::~EtcdRegistry() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
  }
  if (watcher_.joinable()) watcher_.join();
}

std::string EtcdRegistry::GroupsPrefix() const { return absl::StrCat(options_.prefix, "/groups/"); }

std::string EtcdRegistry::GroupPrefix(const std::string& group) const {
  return absl::StrCat(GroupsPrefix(), Escape(group), "/");
}

std::string EtcdRegistry::EpochKey(const std::string& group) const {
  return absl::StrCat(GroupPrefix(group), "epoch");
}

std::string EtcdRegistry::MemberKey(const v1::Member& member) const {
  return absl::StrCat(GroupPrefix(member.group()), "members/",
                      member.role() == v1::ROLE_SERVER ? "server/" : "worker/", member.rank());
}

std::string EtcdRegistry::GroupOfKey(const std::string& key) const {
  const std::string prefix = GroupsPrefix();
  if (!absl::StartsWith(key, prefix)) return "";
  absl::string_view rest = absl::string_view(key).substr(prefix.size());
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return "";
  return Unescape(rest.substr(0, slash));
}

absl::StatusOr<EtcdRegistry::GroupState> EtcdRegistry::ParseGroup(
    const std::string& epoch_key, const google::protobuf::RepeatedPtrField<mvccpb::KeyValue>& kvs) {
  GroupState state;
  for (const mvccpb::KeyValue& kv : kvs) {
    if (kv.key() == epoch_key) {
      std::vector<absl::string_view> parts = absl::StrSplit(kv.value(), ' ');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &state.epoch) ||
          !absl::SimpleAtoi(parts[1], &state.recorded_members)) {
        return absl::DataLossError(absl::StrCat("etcd key ", kv.key(), " holds '", kv.value(),
                                                "', not '<epoch> <members>'; was it written by "
                                                "something other than tessel-registry?"));
      }
      state.epoch_mod_revision = kv.mod_revision();
      continue;
    }
    Leased m;
    if (!m.member.ParseFromString(kv.value())) {
      return absl::DataLossError(
          absl::StrCat("etcd key ", kv.key(), " does not hold a tessel.v1.Member"));
    }
    m.lease_id = kv.lease();
    state.members.push_back(std::move(m));
  }
  SortMembers(&state.members);
  return state;
}

absl::StatusOr<EtcdRegistry::GroupState> EtcdRegistry::ReadGroup(const std::string& group) {
  TESSEL_ASSIGN_OR_RETURN(auto resp, etcd_->Range(PrefixRange(GroupPrefix(group))));
  return ParseGroup(EpochKey(group), resp.kvs());
}

void EtcdRegistry::Remember(const std::string& group, int64_t epoch,
                            const std::vector<Leased>& members) {
  absl::MutexLock lock(&mu_);
  int64_t& known = epochs_[group];
  known = std::max(known, epoch);
  for (const Leased& m : members) group_by_lease_[m.lease_id] = group;
}

absl::StatusOr<v1::View> EtcdRegistry::Reconcile(const std::string& group) {
  for (int attempt = 0; attempt < kMaxCasAttempts; ++attempt) {
    TESSEL_ASSIGN_OR_RETURN(auto state, ReadGroup(group));
    if (!state.dirty()) {
      Remember(group, state.epoch, state.members);
      return MakeView(group, state.epoch, state.members);
    }
    // Members left (Leave, eviction, lease expiry) since the epoch was
    // written: bump it, unless someone else changed the epoch key meanwhile.
    const int64_t epoch = state.epoch + 1;
    etcdserverpb::TxnRequest txn;
    etcdserverpb::Compare* cmp = txn.add_compare();
    cmp->set_key(EpochKey(group));
    cmp->set_target(etcdserverpb::Compare::MOD);
    cmp->set_result(etcdserverpb::Compare::EQUAL);
    cmp->set_mod_revision(state.epoch_mod_revision);
    etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
    put->set_key(EpochKey(group));
    put->set_value(absl::StrCat(epoch, " ", state.members.size()));
    TESSEL_ASSIGN_OR_RETURN(auto resp, etcd_->Txn(txn));
    if (resp.succeeded()) {
      Remember(group, epoch, state.members);
      return MakeView(group, epoch, state.members);
    }
  }
  return absl::AbortedError(absl::StrCat("epoch of group '", group, "' changed ", kMaxCasAttempts,
                                         " times while being updated; retry"));
}

absl::StatusOr<Registry::Joined> EtcdRegistry::Join(const v1::Member& member, absl::Duration ttl) {
  if (ttl == absl::ZeroDuration()) ttl = options_.default_ttl;
  TESSEL_RETURN_IF_ERROR(ValidateJoin(member, ttl));
  TESSEL_ASSIGN_OR_RETURN(auto lease, etcd_->LeaseGrant(ttl));
  const int64_t lease_id = lease.id();
  auto give_back = [&] {
    absl::Status s = etcd_->LeaseRevoke(lease_id);
    (void)s;  // the lease lapses on its own if this fails
  };
  const std::string group = member.group();
  const std::string key = MemberKey(member);
  for (int attempt = 0; attempt < kMaxCasAttempts; ++attempt) {
    auto state = ReadGroup(group);
    if (!state.ok()) {
      give_back();
      return state.status();
    }
    for (const Leased& held : state->members) {
      if (held.member.role() == member.role() && held.member.rank() == member.rank()) {
        give_back();
        return absl::AlreadyExistsError(absl::StrCat("group '", group, "' already has a live ",
                                                     DescribeMember(member), " (pid ",
                                                     held.member.pid(), " on ", held.member.host(),
                                                     "); stop it or wait for its lease to lapse"));
      }
    }
    const int64_t epoch = state->epoch + 1;
    v1::Member joined = member;
    joined.set_joined_epoch(epoch);
    etcdserverpb::TxnRequest txn;
    etcdserverpb::Compare* absent = txn.add_compare();
    absent->set_key(key);
    absent->set_target(etcdserverpb::Compare::CREATE);
    absent->set_result(etcdserverpb::Compare::EQUAL);
    absent->set_create_revision(0);
    etcdserverpb::Compare* cas = txn.add_compare();
    cas->set_key(EpochKey(group));
    cas->set_target(etcdserverpb::Compare::MOD);
    cas->set_result(etcdserverpb::Compare::EQUAL);
    cas->set_mod_revision(state->epoch_mod_revision);
    etcdserverpb::PutRequest* put_member = txn.add_success()->mutable_request_put();
    put_member->set_key(key);
    put_member->set_value(joined.SerializeAsString());
    put_member->set_lease(lease_id);
    etcdserverpb::PutRequest* put_epoch = txn.add_success()->mutable_request_put();
    put_epoch->set_key(EpochKey(group));
    put_epoch->set_value(absl::StrCat(epoch, " ", state->members.size() + 1));
    auto resp = etcd_->Txn(txn);
    if (!resp.ok()) {
      give_back();
      return resp.status();
    }
    if (!resp->succeeded()) continue;  // raced with another change: read again
    state->members.push_back(Leased{lease_id, joined});
    SortMembers(&state->members);
    Remember(group, epoch, state->members);
    return Joined{lease_id, absl::Seconds(lease.ttl()), MakeView(group, epoch, state->members)};
  }
  give_back();
  return absl::AbortedError(
      absl::StrCat("group '", group, "' changed ", kMaxCasAttempts, " times while joining; retry"));
}

absl::StatusOr<int64_t> EtcdRegistry::Heartbeat(int64_t lease_id) {
  TESSEL_RETURN_IF_ERROR(etcd_->LeaseKeepAliveOnce(lease_id));
  std::string group;
  {
    absl::MutexLock lock(&mu_);
    auto it = group_by_lease_.find(lease_id);
    if (it != group_by_lease_.end()) {
      group = it->second;
      auto e = epochs_.find(group);
      if (e != epochs_.end()) return e->second;
    }
  }
  if (group.empty()) {
    // Joined through another registry process: ask etcd which key it holds.
    TESSEL_ASSIGN_OR_RETURN(auto info, etcd_->LeaseTimeToLive(lease_id, /*keys=*/true));
    if (info.keys().empty()) {
      return absl::NotFoundError(
          absl::StrCat("lease ", lease_id, " holds no membership; join again"));
    }
    group = GroupOfKey(info.keys(0));
  }
  TESSEL_ASSIGN_OR_RETURN(auto view, Reconcile(group));
  return view.epoch();
}

absl::Status EtcdRegistry::Leave(int64_t lease_id) {
  TESSEL_ASSIGN_OR_RETURN(auto info, etcd_->LeaseTimeToLive(lease_id, /*keys=*/true));
  std::set<std::string> groups;
  for (const std::string& key : info.keys()) {
    std::string g = GroupOfKey(key);
    if (!g.empty()) groups.insert(g);
  }
  // Revoking deletes the member key; the epoch bump follows in Reconcile
  // (and in every registry's watcher).
  TESSEL_RETURN_IF_ERROR(etcd_->LeaseRevoke(lease_id));
  {
    absl::MutexLock lock(&mu_);
    group_by_lease_.erase(lease_id);
  }
  if (groups.empty()) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " held no membership"));
  }
  for (const std::string& g : groups) {
    TESSEL_RETURN_IF_ERROR(Reconcile(g));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::View> EtcdRegistry::GetView(const std::string& group) {
  return Reconcile(group);
}

absl::StatusOr<std::vector<v1::View>> EtcdRegistry::ListGroups() {
  TESSEL_ASSIGN_OR_RETURN(auto resp, etcd_->Range(PrefixRange(GroupsPrefix())));
  std::map<std::string, google::protobuf::RepeatedPtrField<mvccpb::KeyValue>> by_group;
  for (const mvccpb::KeyValue& kv : resp.kvs()) {
    std::string g = GroupOfKey(kv.key());
    if (!g.empty()) *by_group[g].Add() = kv;
  }
  std::vector<v1::View> views;
  for (const auto& [group, kvs] : by_group) {
    TESSEL_ASSIGN_OR_RETURN(auto state, ParseGroup(EpochKey(group), kvs));
    if (state.dirty()) {
      TESSEL_ASSIGN_OR_RETURN(auto view, Reconcile(group));
      views.push_back(std::move(view));
    } else {
      Remember(group, state.epoch, state.members);
      views.push_back(MakeView(group, state.epoch, state.members));
    }
  }
  return views;
}

absl::StatusOr<std::vector<Registry::Leased>> EtcdRegistry::ListMembers() {
  TESSEL_ASSIGN_OR_RETURN(auto resp, etcd_->Range(PrefixRange(GroupsPrefix())));
  std::vector<Leased> members;
  for (const mvccpb::KeyValue& kv : resp.kvs()) {
    const std::string group = GroupOfKey(kv.key());
    if (group.empty() || kv.key() == EpochKey(group)) continue;
    Leased m;
    if (!m.member.ParseFromString(kv.value())) {
      return absl::DataLossError(
          absl::StrCat("etcd key ", kv.key(), " does not hold a tessel.v1.Member"));
    }
    m.lease_id = kv.lease();
    members.push_back(std::move(m));
  }
  return members;
}

absl::StatusOr<v1::View> EtcdRegistry::WaitForChange(const std::string& group, int64_t after_epoch,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  bool known;
  {
    absl::MutexLock lock(&mu_);
    known = epochs_.count(group) > 0;
  }
  if (!known) {
    TESSEL_ASSIGN_OR_RETURN(v1::View view, Reconcile(group));  // fills the cache
    if (view.epoch() > after_epoch) return view;
  }
  {
    absl::MutexLock lock(&mu_);
    auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = epochs_.find(group);
      return it != epochs_.end() && it->second > after_epoch;
    };
    struct Arg {
      decltype(changed)* f;
    } arg{&changed};
    if (!mu_.AwaitWithDeadline(absl::Condition(
                                   +[](Arg* a) { return (*a->f)(); }, &arg),
                               deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("group '", group,
                                                      "' stayed at or below epoch ", after_epoch,
                                                      " for ", absl::FormatDuration(timeout)));
    }
  }
  return Reconcile(group);
}

absl::Status EtcdRegistry::ResyncAll(int64_t* revision) {
  TESSEL_ASSIGN_OR_RETURN(auto resp, etcd_->Range(PrefixRange(GroupsPrefix())));
  *revision = resp.header().revision();
  std::set<std::string> groups;
  for (const mvccpb::KeyValue& kv : resp.kvs()) {
    std::string g = GroupOfKey(kv.key());
    if (!g.empty()) groups.insert(g);
  }
  for (const std::string& g : groups) {
    TESSEL_RETURN_IF_ERROR(Reconcile(g));
  }
  return absl::OkStatus();
}

void EtcdRegistry::WatchLoop(int64_t revision) {
  bool synced = true;  // Connect() just did the first ResyncAll, as of `revision`
  bool warned = false;
  auto stopping = [this] {
    absl::MutexLock lock(&mu_);
    return stop_;
  };
  while (!stopping()) {
    if (!synced) {
      absl::Status s = ResyncAll(&revision);
      if (!s.ok()) {
        if (!warned) TESSEL_LOG(WARNING) << "etcd registry cannot resync: " << s.message();
        warned = true;
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(500));
        continue;
      }
      if (warned) TESSEL_LOG(INFO) << "etcd registry resynced with " << etcd_->endpoints();
      warned = false;
    }
    grpc::ClientContext ctx;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
      watch_ctx_ = &ctx;
    }
    auto stream = etcd_->OpenWatch(&ctx);
    etcdserverpb::WatchRequest req;
    etcdserverpb::WatchCreateRequest* create = req.mutable_create_request();
    create->set_key(GroupsPrefix());
    create->set_range_end(EtcdClient::PrefixEnd(GroupsPrefix()));
    create->set_start_revision(revision + 1);
    create->set_prev_kv(true);
    etcdserverpb::WatchResponse resp;
    if (stream->Write(req)) {
      while (stream->Read(&resp)) {
        if (resp.canceled()) break;  // compacted or refused: resync
        std::set<std::string> touched;
        for (const mvccpb::Event& ev : resp.events()) {
          std::string g = GroupOfKey(ev.kv().key());
          if (g.empty()) continue;
          touched.insert(g);
          if (ev.type() == mvccpb::Event::DELETE && ev.prev_kv().lease() != 0) {
            absl::MutexLock lock(&mu_);
            group_by_lease_.erase(ev.prev_kv().lease());
          }
          revision = std::max(revision, ev.kv().mod_revision());
        }
        for (const std::string& g : touched) {
          auto view = Reconcile(g);  // bumps after expiry, wakes waiters
          if (!view.ok()) TESSEL_LOG(WARNING) << "etcd registry: " << view.status().message();
        }
      }
    }
    {
      absl::MutexLock lock(&mu_);
      watch_ctx_ = nullptr;
    }
    ctx.TryCancel();
    grpc::Status s = stream->Finish();
    if (stopping()) break;
    if (!warned) {
      TESSEL_LOG(WARNING) << "etcd watch on " << etcd_->endpoints() << " ended ("
                          << s.error_message() << "); resyncing";
    }
    synced = false;
  }
}

}  // namespace tessel
