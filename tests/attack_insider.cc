#include "tests/attack_insider.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <iostream>
#include <map>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/wire.h"
#include "rpc/tls_flags.h"
#include "rpc/token_flag.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "tests/attack_frames.h"
#include "tests/attack_rpc.h"
#include "tools/internal/mlp_job.h"
#include "transport/ucx/ucx_flags.h"
#include "transport/ucx/ucx_transport.h"
#include "worker/internal/job_context.h"
#include "worker/train_flags.h"
#include "worker/worker.h"
#include "worker/worker_flags.h"

namespace tessel {
namespace {

constexpr absl::Duration kTargetsWait = absl::Seconds(60);

int Fail(const std::string& what) {
  std::cerr << "attacker: " << what << "\n";
  return 1;
}

// This process's claim on its rank's frame keys: the one its Worker made
// (one per process), so GetFrameKey answers it the key its Worker holds.
std::string OwnClaim() { return internal::JobContext(WorkerOptions()).frame_key_claim; }

// `h` with `bytes` bytes of 0x7F, sealed by `keys` (`to_worker`: its host
// key, else its up key) as a frame of `kind`.
void AddSealed(std::vector<AttackFrame>* frames, const std::string& kind, const RankFrameKeys& keys,
               FrameHeader h, bool to_worker, size_t bytes) {
  h.payload_bytes = bytes;
  const std::vector<uint8_t> payload(bytes, 0x7F);
  const WireHeader w = keys.SealFrame(h, to_worker, payload.data());
  AddFrame(frames, kind, w.span(), bytes);
}

// A UCX endpoint of the attacker's own (not its Worker's), counting what
// its peers send it.
struct Sprayer {
  std::unique_ptr<UcxTransport> transport;
  std::atomic<int64_t> answers{0};
  size_t sent = 0, failed = 0;

  absl::Status Start() {
    auto t = UcxTransport::Create({.tls = absl::GetFlag(FLAGS_ucx_tls)});
    if (!t.ok()) return t.status();
    transport = std::move(*t);
    transport->SetHandler(CountingHandler(&answers));
    return absl::OkStatus();
  }
  // Sends `frames` to `address`; false if it cannot be reached.
  bool SendTo(const std::string& address, std::vector<AttackFrame> frames) {
    auto peer = transport->Connect(address);
    if (!peer.ok()) {
      std::cerr << "attacker: " << peer.status() << "\n";
      return false;
    }
    kept.push_back(std::move(frames));  // read by the sends until Shutdown
    const std::vector<AttackFrame>& these = kept.back();
    SprayResult r = Spray(*transport, *peer, these);
    sent += r.done;
    failed += r.failed;
    return r.done == these.size();
  }
  // Waits a moment for answers, stops the transport and prints the line.
  int Finish(const RpcTally& rpcs, bool ok) {
    absl::SleepFor(absl::Milliseconds(200));
    transport->Shutdown();
    std::vector<AttackFrame> every;
    for (const auto& k : kept) every.insert(every.end(), k.begin(), k.end());
    std::cout << "sent " << sent << " frames (" << failed << " failed); kinds " << KindCounts(every)
              << "; answers " << answers.load() << "; rpcs " << rpcs.refused << "/" << rpcs.tried
              << std::endl;
    return ok && failed == 0 ? 0 : 1;
  }
  std::deque<std::vector<AttackFrame>> kept;  // deque: elements never move
};

// The payload bytes of each bucket of each shard, as far as a member can
// tell from what it sees: a bucket is a unit's part of the shard's range
// (buckets never straddle a unit), split every bucket_bytes. So the frames
// it forges have the real size, and would be taken if their tags were.
std::map<int, std::vector<size_t>> BucketBytes(Worker& worker) {
  std::map<int, std::vector<size_t>> out;
  auto reports = worker.ServerStats();
  if (!reports.ok()) return out;
  const int64_t bucket_elems = worker.options().bucket_bytes / 4;
  for (const ShardReport& r : *reports) {
    for (int u = 0; u < worker.num_units(); ++u) {
      const Range unit = worker.unit_range(u);
      for (int64_t b = std::max(unit.begin, r.range.begin), e = std::min(unit.end, r.range.end);
           b < e; b += bucket_elems) {
        out[r.shard].push_back(static_cast<size_t>(std::min(e - b, bucket_elems)) * 4);
      }
    }
  }
  return out;
}

// The member's attack at its current step `k` (see attack_insider.h).
int MemberAttack(const InsiderConfig& c, const WorkerOptions& o, int rank, int world, int64_t epoch,
                 int64_t k, int64_t last_step, const std::map<int, std::vector<size_t>>& sizes) {
  auto targets = WaitForTargets(c.targets, kTargetsWait);
  if (!targets.ok()) return Fail(targets.status().ToString());
  const uint64_t job_id = JobId(c.job);
  const std::string claim = OwnClaim();
  RpcTally rpcs;
  Sprayer s;
  if (absl::Status st = s.Start(); !st.ok()) return Fail(st.ToString());
  std::map<int, std::shared_ptr<const RankFrameKeys>> keys;  // per shard
  bool ok = true;
  for (const AttackTargets::Server& server : targets->servers) {
    AttackRpc rpc(server.grpc, o.token, o.tls);
    v1::FrameKeyResponse resp;
    if (c.kinds.count("steal_key")) {
      for (int r = 0; r <= world; ++r) {
        if (r == rank) continue;
        grpc::Status st = rpc.GetFrameKey(c.job, r, epoch, claim, &resp);
        // Another rank's key: PERMISSION_DENIED (given already); outside
        // the world: INVALID_ARGUMENT.
        rpcs.Add(absl::StrCat("GetFrameKey of rank ", r), st,
                 r < world ? st.error_code() == grpc::StatusCode::PERMISSION_DENIED
                           : st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
      }
      grpc::Status st = rpc.GetFrameKey(c.job, rank, epoch + 1, claim, &resp);
      rpcs.Add("GetFrameKey of the next epoch", st,
               st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    }
    // Its own key: what its Worker was given (the same claim asking again).
    grpc::Status st = rpc.GetFrameKey(c.job, rank, epoch, claim, &resp);
    if (!st.ok()) return Fail("GetFrameKey of its own rank: " + st.error_message());
    if (resp.secret().empty()) return Fail("the servers do not authenticate frames");
    FrameKeyGrant grant{resp.secret(), resp.host_secret(),
                        resp.key_version() >= kPayloadKeysVersion};
    auto mine = RankFrameKeys::Create(grant, job_id, server.shard, rank, epoch);
    if (!mine.ok()) return Fail(mine.status().ToString());
    keys[server.shard] = *mine;
    std::vector<AttackFrame> frames;
    for (int64_t step = k; step <= last_step; ++step) {
      for (int b = 0; b < c.buckets; ++b) {
        auto header = [&](FrameType t, int r) {
          return MakeHeader(t, job_id, epoch, step, r, server.shard, b);
        };
        // The real size where a frame could be taken (this step and the
        // next); elsewhere --bytes (the sends stay cheap).
        auto shard_sizes = sizes.find(server.shard);
        const size_t bytes = step <= k + 1 && shard_sizes != sizes.end() &&
                                     static_cast<size_t>(b) < shard_sizes->second.size()
                                 ? shard_sizes->second[b]
                                 : static_cast<size_t>(c.bytes);
        if (c.kinds.count("other_rank")) {
          for (int r = 0; r < world; ++r) {
            if (r != rank)
              AddSealed(&frames, "other_rank", **mine, header(FrameType::kPush, r), false, bytes);
          }
        }
        if (c.kinds.count("replay_push")) {
          AddSealed(&frames, "replay_push", **mine, header(FrameType::kPush, rank), false, bytes);
          FrameHeader part = header(FrameType::kPush, rank);
          part.bucket_count = PushPartCount(0);
          AddSealed(&frames, "replay_push", **mine, part, false, bytes);
        }
        if (c.kinds.count("replay_pull")) {
          FrameHeader pull = header(FrameType::kPull, rank);
          pull.bucket_count = 1;
          AddSealed(&frames, "replay_pull", **mine, pull, false, 0);
        }
      }
    }
    if (!frames.empty()) ok &= s.SendTo(server.ucx, std::move(frames));
  }
  if (c.kinds.count("forged_direction")) {
    for (const AttackTargets::Peer& peer : targets->workers) {
      if (peer.rank == rank) continue;
      std::vector<AttackFrame> frames;
      for (const auto& [shard, mine] : keys) {
        for (int64_t step = k; step <= last_step; ++step) {
          for (int b = 0; b < c.buckets; ++b) {
            FrameHeader params =
                MakeHeader(FrameType::kParams, job_id, epoch, step, peer.rank, shard, b);
            params.bucket_count = 1;
            AddSealed(&frames, "forged_direction", *mine, params, false, c.bytes);
            AddSealed(&frames, "forged_direction", *mine, params, true, c.bytes);
            FrameHeader error =
                MakeHeader(FrameType::kError, job_id, epoch, step, peer.rank, shard, b);
            error.code = 13;  // INTERNAL
            AddSealed(&frames, "forged_direction", *mine, error, false, 1024);
          }
        }
      }
      ok &= s.SendTo(peer.ucx, std::move(frames));
    }
  }
  return s.Finish(rpcs, ok);
}

}  // namespace

int RunMember(const InsiderConfig& c) {
  for (const std::string& k : c.kinds) {
    if (k != "steal_key" && k != "other_rank" && k != "replay_push" && k != "replay_pull" &&
        k != "forged_direction") {
      return Fail("unknown member kind '" + k + "' (see tests/attack_insider.h)");
    }
  }
  auto o = WorkerOptionsFromFlags();
  if (!o.ok()) return Fail(o.status().ToString());
  o->job = c.job;
  o->rank = c.rank;
  o->world_size = c.world;
  o->num_servers = c.servers;
  o->shuffle_seed = ShuffleSeedFor(c.rank);
  auto config = MlpJobFromFlags();
  if (!config.ok()) return Fail(config.status().ToString());
  // The job's units as tessel-train declares them (one per MLP layer for
  // zero2 and fsdp on the CPU): part of the job's spec, so every rank's.
  if (o->strategy == Strategy::kFsdp ||
      (o->strategy == Strategy::kZero2 && absl::GetFlag(FLAGS_micro_batches) == 1)) {
    for (size_t l = 0; l + 1 < config->layers.size(); ++l) {
      o->fsdp_units.push_back(static_cast<int>(2 * l));
    }
  }
  if (o->strategy == Strategy::kFsdp) return Fail("the member trains zero1, zero2 or ddp");
  auto worker = Worker::Connect(*o);
  if (!worker.ok()) return Fail(worker.status().ToString());
  MlpJob job(*config);
  std::vector<float> init(job.model().num_params()), grads(init.size());
  job.Init(init.data());
  if (absl::Status s = (*worker)->RegisterLayout(job.Tensors(), init); !s.ok()) {
    return Fail(s.ToString());
  }
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  const bool units = !o->fsdp_units.empty();
  for (int64_t k = (*worker)->step(); k < steps; ++k) {
    if (k == c.attack_at && !c.kinds.empty()) {
      if (int rc = MemberAttack(c, *o, (*worker)->rank(), (*worker)->world_size(),
                                (*worker)->epoch(), k, steps - 1, BucketBytes(**worker));
          rc != 0) {
        return rc;
      }
    }
    job.Gradients((*worker)->params().data(), k, (*worker)->rank(), (*worker)->world_size(),
                  grads.data(), {});
    absl::Status s;
    if (units) {
      for (int u = 0; u < (*worker)->num_units() && s.ok(); ++u) {
        const Range r = (*worker)->unit_range(u);
        absl::Span<float> g = (*worker)->UnitGrads(u);
        std::copy(grads.begin() + r.begin, grads.begin() + r.end, g.begin());
        s = (*worker)->PushUnit(u);
      }
    } else {
      std::copy(grads.begin(), grads.end(), (*worker)->grads().begin());
    }
    if (s.ok()) s = (*worker)->Step();
    if (!s.ok()) return Fail(absl::StrCat("member step ", k, ": ", s.ToString()));
  }
  if (c.kinds.empty()) std::cout << "sent 0 frames (0 failed); trained " << steps << " steps\n";
  return 0;
}

int RunTenantSetup(const InsiderConfig& c) {
  auto targets = ReadTargets(c.targets);
  if (!targets.ok()) return Fail(targets.status().ToString());
  auto token = TokenFromFlag();
  if (!token.ok()) return Fail(token.status().ToString());
  const int shards = static_cast<int>(targets->servers.size());
  for (const AttackTargets::Server& server : targets->servers) {
    AttackRpc rpc(server.grpc, *token, TlsOptionsFromFlags());
    for (const std::string& v : c.victims) {
      grpc::Status s = rpc.CreateJob(v, server.shard, shards, 1, c.epoch);
      if (!s.ok()) return Fail(absl::StrCat("CreateJob ", v, ": ", s.error_message()));
    }
    if (!c.mesh.empty()) {
      grpc::Status s = rpc.GetMeshKey(c.mesh);
      if (!s.ok()) return Fail(absl::StrCat("GetMeshKey ", c.mesh, ": ", s.error_message()));
    }
  }
  std::cout << "created " << c.victims.size() << " jobs and the mesh key on " << shards
            << " servers\n";
  return 0;
}

int RunTenantStats(const InsiderConfig& c) {
  auto targets = ReadTargets(c.targets);
  if (!targets.ok()) return Fail(targets.status().ToString());
  auto token = TokenFromFlag();
  if (!token.ok()) return Fail(token.status().ToString());
  bool initialized = false;
  int64_t step = 0, refused = 0;
  for (const std::string& v : c.victims) {
    for (const AttackTargets::Server& server : targets->servers) {
      v1::ShardStats stats;
      grpc::Status s = AttackRpc(server.grpc, *token, TlsOptionsFromFlags()).GetStats(v, &stats);
      if (!s.ok()) return Fail(absl::StrCat("GetStats ", v, ": ", s.error_message()));
      initialized |= stats.initialized();
      step = std::max(step, stats.step());
      refused += stats.rejected_frames();
    }
  }
  std::cout << "initialized " << (initialized ? "true" : "false") << " step " << step << " refused "
            << refused << "\n";
  return 0;
}

int RunTenant(const InsiderConfig& c) {
  auto targets = ReadTargets(c.targets);
  if (!targets.ok()) return Fail(targets.status().ToString());
  auto token = TokenFromFlag();
  if (!token.ok()) return Fail(token.status().ToString());
  const int shards = static_cast<int>(targets->servers.size());
  const std::string claim = NewJobSecret();
  RpcTally rpcs;
  Sprayer s;
  if (absl::Status st = s.Start(); !st.ok()) return Fail(st.ToString());
  bool ok = true;
  for (const AttackTargets::Server& server : targets->servers) {
    AttackRpc rpc(server.grpc, *token, TlsOptionsFromFlags());
    v1::FrameKeyResponse resp;
    for (const std::string& v : c.victims) {
      const std::string on = absl::StrCat(" of '", v, "' on shard ", server.shard);
      auto refused = [&](const std::string& what, const grpc::Status& st) {
        rpcs.Add(what + on, st, st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
      };
      refused("CreateJob", rpc.CreateJob(v, server.shard, shards, 1, c.epoch));
      refused("a recovery's CreateJob", rpc.CreateJob(v, server.shard, shards, 1, c.epoch + 1,
                                                      /*replace=*/true));
      refused("SetEpoch", rpc.SetEpoch(v, c.epoch + 1));
      refused("GetFrameKey", rpc.GetFrameKey(v, 0, c.epoch, claim, &resp));
      refused("ReadState", rpc.ReadState(v));
      refused("WriteState", rpc.WriteState(v));
      refused("DeleteJob", rpc.DeleteJob(v));
    }
    if (!c.mesh.empty()) {
      grpc::Status st = rpc.GetMeshKey(c.mesh);
      rpcs.Add("GetMeshKey of " + c.mesh, st,
               st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
    // A derived name nobody holds is the attacker's to create; its rank 0's
    // key is a real key of the servers, of another job than the victims'.
    grpc::Status st = rpc.CreateJob(c.own, server.shard, shards, 1, c.epoch);
    if (!st.ok())
      return Fail(absl::StrCat("CreateJob of its own ", c.own, ": ", st.error_message()));
    st = rpc.GetFrameKey(c.own, 0, c.epoch, claim, &resp);
    if (!st.ok() || resp.secret().empty()) {
      return Fail(absl::StrCat("GetFrameKey of its own ", c.own, ": ", st.error_message()));
    }
    FrameKeyGrant grant{resp.secret(), resp.host_secret(),
                        resp.key_version() >= kPayloadKeysVersion};
    auto mine = RankFrameKeys::Create(grant, JobId(c.own), server.shard, 0, c.epoch);
    if (!mine.ok()) return Fail(mine.status().ToString());
    std::vector<AttackFrame> frames;
    for (const std::string& v : c.victims) {
      for (int64_t step = 0; step < 4; ++step) {
        auto header = [&](FrameType t) {
          return MakeHeader(t, JobId(v), c.epoch, step, 0, server.shard, 0);
        };
        if (step == 0)
          AddSealed(&frames, "tenant_init", **mine, header(FrameType::kInit), false, c.bytes);
        AddSealed(&frames, "tenant_push", **mine, header(FrameType::kPush), false, c.bytes);
        FrameHeader pull = header(FrameType::kPull);
        pull.bucket_count = 1;
        AddSealed(&frames, "tenant_pull", **mine, pull, false, 0);
      }
    }
    ok &= s.SendTo(server.ucx, std::move(frames));
  }
  return s.Finish(rpcs, ok);
}

}  // namespace tessel
