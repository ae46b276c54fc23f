// Fuzz target: the shard server's frame handler end to end, DataPlane::
// OnFrame (server/data_plane.h) over a real JobTable holding one small job
// (fuzz/frame_jobs.h: 3 buckets, 2 ranks), fed frames as a hostile peer
// sends them (fuzz/frame_input.h): header bytes, payload_bytes, in-place
// payloads and their contents all from the input, through FakeTransport,
// which honours the Accept as the real transports do.
//
// The first input byte picks the job and the server (frame_jobs.h kPlane*):
// data-path authentication on or off, ddp/zero1/zero2, bf16, top-k pushes,
// prefix folding, inline updates. A frame flagged kSeal is sealed with the
// up key of its header's rank (runtime/rank_keys.h: the worker of that rank
// holds it); every other frame under authentication is a forgery.
//
// Invariants besides "no crash, no sanitizer report":
//   - the transport never writes past the room a handler gave (ASan) and
//     no handler gives implausible room (FakeTransport);
//   - with authentication on, a frame that is not sealed with the key is
//     refused (no room, no borrow) and answered with nothing;
//   - every frame the server sends decodes, and carries the payload its
//     header announces; an ERROR's text is at most kMaxErrorTextBytes;
//   - a refused frame changes no state: when every frame of the input was
//     refused (an ERROR answer, a drop counted, a payload too large for its
//     room), the job's step, initialization and state digest are unchanged.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/wire.h"
#include "fuzz/fake_transport.h"
#include "fuzz/frame_input.h"
#include "fuzz/frame_jobs.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/quiet_logs.h"
#include "proto/shard.pb.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "server/checkpointer.h"
#include "server/data_plane.h"
#include "server/frame_keys.h"
#include "server/job_table.h"
#include "server/shard_job.h"

namespace tessel::fuzz {
namespace {

v1::CreateJobRequest JobRequest(uint8_t config) {
  v1::CreateJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job(kFuzzJob);
  const int strategy = (config & kPlaneStrategy) >> 1;
  spec->set_strategy(strategy == 0   ? v1::STRATEGY_DDP
                     : strategy == 1 ? v1::STRATEGY_ZERO1
                                     : v1::STRATEGY_ZERO2);
  spec->set_world_size(kFuzzWorld);
  spec->set_num_shards(1);
  const bool half = (config & kPlaneHalf) != 0;
  spec->set_bucket_bytes(kFuzzBucketElements * 4);
  spec->set_align_elems(kFuzzAlign);
  v1::TensorSpec* t = spec->add_tensors();
  t->set_name("w");
  t->add_shape(kFuzzElements);
  t->set_dtype(half ? v1::DTYPE_BF16 : v1::DTYPE_F32);
  if ((config & kPlaneTopk) != 0 && !half) spec->mutable_compression()->set_topk_ratio(0.25);
  spec->mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec->mutable_optimizer()->set_lr(0.1);
  req.set_shard_index(0);
  req.set_epoch(kFuzzEpoch);
  return req;
}

struct JobState {
  int64_t step = 0;
  bool initialized = false;
  std::string digest;
  bool operator==(const JobState& o) const {
    return step == o.step && initialized == o.initialized && digest == o.digest;
  }
};

JobState StateOf(ShardJob& job) {
  JobStats s = job.Stats(/*with_digest=*/true);
  return {s.step, s.initialized, s.state_digest};
}

std::string Describe(const JobState& s) {
  return absl::StrCat("step ", s.step, s.initialized ? ", initialized" : ", not initialized",
                      ", digest ", s.digest);
}

// Checks every frame sent from index `from` on; returns how many are ERRORs.
int CheckSent(const std::vector<FakeTransport::Sent>& sent, size_t from) {
  int errors = 0;
  for (size_t i = from; i < sent.size(); ++i) {
    absl::StatusOr<FrameHeader> h = DecodeWireHeader(absl::MakeConstSpan(sent[i].header));
    FUZZ_CHECK(h.ok(),
               absl::StrCat("the server sent an undecodable header: ", h.status().ToString()));
    FUZZ_CHECK(h->payload_bytes == sent[i].payload.size(),
               absl::StrCat(DescribeHeader(*h), " went out with ", sent[i].payload.size(),
                            " payload bytes"));
    if (h->type == FrameType::kError) {
      ++errors;
      FUZZ_CHECK(h->payload_bytes <= kMaxErrorTextBytes,
                 absl::StrCat("an ERROR text of ", h->payload_bytes, " bytes"));
    }
  }
  return errors;
}

}  // namespace
}  // namespace tessel::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) { return tessel::fuzz::QuietLogs(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  using namespace tessel::fuzz;
  const uint8_t config = ConfigByte(data, size);
  const bool auth_on = (config & kPlaneAuth) != 0;

  // Destroyed in reverse: the plane, then the jobs (which may hold borrowed
  // pushes), then the transport (which keeps the in-place payloads).
  FakeTransport transport;
  Checkpointer checkpointer(nullptr);
  FrameKeys keys(auth_on);
  JobTable jobs(&checkpointer, nullptr, /*fold_prefix=*/(config & kPlaneFold) != 0);
  absl::StatusOr<v1::CreateJobResponse> created = jobs.CreateJob(JobRequest(config));
  FUZZ_CHECK(created.ok(), absl::StrCat("the fuzz job was refused: ", created.status().ToString()));
  std::shared_ptr<ShardJob> job = jobs.FindJob(kFuzzJob);
  FUZZ_CHECK(job != nullptr, "the fuzz job is not in the table");
  std::shared_ptr<JobFrameKeys> key = auth_on ? keys.For(job->job_id(), job->shard()) : nullptr;
  const JobState before = StateOf(*job);

  bool all_refused = true;
  bool any_sealed = false;
  std::string trace;  // shown by --repro (TESSEL_FUZZ_SHOW_INPUT)
  {
    DataPlane plane(&transport, &jobs, &checkpointer, nullptr, nullptr, /*update_threads=*/1,
                    absl::ZeroDuration(), SpinMode::kEvent,
                    (config & kPlaneInline) != 0 ? int64_t{1} << 20 : 0, &keys);
    ForEachFrame(data, size, [&](const FuzzFrame& f) {
      std::vector<uint8_t> header = f.header;
      absl::StatusOr<FrameHeader> decoded = header.size() >= kHeaderBytes
                                                ? DecodeHeader(header.data(), kHeaderBytes)
                                                : absl::InvalidArgumentError("short");
      // A worker of the job seals its frames with its rank's up key (the
      // rank secret GetFrameKey gives it): only this job's and shard's
      // frames, of one of its ranks.
      bool sealed = false;
      if (key != nullptr && f.seal() && decoded.ok() && decoded->job_id == job->job_id() &&
          decoded->shard == job->shard() && decoded->rank >= 0 && decoded->rank < kFuzzWorld) {
        absl::StatusOr<std::shared_ptr<const RankFrameKeys>> worker =
            RankFrameKeys::Create({key->RankSecret(decoded->rank, decoded->epoch), ""},
                                  job->job_id(), job->shard(), decoded->rank, decoded->epoch);
        FUZZ_CHECK(worker.ok(), worker.status().ToString());
        const SealedHeader wire = (*worker)->Seal(*decoded, /*to_worker=*/false);
        header.assign(wire.begin(), wire.end());
        sealed = true;
        any_sealed = true;
      }
      const uint64_t payload_bytes = f.PayloadBytes(decoded.ok() ? decoded->payload_bytes : 0);

      const size_t sent_before = transport.sent_count();
      const int64_t unrouted_before = plane.rejected_unrouted();
      const int64_t dropped_before = plane.unanswered() + plane.unauthenticated();
      const int64_t rejected_before = job->Stats(false).counters.rejected;
      const FakeTransport::Outcome out =
          transport.Deliver(f.target_bits() + 1, header, payload_bytes, f.content, f.in_place());
      const std::vector<FakeTransport::Sent> sent = transport.sent();
      const int errors = CheckSent(sent, sent_before);
      const bool dropped = plane.rejected_unrouted() != unrouted_before ||
                           plane.unanswered() + plane.unauthenticated() != dropped_before ||
                           job->Stats(false).counters.rejected != rejected_before;
      const bool is_error_frame = decoded.ok() && decoded->type == FrameType::kError;
      const bool refused = errors > 0 || dropped || out.too_large || is_error_frame;
      all_refused = all_refused && refused;
      absl::StrAppend(&trace, decoded.ok() ? DescribeHeader(*decoded) : "(undecodable header)",
                      sealed ? " sealed" : "", " payload ", payload_bytes,
                      f.in_place() ? " in place" : "", ": ",
                      out.written     ? "written"
                      : out.borrowed  ? "borrowed"
                      : out.too_large ? "too large"
                                      : "no payload taken",
                      refused ? ", refused" : "", errors > 0 ? " (ERROR sent)" : "", "\n");

      if (auth_on && !sealed) {
        FUZZ_CHECK(!out.written && !out.borrowed,
                   absl::StrCat("a frame without the job's key was taken: ",
                                decoded.ok() ? DescribeHeader(*decoded) : "undecodable"));
        FUZZ_CHECK(errors == 0, "a frame without the job's key was answered with an ERROR");
      }
    });
    transport.RunCompletions();
    plane.Stop();
  }
  const JobState after = StateOf(*job);
  ShowGeneratedInput(absl::StrCat("config ", static_cast<int>(config), "\n", trace,
                                  "job: ", Describe(before), " -> ", Describe(after), "; ",
                                  transport.sent_count(), " frame(s) sent"));
  CheckSent(transport.sent(), 0);
  if (auth_on && !any_sealed) {
    FUZZ_CHECK(transport.sent_count() == 0,
               absl::StrCat("the server answered ", transport.sent_count(),
                            " frame(s) though none carried the job's key"));
  }
  if (all_refused || (auth_on && !any_sealed)) {
    FUZZ_CHECK(after == before, absl::StrCat("every frame was refused, yet the job went from ",
                                             Describe(before), " to ", Describe(after)));
  }
  return 0;
}
