// DataPlane: the shard server's side of the data path. Decodes every frame
// the transport delivers, routes it to its job, answers refusals with ERROR
// frames, runs bucket updates on a compute thread (never on the transport
// thread), and sends parameters to the workers that pulled them.
//
// Threads: OnFrame and receive completions on the transport thread; bucket
// updates on the compute thread; job management from gRPC threads. The job
// table is under mu_; each ShardJob guards itself.
//
// Example:
//   DataPlane plane(transport.get());
//   auto created = plane.CreateJob(request);
#ifndef TESSEL_SERVER_DATA_PLANE_H_
#define TESSEL_SERVER_DATA_PLANE_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proto/shard.pb.h"
#include "server/checkpointer.h"
#include "server/shard_job.h"
#include "transport/transport.h"

namespace tessel {

class DataPlane {
 public:
  // `checkpointer` (not owned) receives snapshots; may be a disabled one.
  DataPlane(Transport* transport, Checkpointer* checkpointer);
  ~DataPlane();

  absl::StatusOr<v1::CreateJobResponse> CreateJob(const v1::CreateJobRequest& req);
  // CreateJob with `replace` (recovery): the job starts again from a
  // checkpoint (or, DDP, empty at start_step) at a newer epoch, whatever this
  // server held; see CreateJobRequest.replace.
  absl::StatusOr<v1::CreateJobResponse> ReplaceJob(const v1::CreateJobRequest& req);
  // Asks the job's shard to snapshot at `step` (see ShardJob::RequestCheckpoint).
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(const v1::SaveCheckpointRequest& req);
  Checkpointer* checkpointer() { return checkpointer_; }
  // Where workers send frames now (it changes if the transport is reset).
  std::string ucx_address() const { return transport_->address(); }
  absl::Status DeleteJob(const std::string& job);
  std::shared_ptr<ShardJob> FindJob(const std::string& job);
  std::vector<std::shared_ptr<ShardJob>> Jobs();
  // Frames refused before reaching a job (malformed, unknown job).
  int64_t rejected_unrouted();

 private:
  Accept OnFrame(const Incoming& in);
  void SendError(PeerId to, const FrameHeader& about, const absl::Status& s);
  void ServeParams(const std::shared_ptr<ShardJob>& job, const ShardJob::Serve& serve);
  void ComputeLoop();

  Transport* const transport_;
  Checkpointer* const checkpointer_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<ShardJob>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::shared_ptr<ShardJob>, int>> updates_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rejected_unrouted_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread compute_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_DATA_PLANE_H_
