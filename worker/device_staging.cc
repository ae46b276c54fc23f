#include "worker/device_staging.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "runtime/log.h"

namespace tessel {

using gpu::Stream;

DeviceStaging::DeviceStaging(Worker* worker, gpu::Device* device, std::vector<Range> chunks)
    : worker_(worker),
      device_(device),
      chunks_(std::move(chunks)),
      half_(worker->half_type()),
      topk_ratio_(worker->options().topk_ratio) {}

DeviceStaging::~DeviceStaging() {
  // The worker takes the parameters and state back before the device's go.
  if (ddp_on_device_) {
    if (absl::Status s = worker_->SetDdpUpdater(nullptr); !s.ok()) {
      TESSEL_LOG(WARNING) << "device staging: the worker could not take DDP's state back from "
                          << "the device: " << s;
    }
  }
  if (absl::Status s = Drain(); !s.ok()) TESSEL_LOG(WARNING) << "device staging: " << s;
  for (int i = 0; i < gpu::kNumStreams; ++i) {
    if (absl::Status s = device_->SynchronizeStream(Stream(i)); !s.ok()) {
      TESSEL_LOG(WARNING) << "device staging: waiting for stream " << i
                          << " before unpinning the worker's buffers failed: " << s;
    }
  }
  Unpin();
}

absl::StatusOr<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(Worker* worker,
                                                                     gpu::Device* device,
                                                                     std::vector<Range> chunks) {
  const WorkerOptions& o = worker->options();
  if (!o.fsdp_units.empty() || o.strategy == Strategy::kFsdp) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", o.job,
                     ": device staging is for the full-buffer strategies (ddp, zero1, zero2 "
                     "without units); a per-unit job copies each unit inside its UnitModel calls"));
  }
  const int64_t n = static_cast<int64_t>(worker->layout().num_params());
  if (chunks.empty()) chunks.push_back({0, n});
  std::vector<Range> sorted = chunks;
  std::sort(sorted.begin(), sorted.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  int64_t at = 0;
  for (const Range& r : sorted) {
    if (r.begin != at || r.end <= r.begin) {
      return absl::InvalidArgumentError(absl::StrCat("device staging: chunks must tile [0, ", n,
                                                     ") without gaps or overlaps; [", r.begin, ", ",
                                                     r.end, ") does not follow ", at));
    }
    at = r.end;
  }
  if (at != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("device staging: chunks end at ", at, ", the parameters at ", n));
  }
  std::unique_ptr<DeviceStaging> s(new DeviceStaging(worker, device, std::move(chunks)));
  const size_t count = static_cast<size_t>(n);
  TESSEL_ASSIGN_OR_RETURN(auto params, gpu::DeviceBuffer<float>::Create(device, count));
  TESSEL_ASSIGN_OR_RETURN(auto grads, gpu::DeviceBuffer<float>::Create(device, count));
  s->params_ = std::move(params);
  s->grads_ = std::move(grads);
  if (s->half_) {
    TESSEL_ASSIGN_OR_RETURN(auto hp, gpu::DeviceBuffer<uint16_t>::Create(device, count));
    TESSEL_ASSIGN_OR_RETURN(auto hg, gpu::DeviceBuffer<uint16_t>::Create(device, count));
    s->half_params_ = std::move(hp);
    s->half_grads_ = std::move(hg);
  }
  if (s->topk_ratio_ > 0) {
    TESSEL_ASSIGN_OR_RETURN(auto residual, gpu::DeviceBuffer<float>::Create(device, count));
    TESSEL_ASSIGN_OR_RETURN(
        auto sparse, gpu::DeviceBuffer<uint8_t>::Create(device, worker->sparse_grads().size()));
    s->residual_ = std::move(residual);
    s->sparse_ = std::move(sparse);
    const Layout& layout = worker->layout();
    for (int shard = 0; shard < layout.num_shards(); ++shard) {
      s->bucket_ready_.emplace_back(static_cast<size_t>(layout.num_buckets(shard)), 0);
    }
  }
  for (size_t c = 0; c < s->chunks_.size(); ++c) s->chunk_ready_.push_back(device->NewEvent());
  s->compute_done_ = device->NewEvent();
  TESSEL_RETURN_IF_ERROR(s->Reload());
  if (o.strategy == Strategy::kDdp) {
    if (s->half_) {
      TESSEL_ASSIGN_OR_RETURN(s->masters_, gpu::DeviceBuffer<float>::Create(device, count));
    }
    for (int k = 0; k < StateSlots(o.optimizer); ++k) {
      TESSEL_ASSIGN_OR_RETURN(auto slot, gpu::DeviceBuffer<float>::Create(device, count));
      s->slots_.push_back(std::move(slot));
    }
    // Hands over the parameters and state (Load).
    TESSEL_RETURN_IF_ERROR(worker->SetDdpUpdater(s.get()));
    s->ddp_on_device_ = true;
  }
  return s;
}

absl::Status DeviceStaging::Pin() {
  Unpin();
  // Memory the device will not page-lock (cudaHostRegister may refuse some
  // mappings) is still copied, only synchronously: say so once, go on.
  auto pin = [&](void* p, size_t bytes) -> absl::Status {
    if (p == nullptr || bytes == 0) return absl::OkStatus();
    absl::Status s = device_->PinHost(p, bytes);
    if (s.ok()) {
      pinned_.push_back(p);
    } else if (!warned_unpinned_) {
      warned_unpinned_ = true;
      TESSEL_LOG(WARNING) << "device staging: " << s.message()
                          << "; copying through pageable memory (correct, not overlapped)";
    }
    return absl::OkStatus();
  };
  absl::Status s;
  if (half_) {
    s = pin(worker_->half_params().data(), worker_->half_params().size() * sizeof(uint16_t));
    if (s.ok()) s = pin(worker_->half_grads().data(), worker_->half_grads().size() * 2);
  } else {
    s = pin(worker_->params().data(), worker_->params().size() * sizeof(float));
    if (s.ok()) s = pin(worker_->grads().data(), worker_->grads().size() * sizeof(float));
  }
  if (s.ok() && topk_ratio_ > 0)
    s = pin(worker_->sparse_grads().data(), worker_->sparse_grads().size());
  return s;
}

void DeviceStaging::Unpin() {
  for (void* p : pinned_) device_->UnpinHost(p);
  pinned_.clear();
}

absl::Status DeviceStaging::Reload() {
  TESSEL_RETURN_IF_ERROR(Drain());
  for (int s = 0; s < gpu::kNumStreams; ++s) {
    TESSEL_RETURN_IF_ERROR(device_->SynchronizeStream(Stream(s)));
  }
  TESSEL_RETURN_IF_ERROR(Pin());
  if (topk_ratio_ > 0) {  // what was held back belongs to the steps rolled back
    device_->Fill(Stream::kCompute, residual_.data(), 0.f, residual_.size());
  }
  if (!ddp_on_device_) Upload();  // DDP: the worker's changes came through Load
  TESSEL_RETURN_IF_ERROR(device_->SynchronizeStream(Stream::kCompute));
  return device_->SynchronizeStream(Stream::kToDevice);
}

void DeviceStaging::AfterCompute() {
  device_->Record(Stream::kCompute, compute_done_.get());
  device_->Wait(Stream::kToDevice, compute_done_.get());
}

void DeviceStaging::Upload() {
  // Nothing enqueued on the compute stream so far may still read the old
  // parameters when the new ones land.
  AfterCompute();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    ToDevice(chunks_[c], worker_->params().data(), worker_->half_params().data(),
             half_params_.data(), params_.data());
    device_->Record(Stream::kToDevice, chunk_ready_[c].get());
  }
}

void DeviceStaging::ToDevice(Range r, const float* host, const uint16_t* host_half,
                             uint16_t* half_scratch, float* dst) {
  const size_t n = static_cast<size_t>(r.size());
  if (half_) {
    device_->CopyToDevice(Stream::kToDevice, half_scratch + r.begin, host_half + r.begin,
                          n * sizeof(uint16_t));
    device_->HalfToFloat(Stream::kToDevice, *half_, half_scratch + r.begin, dst + r.begin, n);
  } else {
    device_->CopyToDevice(Stream::kToDevice, dst + r.begin, host + r.begin, n * sizeof(float));
  }
}

void DeviceStaging::WaitParams(Stream stream, int chunk) {
  device_->Wait(stream, chunk_ready_[static_cast<size_t>(chunk)].get());
}

DeviceStaging::PendingCopy DeviceStaging::NewCopy() {
  PendingCopy copy;
  if (!spare_.empty()) {
    copy = std::move(spare_.back());
    spare_.pop_back();
  } else {
    copy.computed = device_->NewEvent();
    copy.begun = device_->NewEvent();
    copy.landed = device_->NewEvent();
  }
  device_->Record(Stream::kCompute, copy.computed.get());
  device_->Wait(Stream::kToHost, copy.computed.get());
  device_->Record(Stream::kToHost, copy.begun.get());
  return copy;
}

void DeviceStaging::EnqueueSparse(Range range) {
  const Layout& layout = worker_->layout();
  if (range.begin < 0 || range.end > layout.num_params() || range.begin > range.end) {
    if (enqueue_error_.ok()) {
      enqueue_error_ = absl::InvalidArgumentError(
          absl::StrCat("device staging: gradient range [", range.begin, ", ", range.end,
                       ") is outside [0, ", layout.num_params(), ")"));
    }
    return;
  }
  const uint8_t* host_base = worker_->sparse_grads().data();
  for (int64_t at = range.begin; at < range.end;) {
    const int s = layout.ShardOf(at);
    const int b = layout.BucketOf(s, at);
    const Range br = layout.bucket_range(s, b);
    const int64_t upto = std::min(range.end, br.end);
    int64_t& ready = bucket_ready_[s][b];
    ready += upto - at;
    at = upto;
    if (ready > br.size()) {
      if (enqueue_error_.ok()) {
        enqueue_error_ = absl::InvalidArgumentError(
            absl::StrCat("device staging: gradients of bucket ", b, " of shard ", s,
                         " were enqueued twice this step"));
      }
      continue;
    }
    if (ready < br.size()) continue;
    absl::StatusOr<absl::Span<uint8_t>> host = worker_->SparseBucket(s, b);
    if (!host.ok()) {
      if (enqueue_error_.ok()) enqueue_error_ = host.status();
      continue;
    }
    uint8_t* device_wire = sparse_.data() + (host->data() - host_base);
    PendingCopy copy = NewCopy();
    copy.range = br;
    copy.shard = s;
    copy.bucket = b;
    copy.bytes = host->size();
    device_->TopkCompress(Stream::kToHost, grads_.data() + br.begin, residual_.data() + br.begin,
                          br.size(), static_cast<int64_t>(host->size() / 8), device_wire);
    device_->CopyToHost(Stream::kToHost, host->data(), device_wire, host->size());
    device_->Record(Stream::kToHost, copy.landed.get());
    pending_.push_back(std::move(copy));
  }
}

void DeviceStaging::GradientsEnqueued(Range range) {
  if (topk_ratio_ > 0) {
    EnqueueSparse(range);
    return;
  }
  PendingCopy copy = NewCopy();
  copy.range = range;
  copy.shard = copy.bucket = -1;
  const size_t n = static_cast<size_t>(range.size());
  copy.bytes = n * (half_ ? sizeof(uint16_t) : sizeof(float));
  if (half_) {
    device_->FloatToHalf(Stream::kToHost, *half_, grads_.data() + range.begin,
                         half_grads_.data() + range.begin, n);
    device_->CopyToHost(Stream::kToHost, worker_->half_grads().data() + range.begin,
                        half_grads_.data() + range.begin, n * sizeof(uint16_t));
  } else {
    device_->CopyToHost(Stream::kToHost, worker_->grads().data() + range.begin,
                        grads_.data() + range.begin, n * sizeof(float));
  }
  device_->Record(Stream::kToHost, copy.landed.get());
  pending_.push_back(std::move(copy));
}

absl::Status DeviceStaging::Drain() {
  absl::Status first;
  for (PendingCopy& c : pending_) {
    absl::Status s = device_->Synchronize(c.landed.get());
    if (first.ok()) first = s;
  }
  for (PendingCopy& c : pending_) spare_.push_back(std::move(c));
  pending_.clear();
  for (auto& shard : bucket_ready_) std::fill(shard.begin(), shard.end(), 0);
  return first;
}

absl::Status DeviceStaging::Step() {
  device_->Record(Stream::kCompute, compute_done_.get());
  for (auto& shard : bucket_ready_) std::fill(shard.begin(), shard.end(), 0);
  absl::Status status = std::exchange(enqueue_error_, absl::OkStatus());
  for (size_t handed = 0; handed < pending_.size() && status.ok(); ++handed) {
    PendingCopy& c = pending_[handed];
    status = device_->Synchronize(c.landed.get());
    if (!status.ok()) break;
    status = c.bucket >= 0 ? worker_->SparseGradientsReady(c.shard, c.bucket)
                           : worker_->GradientsReady(c.range.begin, c.range.end);
  }
  if (!status.ok()) {
    (void)Drain();
    return status;
  }
  // Kept for LastStepTiming; their events return to spare_ at the next Step.
  for (PendingCopy& c : last_) spare_.push_back(std::move(c));
  last_ = std::move(pending_);
  pending_.clear();
  TESSEL_RETURN_IF_ERROR(worker_->Step());  // DDP: Apply() queued the update on the device
  if (!ddp_on_device_) Upload();
  return absl::OkStatus();
}

void DeviceStaging::RoundMasters(Range r) {
  const size_t n = static_cast<size_t>(r.size());
  device_->FloatToHalf(Stream::kToDevice, *half_, masters_.data() + r.begin,
                       half_params_.data() + r.begin, n);
  device_->HalfToFloat(Stream::kToDevice, *half_, half_params_.data() + r.begin,
                       params_.data() + r.begin, n);
}

absl::Status DeviceStaging::Apply(const OptimizerParams& optimizer, absl::Span<const Run> runs) {
  if (static_cast<int>(slots_.size()) != StateSlots(optimizer)) {
    return absl::InternalError(absl::StrCat("device staging holds ", slots_.size(),
                                            " optimizer state slots; the update needs ",
                                            StateSlots(optimizer)));
  }
  // The averaged gradient replaces this step's own in grads_, whose copies
  // have all landed (Step() waited for them).
  AfterCompute();
  float* state[kMaxStateSlots] = {};
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Range r = chunks_[c];
    ToDevice(r, worker_->grads().data(), worker_->half_grads().data(), half_grads_.data(),
             grads_.data());
    for (const Run& run : runs) {  // the tensors' runs inside this chunk
      const int64_t begin = std::max(run.range.begin, r.begin);
      const int64_t end = std::min(run.range.end, r.end);
      if (begin >= end) continue;
      for (size_t k = 0; k < slots_.size(); ++k) state[k] = slots_[k].data() + begin;
      device_->ApplyUpdate(Stream::kToDevice, optimizer, run.step, masters() + begin,
                           grads_.data() + begin, state, static_cast<size_t>(end - begin));
    }
    if (half_) RoundMasters(r);
    device_->Record(Stream::kToDevice, chunk_ready_[c].get());
  }
  return absl::OkStatus();
}

absl::Status DeviceStaging::Store(float* params, absl::Span<float* const> slots) {
  if (slots.size() != slots_.size()) {
    return absl::InternalError(absl::StrCat("device staging: ", slots.size(),
                                            " state slots asked for, ", slots_.size(), " held"));
  }
  const size_t bytes = static_cast<size_t>(params_.size()) * sizeof(float);
  // Behind the updates queued on kToDevice.
  device_->CopyToHost(Stream::kToDevice, params, masters(), bytes);
  for (size_t k = 0; k < slots.size(); ++k) {
    device_->CopyToHost(Stream::kToDevice, slots[k], slots_[k].data(), bytes);
  }
  return device_->SynchronizeStream(Stream::kToDevice);
}

absl::Status DeviceStaging::Load(const float* params, absl::Span<const float* const> slots) {
  if (slots.size() != slots_.size()) {
    return absl::InternalError(absl::StrCat("device staging: ", slots.size(),
                                            " state slots handed over, ", slots_.size(), " held"));
  }
  const size_t bytes = static_cast<size_t>(params_.size()) * sizeof(float);
  AfterCompute();
  device_->CopyToDevice(Stream::kToDevice, masters(), params, bytes);
  for (size_t k = 0; k < slots.size(); ++k) {
    device_->CopyToDevice(Stream::kToDevice, slots_[k].data(), slots[k], bytes);
  }
  if (half_) RoundMasters({0, static_cast<int64_t>(params_.size())});
  for (auto& ready : chunk_ready_) device_->Record(Stream::kToDevice, ready.get());
  return device_->SynchronizeStream(Stream::kToDevice);
}

absl::StatusOr<DeviceStaging::StepTiming> DeviceStaging::LastStepTiming() {
  if (last_.empty()) return absl::FailedPreconditionError("no step has run");
  StepTiming t;
  const gpu::Event* origin = last_.front().computed.get();
  for (const PendingCopy& c : last_) {
    TESSEL_ASSIGN_OR_RETURN(const double begin, device_->ElapsedMs(origin, c.begun.get()));
    TESSEL_ASSIGN_OR_RETURN(const double end, device_->ElapsedMs(origin, c.landed.get()));
    t.copies.push_back({c.range, c.bytes, begin, end});
  }
  // The last range's `computed` follows the last backward kernel.
  TESSEL_ASSIGN_OR_RETURN(auto done, device_->ElapsedMs(origin, last_.back().computed.get()));
  t.compute_done_ms = done;
  return t;
}

}  // namespace tessel
