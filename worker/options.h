// WorkerOptions: everything a training process says about how it takes part
// in a Tessel job. Plain C++ types only (no gRPC, protobuf or UCX headers), so
// the SDK can be included anywhere; worker/internal turns them into the
// protocol's types.
//
// Example:
//   WorkerOptions opt;
//   opt.registry = "127.0.0.1:7070";
//   opt.job = "mlp";
//   opt.rank = r;
//   opt.world_size = 2;
//   opt.strategy = Strategy::kZero2;
//   opt.optimizer.kind = OptimizerParams::Kind::kAdam;
//   opt.precision = Precision::kBf16;
#ifndef TESSEL_WORKER_OPTIONS_H_
#define TESSEL_WORKER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/early_stopping.h"
#include "core/lease.h"
#include "core/optimizer_params.h"
#include "core/precision.h"
#include "rpc/tls_options.h"
#include "runtime/timeline.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_options.h"

namespace tessel {

// Where parameters, gradients and optimizer state live (docs/architecture.md).
enum class Strategy {
  kDdp,    // servers only average; each worker runs the optimizer itself
  kZero1,  // servers keep fp32 masters and optimizer state of their range
  kZero2,  // as zero1; with fsdp_units, gradients live per unit, each freed once pushed
  kFsdp,   // ZeRO-3: the worker gathers parameters unit by unit
};

// How the workers of one host send their gradients (docs/hierarchical.md).
enum class Aggregation {
  // kHost where it can help: some host runs two or more of the job's
  // workers and some shard server is on another host; kFlat otherwise.
  kAuto,
  kFlat,  // every worker pushes to and pulls from every shard itself
  // The workers of a host sum their gradients first (in rank order), push
  // one partial sum per bucket, pull once and pass the parameters on inside
  // the host. ddp, zero1, zero2 without units, fp32 and no top-k; others
  // stay flat (Worker::aggregation() says which).
  kHost,
};

// The worker's (and the wire's) parameter and gradient precision. Servers
// keep fp32 masters and optimizer state whatever this is.
enum class Precision { kFp32, kFp16, kBf16 };

// "ddp", "zero1", "zero2", "fsdp" (also "zero3"); "fp32", "fp16", "bf16".
absl::string_view StrategyName(Strategy strategy);
absl::StatusOr<Strategy> StrategyFromName(absl::string_view name);
absl::string_view PrecisionName(Precision precision);
absl::StatusOr<Precision> PrecisionFromName(absl::string_view name);
// nullopt for fp32.
std::optional<HalfType> HalfTypeOf(Precision precision);
// "auto", "flat", "host".
absl::string_view AggregationName(Aggregation aggregation);
absl::StatusOr<Aggregation> AggregationFromName(absl::string_view name);

// When shard servers snapshot the job (servers need --checkpoint_dir).
struct CheckpointPolicy {
  int64_t every_steps = 0;  // 0 = only on request
  int keep_last = 0;        // complete checkpoints kept per job; 0 = 3
  // Also snapshot step 0, as soon as rank 0's INIT completes, so a recovery
  // has a checkpoint to go back to before the first multiple of every_steps.
  bool initial = false;
};

// Makes the endpoint a worker sends and receives data frames through. The
// default (an empty function) is UCX with WorkerOptions::ucx; unit tests pass
// one that makes in-process endpoints (transport/inproc).
using TransportFactory = std::function<absl::StatusOr<std::unique_ptr<Transport>>()>;

struct WorkerOptions {
  std::string registry;  // host:port of the registry (required)
  std::string job;       // job name (required)
  // Serve this worker's Prometheus metrics at http://HOST:PORT/metrics
  // (port 0 picks one, logged); "" = off. worker/internal/worker_metrics.h.
  std::string metrics_address;
  // Write a Chrome-trace timeline of the steps in timeline_window here
  // ("{rank}" is replaced by the rank; "" = off): per bucket, push sent and
  // parameters received (runtime/timeline.h).
  std::string timeline;
  TimelineOptions timeline_window;  // first_step, steps (0: every step)
  int rank = 0;                     // in [0, world_size); [0, elastic_max_workers) with growth
  int world_size = 1;
  std::string server_pool = "default";
  int num_servers = 0;  // shard servers to use: ranks 0..n-1 of the pool; 0 = all present
  Strategy strategy = Strategy::kZero2;
  OptimizerParams optimizer;
  int64_t bucket_bytes = 4 << 20;  // data-path bucket size
  int64_t align_elems = 64;        // shard range alignment (elements)
  // Top-k gradient compression with error feedback (docs/compression.md):
  // 0 = off (the default, bitwise exact); r in (0, 1] pushes the largest
  // ceil(r * n) entries of each bucket of n, as (index, value) pairs, and
  // keeps the rest in a per-worker residual for later steps. Not bitwise
  // equal to single-process training. ddp, zero1, zero2 with fp32 only.
  double topk_ratio = 0;
  absl::Duration connect_timeout = absl::Seconds(60);
  // Polled about every 0.5 s while Connect waits for the other workers to
  // join; a non-OK status ends the wait with it (e.g. a layer on top saw
  // a process of its own lost, so some rank will never join).
  std::function<absl::Status()> connect_check;
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration lease_ttl = kDefaultLeaseTtl;
  UcxOptions ucx;
  // The data-path endpoint (default: UCX with `ucx`).
  TransportFactory transport;
  // Hierarchical aggregation inside a host (Aggregation above).
  Aggregation aggregation = Aggregation::kAuto;
  // This worker's host as the data path sees it ("" = rpc/host_identity.h:
  // boot id and network and IPC namespaces, or $TESSEL_HOST_ID). Workers
  // with the same host_id must reach each other over shared memory or
  // loopback; a test may give processes of one machine different ones.
  std::string host_id;
  // Testing aid: when non-zero, buckets are pushed in a random order with
  // random pauses, to prove results do not depend on arrival order.
  uint64_t shuffle_seed = 0;
  // Checkpoints (ZeRO only; servers need --checkpoint_dir). Every shard
  // snapshots at each multiple of every_steps; rank 0 also asks for one
  // every `checkpoint_interval` of wall time.
  CheckpointPolicy checkpoint;
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  // With checkpoints, rank 0 asks the shards this often (at a step's end)
  // whether checkpoints fail and logs it (Worker::checkpoints_failing_since).
  absl::Duration checkpoint_report_interval = absl::Seconds(30);
  // Start from the job's checkpoint at resume_step (-1: the latest) instead
  // of `init`; the shard count and world size may differ from the run that
  // wrote it. After RegisterLayout, step() is the restored step.
  bool resume = false;
  int64_t resume_step = -1;
  // Decide whether to resume at RegisterLayout (Worker::resumed() says what
  // was decided; options().resume stays as given): resume when the job is
  // already under way on the servers (past step 0) or, not there, has a
  // complete checkpoint; start afresh otherwise. What a process started
  // again with the same command line needs (a Kubernetes Job's replacement
  // pod, a supervisor's restart). A job name reused with old checkpoints in
  // the servers' --checkpoint_dir resumes them.
  bool auto_resume = false;
  // Bearer token for servers and registries that require a credential
  // ("" = $TESSEL_TOKEN if set, else the token in $TESSEL_TOKEN_FILE:
  // rpc/token_env.h): a worker-role token (--worker_token_file on
  // the servers, docs/operations.md "Roles and credentials"), or the admin
  // token.
  std::string token;
  // Early stopping (ReportMetric / ShouldEarlyStop): the patience rule over
  // the job-wide mean of the reported metric, and optionally a hook that
  // decides instead (it sees the mean and the rule's bookkeeping; it runs on
  // every rank with the same inputs, so it must be deterministic).
  EarlyStoppingPolicy early_stopping;
  std::function<bool(double mean, const EarlyStopping& rule)> early_stop_hook;
  // Mutual TLS for the registry and shard-server channels (rpc/tls.h);
  // empty = plaintext. The UCX data path is not encrypted.
  TlsOptions tls;
  // Units (groups of tensors): index of the first tensor of each, ascending
  // from 0. Required for fsdp. For zero2 they make gradients live per unit:
  // UnitGrads(u) (UnitHalfGrads(u) under mixed precision) / PushUnit(u)
  // instead of grads(), each unit's buffer freed as soon as it is pushed;
  // Step() then pulls the parameters.
  std::vector<int> fsdp_units;
  // Mixed precision: kFp16 or kBf16 keeps parameters and gradients in half
  // on this worker and on the wire (half_params(), half_grads(); for fsdp
  // GatherHalf()/UnitHalfGrads()).
  //   zero1/zero2/fsdp  servers keep fp32 masters and optimizer state and
  //                     serve the masters rounded to half.
  //   ddp               servers average the widened half gradients in fp32
  //                     and return the mean rounded to half; each worker keeps
  //                     fp32 masters and state, applies the update and rounds
  //                     the masters to half_params().
  Precision precision = Precision::kFp32;
  // Recovery (docs/operations.md, "Recovery"). When a worker or shard server
  // of the job dies, a step fails with a status IsRecoverable() accepts
  // instead of a fatal one; Recover() then waits up to recovery_timeout for
  // the missing members to come back and rolls every shard and every worker
  // back to the latest complete checkpoint (zero1, zero2, fsdp). DDP, whose
  // state lives only on the workers, does not roll back: the servers are
  // re-created empty and every rank takes the state of the most advanced one
  // (a replacement holds none). With `resume`, RegisterLayout takes part in
  // such a recovery: that is how a replacement worker, or a whole restarted
  // job, rejoins.
  bool recovery = false;
  absl::Duration recovery_timeout = absl::Seconds(60);
  // A lost worker without rollback (zero1, zero2, fsdp; docs/operations.md,
  // "Recovery"): the shards keep the step in flight and the surviving
  // workers wait in it; the replacement (`resume`) takes the step the shards
  // last applied, recomputes the step in flight and pushes what its rank had
  // not pushed yet. The run stays bitwise the one without the fault and
  // nothing is replayed. Needs recovery; not with ddp (which aligns the
  // workers' own state instead), host aggregation (rank_groups),
  // elastic policies, hybrid jobs or worker collectives (SyncBatchNorm):
  // those roll back as above. Every worker of the job passes the same value;
  // if they disagree the job rolls back. A shard server's death still rolls
  // back.
  bool rejoin_in_place = true;
  // Elastic continuation, a job policy (needs recovery; every strategy but
  // hybrid). 0 = off: a lost worker must be replaced (same rank, --resume).
  // N >= 1: when a worker is lost and no replacement has joined within
  // elastic_grace, the job goes on without it as long as at least N workers
  // remain. The survivors are renumbered 0..W'-1 in their old rank order
  // (Worker::rank() and world_size() change; options() and registry
  // identities do not), every shard is restored from the latest complete checkpoint for W'
  // workers (DDP: re-created at the survivors' step, no rollback), and the
  // training loop re-reads Worker::rank() and world_size() after Recover(). Each worker
  // keeps its own batch, so the global batch becomes W' x batch and the
  // optimizer averages over W' workers (docs/operations.md, "Elastic
  // continuation"). A worker that comes back after that is refused.
  int elastic_min_workers = 0;
  absl::Duration elastic_grace = absl::Seconds(10);
  // Elastic growth, a job policy (needs recovery and checkpoint.every_steps;
  // every strategy but hybrid). 0 = off. N > world_size: the job admits new
  // workers until it has N (a Kubernetes Indexed Job scaled up, or a
  // replacement that came after an elastic shrink). A worker whose registry
  // rank is not one of the running job's (rank in [world_size, N), or one the
  // job went on without) is a newcomer: Connect registers it and returns;
  // RegisterLayout waits (up to max(connect_timeout, recovery_timeout)) to be
  // admitted. The job's workers admit the newcomers they all see at the next
  // checkpoint boundary (a step that is a multiple of checkpoint.every_steps):
  // Step() (FinishStep() for fsdp) returns a recoverable status after that
  // step was applied, and Recover() restores every shard from that step's
  // checkpoint for the larger world (nothing rolls back; DDP re-creates the
  // servers at the step and the newcomers take the workers' state). Newcomers
  // are numbered after the existing workers in registry-rank order; the
  // training loop re-reads rank and world size after Recover(), as after an
  // elastic shrink. The result is bitwise a clean resume of the larger world
  // from that checkpoint. Every worker of the job passes the same N.
  int elastic_max_workers = 0;
  // Straggler policy, a job policy (docs/observability.md, "Stragglers and
  // stalls"). kOff (the default): the servers only say who is slow. kEvict
  // (needs elastic_min_workers >= 1): a worker that the shard servers have
  // named the job's slowest straggler continuously for straggler_evict_after
  // is evicted: straggler_evicted() turns true (logged, counted in
  // tessel_worker_straggler_evictions_total) and the caller leaves the job at
  // a checkpoint (tessel-train: asks for one at the next step, runs it, exits
  // with status 3), so the others go on without it through the elastic
  // shrink. Not when the job would have fewer than elastic_min_workers left.
  enum class StragglerPolicy { kOff, kEvict };
  StragglerPolicy straggler_policy = StragglerPolicy::kOff;
  absl::Duration straggler_evict_after = absl::Seconds(60);
};

// Checks what can be checked before connecting: names, rank and world size,
// elastic policy, optimizer hyper-parameters. The message names the field.
absl::Status ValidateWorkerOptions(const WorkerOptions& options);

}  // namespace tessel

#endif  // TESSEL_WORKER_OPTIONS_H_
