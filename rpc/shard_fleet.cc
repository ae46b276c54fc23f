#include "rpc/shard_fleet.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/auth.h"

namespace tessel {

ShardFleet::ShardFleet(ControlOptions options) : options_(std::move(options)) {}

void ShardFleet::Connect(int shard, const std::string& grpc_address) {
  Entry& entry = shards_[shard];
  if (entry.stub != nullptr && entry.address == grpc_address) return;
  entry.address = grpc_address;
  entry.stub = v1::ShardServer::NewStub(MakeChannel(grpc_address, options_.credentials));
}

int ShardFleet::ConnectView(const v1::View& pool) {
  int connected = 0;
  for (const v1::Member& m : pool.members()) {
    if (m.role() != v1::ROLE_SERVER) continue;
    Connect(m.rank(), m.grpc_address());
    ++connected;
  }
  return connected;
}

std::vector<int> ShardFleet::shards() const {
  std::vector<int> out;
  out.reserve(shards_.size());
  for (const auto& [shard, entry] : shards_) out.push_back(shard);
  return out;
}

const std::string& ShardFleet::address(int shard) const {
  static const std::string* const kNone = new std::string();
  auto it = shards_.find(shard);
  return it == shards_.end() ? *kNone : it->second.address;
}

std::unique_ptr<grpc::ClientContext> ShardFleet::Context(absl::Duration timeout) const {
  CountClientCall(RpcService::kShard);
  auto ctx = std::make_unique<grpc::ClientContext>();
  SetDeadline(ctx.get(), timeout == absl::ZeroDuration() ? options_.timeout : timeout);
  AddToken(ctx.get(), options_.token);
  return ctx;
}

absl::Status ShardFleet::ForEach(const std::function<absl::Status(int shard)>& call) const {
  for (int shard : shards()) {
    TESSEL_RETURN_IF_ERROR(call(shard));
  }
  return absl::OkStatus();
}

absl::Status ShardFleet::ForAll(const std::function<absl::Status(int shard)>& call) const {
  absl::Status first;
  for (int shard : shards()) {
    absl::Status s = call(shard);
    if (first.ok()) first = std::move(s);
  }
  return first;
}

v1::ShardServer::Stub* ShardFleet::Stub(int shard) const {
  auto it = shards_.find(shard);
  return it == shards_.end() ? nullptr : it->second.stub.get();
}

std::string ShardFleet::OnShard(int shard, absl::string_view what) const {
  return absl::StrCat(what, " on shard ", shard, " (", address(shard), ")");
}

absl::Status ShardFleet::UnknownShard(int shard, absl::string_view what) {
  return absl::NotFoundError(absl::StrCat(what, ": shard ", shard,
                                          " is not connected (no shard server of that rank in "
                                          "the pool's view)"));
}

}  // namespace tessel
