#include "worker/worker_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/auth.h"
#include "rpc/metrics_server.h"
#include "rpc/registry_flags.h"
#include "rpc/tls_flags.h"
#include "rpc/token_flag.h"
#include "runtime/timeline_flags.h"
#include "transport/ucx/ucx_flags.h"
#include "worker/train_flags.h"

ABSL_FLAG(std::string, pool, "default", "shard server pool");
ABSL_FLAG(int, step_timeout_s, 120,
          "seconds any wait (a step on the servers, a peer's message) may take before the worker "
          "gives up");
ABSL_FLAG(int, connect_timeout_s, 60, "seconds to wait for the servers and every other worker");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "every shard checkpoints at multiples of N steps (servers need --checkpoint_dir); "
          "needed for --recover with zero1/zero2/fsdp and hybrid (0 = never)");
ABSL_FLAG(int, checkpoint_every_s, 0, "rank 0 asks for a checkpoint every N seconds (0 = never)");
ABSL_FLAG(int, checkpoint_report_s, 30,
          "with checkpoints, rank 0 asks the shard servers every N seconds (at a step's end) "
          "whether checkpoints fail, and logs a WARNING naming the first failed step and why "
          "(a full disk), and when they succeed again (0 = at every step)");
ABSL_FLAG(bool, checkpoint_initial, false,
          "also checkpoint step 0 (so a recovery before the first periodic checkpoint restarts "
          "from the initial parameters)");
ABSL_FLAG(int, keep_checkpoints, 3,
          "complete checkpoints kept per job (hybrid with --recover: >= 3, partitions roll back "
          "to a step all of them have complete)");
ABSL_FLAG(bool, recover, true,
          "when a worker or shard server dies, pause, wait (up to --recovery_timeout_s) for it "
          "to come back (a lost worker: a replacement started with its --rank and --resume) and "
          "roll the job back to the latest checkpoint, then go on (false: fail the step)");
ABSL_FLAG(bool, resume, false,
          "start from the job's checkpoint instead of the initial parameters: a replacement for "
          "a lost worker of a running job, or, when every worker passes it, a whole restart");
ABSL_FLAG(bool, auto_resume, false,
          "resume when the job is already under way on the servers or has a checkpoint, start "
          "afresh otherwise: one command line for the first start and every restart (a "
          "Kubernetes Job's replacement pod)");
ABSL_FLAG(int64_t, resume_step, -1, "with --resume: the checkpoint's step (-1 = latest)");
ABSL_FLAG(bool, rejoin_in_place, true,
          "with --recover, zero1/zero2/fsdp: a lost worker costs no rollback; the others wait in "
          "the step in flight and its replacement (--rank=R --resume) rejoins that step; the "
          "shards keep two versions of the parameters for it (false: roll back to the latest "
          "checkpoint as for a lost shard server, and the shards update in place: one version, "
          "a faster update; every worker of a job passes the same value)");
ABSL_FLAG(int, recovery_timeout_s, 60,
          "seconds to wait for a lost worker or shard server to return before giving up");
ABSL_FLAG(int, elastic_min_workers, 0,
          "job policy when a worker is lost (needs --recover): 0 = wait for a replacement "
          "(--rank=R --resume); N = if none joins within --elastic_grace_s, go on from the "
          "latest checkpoint with the survivors, renumbered, as long as at least N remain. "
          "Each worker keeps --batch, so the global batch shrinks");
ABSL_FLAG(double, elastic_grace_s, 10,
          "with --elastic_min_workers: seconds to wait for a replacement before going on "
          "without the lost worker(s)");
ABSL_FLAG(std::string, straggler_policy, "off",
          "off: the shard servers only name stragglers; evict (needs --elastic_min_workers): a "
          "worker named the job's slowest straggler for --straggler_evict_after_s leaves the job "
          "at a checkpoint and the others go on without it (docs/observability.md)");
ABSL_FLAG(double, straggler_evict_after_s, 60,
          "with --straggler_policy=evict: seconds a worker must stay named before it is evicted");
ABSL_FLAG(int, elastic_max_workers, 0,
          "0 = the job keeps its world size; N > --world = it grows up to N workers: a worker "
          "started with a rank the job does not have (--rank in [world, N), e.g. the new index "
          "of a scaled-up Indexed Job) joins the running job and is admitted at the next "
          "checkpoint boundary (needs --recover and --checkpoint_every_steps; every worker of "
          "the job passes the same N)");
ABSL_FLAG(std::string, host_id, "",
          "this worker's host for --aggregation (default: boot id and network and IPC "
          "namespaces, or $TESSEL_HOST_ID); workers with one host_id must reach each other over "
          "shared memory or loopback");

namespace tessel {

uint64_t ShuffleSeedFor(int rank) {
  const uint64_t seed = absl::GetFlag(FLAGS_shuffle_seed);
  return seed == 0 ? 0 : seed + static_cast<uint64_t>(rank) * 7919;
}

absl::StatusOr<WorkerOptions> WorkerOptionsFromFlags() {
  WorkerOptions o;
  TESSEL_ASSIGN_OR_RETURN(auto optimizer, OptimizerFromFlags());
  TESSEL_ASSIGN_OR_RETURN(auto strategy, StrategyFromFlags());
  TESSEL_ASSIGN_OR_RETURN(auto half, PrecisionFromFlags());
  o.registry = absl::GetFlag(FLAGS_registry);  // checked where it is used (Worker::Create)
  o.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  TESSEL_ASSIGN_OR_RETURN(auto timeline, TimelineFromFlags());
  o.timeline = timeline.path;
  o.timeline_window = timeline.window;
  o.server_pool = absl::GetFlag(FLAGS_pool);
  o.strategy = strategy;
  o.optimizer = optimizer;
  o.precision = PrecisionOf(half);
  o.bucket_bytes = absl::GetFlag(FLAGS_bucket_bytes);
  o.topk_ratio = absl::GetFlag(FLAGS_topk_ratio);
  TESSEL_ASSIGN_OR_RETURN(auto ucx, UcxOptionsFromFlags());
  o.ucx = ucx;
  o.shuffle_seed = absl::GetFlag(FLAGS_shuffle_seed);
  TESSEL_ASSIGN_OR_RETURN(auto aggregation, AggregationFromFlags());
  o.aggregation = aggregation;
  o.host_id = absl::GetFlag(FLAGS_host_id);
  o.step_timeout = absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  o.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  o.tls = TlsOptionsFromFlags();
  o.resume = absl::GetFlag(FLAGS_resume);
  o.resume_step = absl::GetFlag(FLAGS_resume_step);
  o.auto_resume = absl::GetFlag(FLAGS_auto_resume);
  o.checkpoint.every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  o.checkpoint.keep_last = absl::GetFlag(FLAGS_keep_checkpoints);
  o.checkpoint.initial = absl::GetFlag(FLAGS_checkpoint_initial);
  o.checkpoint_interval = absl::Seconds(absl::GetFlag(FLAGS_checkpoint_every_s));
  o.checkpoint_report_interval =
      absl::Seconds(std::max(0, absl::GetFlag(FLAGS_checkpoint_report_s)));
  o.recovery = absl::GetFlag(FLAGS_recover);
  o.rejoin_in_place = absl::GetFlag(FLAGS_rejoin_in_place);
  TESSEL_ASSIGN_OR_RETURN(auto lease_ttl, LeaseTtlFromFlags());
  o.lease_ttl = lease_ttl;
  o.recovery_timeout = absl::Seconds(absl::GetFlag(FLAGS_recovery_timeout_s));
  o.elastic_min_workers = absl::GetFlag(FLAGS_elastic_min_workers);
  o.elastic_grace = absl::Seconds(absl::GetFlag(FLAGS_elastic_grace_s));
  o.elastic_max_workers = absl::GetFlag(FLAGS_elastic_max_workers);
  const std::string policy = absl::GetFlag(FLAGS_straggler_policy);
  if (policy == "evict") {
    o.straggler_policy = WorkerOptions::StragglerPolicy::kEvict;
  } else if (policy != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler_policy: off or evict, got '", policy, "'"));
  }
  o.straggler_evict_after = absl::Seconds(absl::GetFlag(FLAGS_straggler_evict_after_s));
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    TESSEL_ASSIGN_OR_RETURN(auto token,
                            ReadTokenFile("--token_file", absl::GetFlag(FLAGS_token_file)));
    o.token = token;
  }
  return o;
}

}  // namespace tessel
