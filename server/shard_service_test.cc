// ShardService (tessel.v1.ShardServer) over a real in-process gRPC server,
// with credentials configured: tenants kept apart (a worker scoped to job A
// reaches a derived name such as "A.g1" only where that credential created
// it, live or checkpointed), rewinding a job is an admin's, and
// ReadCheckpoint checks its range without overflowing.
#include "server/shard_service.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "server/checkpoint_store.h"
#include "server/checkpointer.h"
#include "server/job_table.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

using grpc::StatusCode;
using Stub = v1::ShardServer::Stub;

constexpr char kAdmin[] = "tessel-admin-token-tenants-0";
constexpr char kWorkerA[] = "tessel-worker-token-job-A-00";   // scope "A"
constexpr char kWorkerA2[] = "tessel-worker-token-job-A-01";  // scope "A" too, another token
constexpr char kTenantX[] = "tessel-worker-token-job-A.g1";   // scope "A.g1": another tenant
constexpr int kParams = 16;

v1::JobSpec Spec(const std::string& job) {
  v1::JobSpec spec;
  spec.set_job(job);
  spec.set_strategy(v1::STRATEGY_ZERO1);
  spec.set_world_size(1);
  spec.set_num_shards(1);
  spec.set_bucket_bytes(32);
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(kParams);
  t->set_dtype(v1::DTYPE_F32);
  spec.mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec.mutable_optimizer()->set_lr(0.1);
  return spec;
}

v1::CreateJobRequest Create(const std::string& job) {
  v1::CreateJobRequest req;
  *req.mutable_spec() = Spec(job);
  req.set_shard_index(0);
  req.set_epoch(1);
  return req;
}

v1::JobRef Ref(const std::string& job) {
  v1::JobRef ref;
  ref.set_job(job);
  return ref;
}

class ShardServiceTest : public ::testing::Test {
 protected:
  ShardServiceTest()
      : checkpointer_(std::make_unique<MemoryStore>(), absl::Seconds(5)),
        jobs_(&checkpointer_),
        service_(&jobs_, /*transport=*/nullptr, Options()) {
    auto server = StartGrpcServer("127.0.0.1:0", {&service_}, &address_);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::ShardServer::NewStub(MakeChannel(address_));
  }
  ~ShardServiceTest() override { server_->Shutdown(absl::ToChronoTime(absl::Now())); }

  static ShardServiceOptions Options() {
    ShardServiceOptions o;
    o.auth.token = kAdmin;
    o.auth.allow_anonymous_reads = false;
    o.auth.worker_tokens = {{kWorkerA, Role::kWorker, {"A"}},
                            {kWorkerA2, Role::kWorker, {"A"}},
                            {kTenantX, Role::kWorker, {"A.g1"}}};
    return o;
  }

  // One RPC with `token`.
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp, const std::string& token) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AddToken(&ctx, token);
    return ((*stub_).*rpc)(&ctx, req, resp);
  }
  template <typename Req, typename Resp>
  StatusCode Code(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
                  const Req& req, const std::string& token) {
    Resp resp;
    return Call(rpc, req, &resp, token).error_code();
  }

  // Creates `job` with `token`, gives it its parameters (rank 0's INIT) and
  // waits for its complete checkpoint of step 0.
  void CreateWithCheckpoint(const std::string& job, const std::string& token) {
    v1::CreateJobResponse created;
    grpc::Status s = Call(&Stub::CreateJob, Create(job), &created, token);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::shared_ptr<ShardJob> live = jobs_.FindJob(job);
    ASSERT_NE(live, nullptr);
    InitWithTestValues(*live, /*epoch=*/1);
    v1::SaveCheckpointRequest save;
    save.set_job(job);
    save.set_step(0);
    v1::SaveCheckpointResponse saved;
    s = Call(&Stub::SaveCheckpoint, save, &saved, token);
    ASSERT_TRUE(s.ok()) << s.error_message();
    checkpointer_.Drain();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!checkpointer_.Read(job, 0).ok() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(checkpointer_.Read(job, 0).ok()) << "no complete checkpoint of " << job;
  }

  Checkpointer checkpointer_;
  JobTable jobs_;
  ShardService service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Stub> stub_;
};

// Issue 42, part 5: job "A.g1" belongs to the tenant whose credential is
// scoped to "A.g1"; the tenant of job "A" reaches names derived from "A"
// only where it created them.
TEST_F(ShardServiceTest, ADerivedNameAnotherTenantCreatedIsOutOfReach) {
  v1::CreateJobResponse created;
  ASSERT_TRUE(Call(&Stub::CreateJob, Create("A.g1"), &created, kTenantX).ok());

  const grpc::Status join = Call(&Stub::CreateJob, Create("A.g1"), &created, kWorkerA);
  EXPECT_EQ(join.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(join.error_message().find("job 'A.g1' was created by another credential"),
            std::string::npos)
      << join.error_message();
  EXPECT_EQ(join.error_message().find(kTenantX), std::string::npos) << "a token in a message";
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g1"), kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::FrameKeyRequest key;
  key.set_job("A.g1");
  EXPECT_EQ(Code(&Stub::GetFrameKey, key, kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::ReadStateRequest read;
  read.set_job("A.g1");
  read.set_count(1);
  EXPECT_EQ(Code(&Stub::ReadState, read, kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::WriteStateRequest write;
  write.set_job("A.g1");
  write.set_step(7);
  write.set_commit(true);
  EXPECT_EQ(Code(&Stub::WriteState, write, kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::SetEpochRequest epoch;
  epoch.set_job("A.g1");
  epoch.set_epoch(9);
  EXPECT_EQ(Code(&Stub::SetEpoch, epoch, kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::SaveCheckpointRequest save;
  save.set_job("A.g1");
  save.set_step(3);
  EXPECT_EQ(Code(&Stub::SaveCheckpoint, save, kWorkerA), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(jobs_.FindJob("A.g1")->epoch(), 1) << "a refusal changed the job";
  // Its owner and the admin still reach it.
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g1"), kTenantX), StatusCode::OK);
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g1"), kAdmin), StatusCode::OK);

  // What A's credential creates within its scope stays its own: another
  // credential of the same scope reaches "A" itself, not A's derived jobs.
  ASSERT_TRUE(Call(&Stub::CreateJob, Create("A"), &created, kWorkerA).ok());
  ASSERT_TRUE(Call(&Stub::CreateJob, Create("A.g2"), &created, kWorkerA).ok());
  EXPECT_TRUE(Call(&Stub::CreateJob, Create("A.g2"), &created, kWorkerA).ok());  // a re-join
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g2"), kWorkerA), StatusCode::OK);
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g2"), kWorkerA2), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A"), kWorkerA2), StatusCode::OK);
  // The SDK's helper jobs: created and deleted by the same credential.
  ASSERT_TRUE(Call(&Stub::CreateJob, Create("A~sync8.e1"), &created, kWorkerA).ok());
  EXPECT_EQ(Code(&Stub::DeleteJob, Ref("A~sync8.e1"), kWorkerA2), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Code(&Stub::DeleteJob, Ref("A~sync8.e1"), kWorkerA), StatusCode::OK);

  // A's listing shows its own jobs, not the other tenant's "A.g1".
  v1::ListJobsResponse listed;
  ASSERT_TRUE(Call(&Stub::ListJobs, v1::ListJobsRequest(), &listed, kWorkerA).ok());
  std::vector<std::string> names;
  for (const v1::ShardStats& j : listed.jobs()) names.push_back(j.job());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"A", "A.g2"}));
}

// The mesh group of a hybrid job "A.g1" (its key) is the tenant's that
// first asked for it.
TEST_F(ShardServiceTest, AMeshKeyIsTheTenantsThatFirstAskedForIt) {
  v1::MeshKeyRequest mesh;
  mesh.set_mesh("A.g1.mesh");
  EXPECT_EQ(Code(&Stub::GetMeshKey, mesh, kTenantX), StatusCode::OK);
  EXPECT_EQ(Code(&Stub::GetMeshKey, mesh, kTenantX), StatusCode::OK);
  EXPECT_EQ(Code(&Stub::GetMeshKey, mesh, kWorkerA), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Code(&Stub::GetMeshKey, mesh, kAdmin), StatusCode::OK);
}

// The creator is recorded in the checkpoint's manifest (a fingerprint, not
// the token) and outlives the live job: a restarted server (the job gone)
// does not hand another tenant the checkpoints, and a restore keeps the
// creator whoever restores.
TEST_F(ShardServiceTest, CheckpointsKeepTheirCreator) {
  CreateWithCheckpoint("A.g1", kTenantX);
  v1::CheckpointRef ref;
  ref.set_job("A.g1");
  ref.set_step(0);
  v1::CheckpointInfo info;
  ASSERT_TRUE(Call(&Stub::GetCheckpoint, ref, &info, kTenantX).ok());
  EXPECT_NE(info.manifest_json().find(TokenIdentity(kTenantX)), std::string::npos)
      << info.manifest_json();
  EXPECT_EQ(info.manifest_json().find(kTenantX), std::string::npos) << "the token itself";

  ASSERT_EQ(Code(&Stub::DeleteJob, Ref("A.g1"), kAdmin), StatusCode::OK);  // as a restart
  EXPECT_EQ(Code(&Stub::GetCheckpoint, ref, kWorkerA), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Code(&Stub::ListCheckpoints, Ref("A.g1"), kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::ReadCheckpointRequest read;
  read.set_job("A.g1");
  read.set_step(-1);
  read.set_count(kParams);
  EXPECT_EQ(Code(&Stub::ReadCheckpoint, read, kWorkerA), StatusCode::PERMISSION_DENIED);
  v1::CreateJobRequest restore = Create("A.g1");
  restore.set_restore(true);
  restore.set_restore_step(-1);
  EXPECT_EQ(Code(&Stub::CreateJob, restore, kWorkerA), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Code(&Stub::CreateJob, Create("A.g1"), kWorkerA), StatusCode::PERMISSION_DENIED)
      << "a fresh job over another tenant's checkpoints (its pruning would remove them)";
  EXPECT_EQ(jobs_.FindJob("A.g1"), nullptr);

  // The operator restores it (tesselctl checkpoint restore): still X's.
  v1::CreateJobResponse created;
  ASSERT_TRUE(Call(&Stub::CreateJob, restore, &created, kAdmin).ok());
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g1"), kWorkerA), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Code(&Stub::GetStats, Ref("A.g1"), kTenantX), StatusCode::OK);
  EXPECT_EQ(Code(&Stub::ReadCheckpoint, read, kTenantX), StatusCode::OK);

  // A's own derived job checkpoints as A's and restores for A.
  CreateWithCheckpoint("A.g2", kWorkerA);
  ASSERT_EQ(Code(&Stub::DeleteJob, Ref("A.g2"), kAdmin), StatusCode::OK);
  v1::CreateJobRequest own = Create("A.g2");
  own.set_restore(true);
  own.set_restore_step(-1);
  EXPECT_EQ(Code(&Stub::CreateJob, own, kWorkerA), StatusCode::OK);
  read.set_job("A.g2");
  EXPECT_EQ(Code(&Stub::ReadCheckpoint, read, kWorkerA), StatusCode::OK);
}

// WriteState behind the job's latest complete checkpoint rewinds the job: an
// admin's (as a restore of an older checkpoint is; otherwise ReadCheckpoint
// and WriteState would be that restore). Back within the steps since it
// (tessel.torch's load_state_dict of an earlier state_dict), the same or a
// later step stay the worker's.
TEST_F(ShardServiceTest, RewindingBehindTheLatestCheckpointNeedsAdmin) {
  CreateWithCheckpoint("A", kWorkerA);
  v1::ReadStateRequest read;
  read.set_job("A");
  read.set_step(0);
  read.set_count(kParams);
  v1::ShardState state;
  ASSERT_TRUE(Call(&Stub::ReadState, read, &state, kWorkerA).ok());
  auto write = [&](int64_t step, const std::string& token) {
    v1::WriteStateRequest w;
    w.set_job("A");
    w.set_step(step);
    w.set_offset(0);
    w.set_params(state.params());
    w.set_state(state.state());
    w.set_commit(true);
    v1::WriteStateResponse resp;
    return Call(&Stub::WriteState, w, &resp, token);
  };
  ASSERT_TRUE(write(5, kWorkerA).ok());  // forward (a load into a fresh job)
  EXPECT_TRUE(write(5, kWorkerA).ok());  // the same step (LoadParameters)
  EXPECT_TRUE(write(2, kWorkerA).ok());  // back, not behind checkpoint 0 (load_state_dict)
  ASSERT_TRUE(write(5, kWorkerA).ok());
  v1::SaveCheckpointRequest save;
  save.set_job("A");
  save.set_step(5);
  v1::SaveCheckpointResponse saved;
  ASSERT_TRUE(Call(&Stub::SaveCheckpoint, save, &saved, kWorkerA).ok());
  checkpointer_.Drain();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!checkpointer_.Read("A", 5).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(checkpointer_.Read("A", 5).ok());

  const grpc::Status back = write(3, kWorkerA);
  EXPECT_EQ(back.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(back.error_message().find("may not write step 3 into job 'A' (at step 5): the latest "
                                      "complete checkpoint is step 5"),
            std::string::npos)
      << back.error_message();
  EXPECT_NE(back.error_message().find("an admin credential may"), std::string::npos)
      << back.error_message();
  EXPECT_EQ(jobs_.FindJob("A")->version(), 5) << "the refusal changed the job";
  EXPECT_TRUE(write(5, kWorkerA).ok());
  EXPECT_TRUE(write(3, kAdmin).ok());
  EXPECT_EQ(jobs_.FindJob("A")->version(), 3);
}

// SetEpoch never moves a job's epoch back, whoever asks: fencing.
TEST_F(ShardServiceTest, SetEpochNeverGoesBack) {
  v1::CreateJobRequest req = Create("A");
  req.set_epoch(4);
  v1::CreateJobResponse created;
  ASSERT_TRUE(Call(&Stub::CreateJob, req, &created, kWorkerA).ok());
  v1::SetEpochRequest back;
  back.set_job("A");
  back.set_epoch(2);
  EXPECT_NE(Code(&Stub::SetEpoch, back, kWorkerA), StatusCode::OK);
  EXPECT_EQ(jobs_.FindJob("A")->epoch(), 4);
  back.set_epoch(6);
  EXPECT_EQ(Code(&Stub::SetEpoch, back, kWorkerA), StatusCode::OK);
  EXPECT_EQ(jobs_.FindJob("A")->epoch(), 6);
}

// ReadCheckpoint's range is checked without computing offset + count, which
// overflows for an offset near the int64 maximum (and -1 is UINT64_MAX sent
// as the wire's int64).
TEST_F(ShardServiceTest, ReadCheckpointRangeIsCheckedWithoutOverflow) {
  CreateWithCheckpoint("A", kWorkerA);
  v1::ReadCheckpointRequest read;
  read.set_job("A");
  read.set_step(0);
  read.set_count(kParams);
  v1::CheckpointParams params;
  ASSERT_TRUE(Call(&Stub::ReadCheckpoint, read, &params, kWorkerA).ok());
  EXPECT_EQ(params.params().size(), size_t{kParams} * 4);
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int64_t offset : {kMax, kMax - 1, kMax - kParams + 1, int64_t{-1},
                         std::numeric_limits<int64_t>::min(), int64_t{kParams - 1}}) {
    read.set_offset(offset);
    read.set_count(4);
    const grpc::Status s = Call(&Stub::ReadCheckpoint, read, &params, kWorkerA);
    EXPECT_EQ(s.error_code(), StatusCode::OUT_OF_RANGE) << offset << ": " << s.error_message();
  }
  read.set_offset(kParams - 4);
  ASSERT_TRUE(Call(&Stub::ReadCheckpoint, read, &params, kWorkerA).ok());
  EXPECT_EQ(params.offset(), kParams - 4);
}

}  // namespace
}  // namespace tessel
