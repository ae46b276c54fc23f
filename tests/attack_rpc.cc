#include "tests/attack_rpc.h"

#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "rpc/tls.h"

namespace tessel {

absl::StatusOr<AttackTargets> ReadTargets(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  AttackTargets t;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string what, hex;
    int index = 0;
    if (!(fields >> what >> index)) continue;
    if (what == "server") {
      std::string grpc;
      if (!(fields >> grpc >> hex)) return absl::InvalidArgumentError("bad server line: " + line);
      t.servers.push_back({index, grpc, absl::HexStringToBytes(hex)});
    } else if (what == "worker") {
      if (!(fields >> hex)) return absl::InvalidArgumentError("bad worker line: " + line);
      t.workers.push_back({index, absl::HexStringToBytes(hex)});
    }
  }
  return t;
}

absl::StatusOr<AttackTargets> WaitForTargets(const std::string& path, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (std::ifstream(path)) return ReadTargets(path);
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no ", path, " after ", absl::FormatDuration(timeout)));
}

AttackRpc::AttackRpc(const std::string& address, std::string token, const TlsOptions& tls)
    : token_(std::move(token)) {
  auto credentials = LoadClientCredentials(tls);
  stub_ = v1::ShardServer::NewStub(
      MakeChannel(address, credentials.ok() ? *credentials : ClientCredentials{}));
}

void AttackRpc::Prepare(grpc::ClientContext* ctx) const {
  SetDeadline(ctx, absl::Seconds(10));
  if (!token_.empty()) AddToken(ctx, token_);
}

grpc::Status AttackRpc::GetFrameKey(const std::string& job, int32_t rank, int64_t epoch,
                                    const std::string& claim, v1::FrameKeyResponse* resp) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::FrameKeyRequest req;
  req.set_job(job);
  req.set_rank(rank);
  req.set_epoch(epoch);
  req.set_claim(claim);
  req.set_max_key_version(3);  // kPayloadKeysVersion: whatever the server tags
  return stub_->GetFrameKey(&ctx, req, resp);
}

grpc::Status AttackRpc::GetMeshKey(const std::string& mesh) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::MeshKeyRequest req;
  req.set_mesh(mesh);
  v1::FrameKeyResponse resp;
  return stub_->GetMeshKey(&ctx, req, &resp);
}

grpc::Status AttackRpc::CreateJob(const std::string& job, int32_t shard, int32_t shards,
                                  int32_t world, int64_t epoch, bool replace, int64_t floats) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::CreateJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job(job);
  spec->set_strategy(v1::STRATEGY_ZERO2);
  spec->set_world_size(world);
  spec->set_num_shards(shards);
  spec->set_bucket_bytes(64 * 4);
  v1::TensorSpec* t = spec->add_tensors();
  t->set_name("w");
  t->add_shape(floats);
  t->set_dtype(v1::DTYPE_F32);
  spec->mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec->mutable_optimizer()->set_lr(0.1);
  req.set_shard_index(shard);
  req.set_epoch(epoch);
  req.set_replace(replace);
  v1::CreateJobResponse resp;
  return stub_->CreateJob(&ctx, req, &resp);
}

grpc::Status AttackRpc::SetEpoch(const std::string& job, int64_t epoch) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::SetEpochRequest req;
  req.set_job(job);
  req.set_epoch(epoch);
  v1::SetEpochResponse resp;
  return stub_->SetEpoch(&ctx, req, &resp);
}

grpc::Status AttackRpc::ReadState(const std::string& job) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ReadStateRequest req;
  req.set_job(job);
  req.set_count(1);
  v1::ShardState resp;
  return stub_->ReadState(&ctx, req, &resp);
}

grpc::Status AttackRpc::WriteState(const std::string& job) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::WriteStateRequest req;
  req.set_job(job);
  req.set_params(std::string(16, '\x7f'));
  v1::WriteStateResponse resp;
  return stub_->WriteState(&ctx, req, &resp);
}

grpc::Status AttackRpc::DeleteJob(const std::string& job) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::JobRef req;
  req.set_job(job);
  v1::DeleteJobResponse resp;
  return stub_->DeleteJob(&ctx, req, &resp);
}

grpc::Status AttackRpc::GetStats(const std::string& job, v1::ShardStats* stats) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::JobRef req;
  req.set_job(job);
  return stub_->GetStats(&ctx, req, stats);
}

bool IsRefusal(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

void RpcTally::Add(const std::string& what, const grpc::Status& s, bool was_refused) {
  ++tried;
  if (was_refused) {
    ++refused;
    return;
  }
  std::cerr << "attacker: NOT REFUSED: " << what << ": " << s.error_code() << " "
            << s.error_message().substr(0, 200) << "\n";
}

}  // namespace tessel
