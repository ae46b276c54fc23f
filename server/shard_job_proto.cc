#include "server/shard_job_proto.h"

#include <time.h>

#include "core/status_macros.h"
#include "core/straggler.h"
#include "rpc/job_spec.h"

namespace tessel {

absl::StatusOr<v1::ShardState> ReadShardState(ShardJob& job, const v1::ReadStateRequest& req) {
  v1::ShardState out;
  TESSEL_RETURN_IF_ERROR(
      job.ReadState(req.step(), req.epoch(), req.offset(), req.count(), [&](const StateView& v) {
        out.set_step(v.step);
        out.set_range_begin(v.range.begin);
        out.set_range_end(v.range.end);
        out.set_offset(v.offset);
        out.set_state_slots(static_cast<int>(v.state.size()));
        for (int64_t s : v.tensor_skips) out.add_tensor_skips(s);
        const size_t bytes = v.params.size() * sizeof(float);
        out.mutable_params()->assign(reinterpret_cast<const char*>(v.params.data()), bytes);
        std::string* st = out.mutable_state();
        st->reserve(bytes * v.state.size());
        for (absl::Span<const float> slot : v.state) {
          st->append(reinterpret_cast<const char*>(slot.data()), bytes);
        }
      }));
  return out;
}

absl::StatusOr<v1::WriteStateResponse> WriteShardState(ShardJob& job,
                                                       const v1::WriteStateRequest& req) {
  StateWrite w;
  w.step = req.step();
  w.epoch = req.epoch();
  w.offset = req.offset();
  w.params = req.params();
  w.state = req.state();
  w.commit = req.commit();
  w.tensor_skips.assign(req.tensor_skips().begin(), req.tensor_skips().end());
  TESSEL_ASSIGN_OR_RETURN(const StateWritten written, job.WriteState(w));
  v1::WriteStateResponse resp;
  resp.set_staged(written.staged);
  resp.set_step(written.step);
  return resp;
}

v1::ShardStats ShardStatsProto(ShardJob& job, bool with_digest) {
  const JobStats s = job.Stats(with_digest);
  const v1::JobSpec& spec = job.spec();
  v1::ShardStats st;
  st.set_job(spec.job());
  st.set_shard_index(job.shard());
  st.set_range_begin(job.range().begin);
  st.set_range_end(job.range().end);
  st.set_epoch(s.epoch);
  st.set_step(s.step);
  st.set_initialized(s.initialized);
  st.mutable_memory()->set_params_bytes(s.params_bytes);
  st.mutable_memory()->set_optimizer_bytes(s.optimizer_bytes);
  st.mutable_memory()->set_grad_buffer_bytes(s.grad_buffer_bytes);
  if (with_digest) st.set_state_digest(s.state_digest);
  st.set_rejected_frames(s.counters.rejected);
  st.set_pushed_bytes(s.counters.pushed_bytes);
  st.set_pulled_bytes(s.counters.pulled_bytes);
  st.set_step_in_progress(s.step_in_progress);
  st.set_last_checkpoint_step(s.checkpoint.last_step);
  st.set_checkpoint_error(s.checkpoint.error);
  st.set_checkpoint_failing_since(s.checkpoint.failing_since);
  st.set_last_snapshot_pause_us(s.last_snapshot_pause_us);
  st.set_restored_from_step(s.restored_from_step);
  st.set_strategy(StrategyName(spec.strategy()));
  st.set_world_size(spec.world_size());
  st.set_num_shards(spec.num_shards());
  st.set_num_params(job.layout().num_params());
  st.set_stale_epoch_frames(s.counters.stale_epoch);
  st.set_applied_steps(s.counters.applied_steps);
  st.set_update_us(s.counters.update_us);
  st.set_folded_pushes(s.counters.folded_pushes);
  timespec cpu{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
  st.set_process_cpu_us(int64_t{cpu.tv_sec} * 1000000 + cpu.tv_nsec / 1000);
  st.set_recoveries(static_cast<int32_t>(s.counters.recoveries));
  for (int id : s.worker_ids) st.add_worker_ids(id);
  for (const StepArrivals& a : s.flight) {
    v1::StepArrivals* out = st.add_flight();
    out->set_step(a.step);
    out->set_end_us(a.end_us);
    for (int64_t t : a.first_push_us) out->add_first_push_us(t);
    for (int64_t t : a.last_push_us) out->add_last_push_us(t);
    for (int64_t t : a.pull_asked_us) out->add_pull_asked_us(t);
    for (int64_t t : a.pull_served_us) out->add_pull_served_us(t);
  }
  for (int64_t b : s.rank_pushed_bytes) st.add_rank_pushed_bytes(b);
  for (int64_t b : s.rank_pulled_bytes) st.add_rank_pulled_bytes(b);
  if (s.step_started_us >= 0) {
    v1::StepWaiting* w = st.mutable_waiting();
    w->set_step(s.step);
    w->set_started_us(s.step_started_us);
    w->set_host_groups(s.rank_pushed_bytes.size() != static_cast<size_t>(spec.world_size()));
    for (const PushTracker::SlotWaiting& slot : s.waiting) {
      v1::SlotWaiting* out = w->add_slots();
      out->set_slot(slot.slot);
      for (int b : slot.not_pushed) out->add_not_pushed(b);
      for (int b : slot.receiving) out->add_receiving(b);
    }
    for (int r : s.pulls_waiting) w->add_pulls_waiting(r);
    w->set_buckets_updated(s.buckets_updated);
    w->set_num_buckets(s.num_buckets);
    w->set_hold_decided(s.step_hold >= 0);
    w->set_held(s.step_hold == 1);
  }
  for (const RankScore& r : ScoreRanks(s.flight, StragglerRule{})) {
    v1::RankScore* out = st.add_rank_scores();
    out->set_rank(r.rank);
    out->set_score(r.score);
    out->set_lateness_seconds(r.lateness_s);
    out->set_time_seconds(r.time_s);
    out->set_steps(r.steps);
  }
  return st;
}

}  // namespace tessel
