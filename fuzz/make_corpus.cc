// make_corpus: writes the seed inputs of the fuzz targets that Tessel's own
// encoders produce: frame headers (EncodeHeader), .npy files (WriteNpyF32),
// serialized JobSpecs (derived from the spec a real checkpoint recorded) and
// the UCX transport's descriptors and releases (EncodeDescriptor,
// EncodeRelease), and the frame sequences of the frame-handler targets
// (fuzz/frame_seeds.h).
// fuzz/make_corpus.sh builds and runs it; the numpy files and the checkpoint
// JSON come from numpy and a real run (see fuzz/README.md).
//
// Usage: make_corpus CORPUS_DIR MANIFEST_JSON
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/checkpoint_manifest.h"
#include "core/npy.h"
#include "core/wire.h"
#include "fuzz/frame_seeds.h"
#include "google/protobuf/util/json_util.h"
#include "proto/shard.pb.h"
#include "transport/ucx/internal/descriptor_codec.h"

namespace {

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) std::cerr << "make_corpus: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

std::string HeaderString(const tessel::FrameHeader& h) {
  const tessel::HeaderBytes b = tessel::EncodeHeader(h);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

bool Headers(const std::string& dir) {
  using tessel::FrameType;
  const uint64_t job = tessel::JobId("mlp");
  tessel::FrameHeader push{FrameType::kPush, job, 2, 17, 1, 0, 3};
  push.payload_bytes = 4096 * 4;
  tessel::FrameHeader pull{FrameType::kPull, job, 2, 17, 0, 1, 0};
  pull.bucket_count = 4;
  tessel::FrameHeader notify{FrameType::kPull, job, 2, 18, 1, 1, 0};  // bucket_count 0
  tessel::FrameHeader params{FrameType::kParams, job, 2, 17, 0, 1, 0};
  params.bucket_count = 4;
  params.payload_bytes = 4 * 4096 * 4;
  tessel::FrameHeader init{FrameType::kInit, job, 1, 0, 0, 0, 0};
  init.payload_bytes = 676 * 4;
  tessel::FrameHeader error{FrameType::kError, job, 3, 17, 1, 0, 3};
  error.code = 9;  // FAILED_PRECONDITION
  error.payload_bytes = 42;

  std::string bad_magic = HeaderString(push);
  bad_magic[0] = 'X';
  std::string reserved = HeaderString(push);
  reserved[62] = 1;
  std::string bad_type = HeaderString(push);
  bad_type[6] = 9;
  tessel::FrameHeader push_count = push;  // PUSH frames carry 0 or kPushPart
  push_count.bucket_count = 2;
  return WriteFile(dir + "/push", HeaderString(push)) &&
         WriteFile(dir + "/pull", HeaderString(pull)) &&
         WriteFile(dir + "/pull_notify", HeaderString(notify)) &&
         WriteFile(dir + "/params", HeaderString(params)) &&
         WriteFile(dir + "/init", HeaderString(init)) &&
         WriteFile(dir + "/error", HeaderString(error)) &&
         WriteFile(dir + "/bad_magic", bad_magic) && WriteFile(dir + "/bad_reserved", reserved) &&
         WriteFile(dir + "/bad_type", bad_type) &&
         WriteFile(dir + "/bad_push_count", HeaderString(push_count)) &&
         WriteFile(dir + "/bad_short", HeaderString(push).substr(0, 63));
}

bool Npy(const std::string& dir) {
  std::vector<float> ramp;
  for (int i = 0; i < 37; ++i) ramp.push_back(static_cast<float>(i) * 0.25f - 3.0f);
  for (const auto& [name, n] : std::vector<std::pair<std::string, size_t>>{
           {"ours_0.npy", 0}, {"ours_1.npy", 1}, {"ours_37.npy", 37}}) {
    const std::vector<float> v(ramp.begin(), ramp.begin() + static_cast<long>(n));
    if (absl::Status s = tessel::WriteNpyF32(dir + "/" + name, v); !s.ok()) {
      std::cerr << "make_corpus: " << s << "\n";
      return false;
    }
  }
  return true;
}

bool Specs(const std::string& dir, const std::string& manifest_path) {
  std::ifstream in(manifest_path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<tessel::Manifest> m = tessel::ParseManifest(text.str());
  if (!m.ok()) {
    std::cerr << "make_corpus: " << manifest_path << ": " << m.status() << "\n";
    return false;
  }
  tessel::v1::JobSpec real;
  if (auto s = google::protobuf::util::JsonStringToMessage(m->spec_json, &real); !s.ok()) {
    std::cerr << "make_corpus: the manifest's spec is not a JobSpec: " << s << "\n";
    return false;
  }
  std::vector<std::pair<std::string, tessel::v1::JobSpec>> specs;
  specs.emplace_back("zero2_adam_real", real);

  tessel::v1::JobSpec fsdp = real;  // two units: fc0.*, fc1.*
  fsdp.set_strategy(tessel::v1::STRATEGY_FSDP);
  fsdp.add_unit_first_tensor(0);
  fsdp.add_unit_first_tensor(2);
  fsdp.set_bucket_bytes(256);
  fsdp.set_align_elems(16);
  specs.emplace_back("fsdp_units", fsdp);

  tessel::v1::JobSpec ddp_sgd = real;
  ddp_sgd.set_strategy(tessel::v1::STRATEGY_DDP);
  ddp_sgd.set_num_shards(3);
  ddp_sgd.set_world_size(4);
  ddp_sgd.clear_optimizer();
  ddp_sgd.mutable_optimizer()->set_kind(tessel::v1::OptimizerConfig::SGD);
  ddp_sgd.mutable_optimizer()->set_lr(0.1);
  ddp_sgd.mutable_optimizer()->set_momentum(0.9);
  ddp_sgd.mutable_optimizer()->set_nesterov(true);
  ddp_sgd.set_align_elems(0);
  specs.emplace_back("ddp_sgd", ddp_sgd);

  tessel::v1::JobSpec rms = real;
  rms.set_strategy(tessel::v1::STRATEGY_ZERO1);
  rms.clear_optimizer();
  rms.mutable_optimizer()->set_kind(tessel::v1::OptimizerConfig::RMSPROP);
  rms.mutable_optimizer()->set_lr(0.01);
  rms.mutable_optimizer()->set_alpha(0.99);
  rms.mutable_optimizer()->set_eps(1e-8);
  rms.mutable_optimizer()->set_momentum(0.5);
  rms.mutable_optimizer()->set_centered(true);
  specs.emplace_back("zero1_rmsprop", rms);

  tessel::v1::JobSpec adagrad = real;
  adagrad.clear_optimizer();
  adagrad.mutable_optimizer()->set_kind(tessel::v1::OptimizerConfig::ADAGRAD);
  adagrad.mutable_optimizer()->set_lr(0.01);
  adagrad.mutable_optimizer()->set_lr_decay(0.001);
  adagrad.mutable_optimizer()->set_initial_accumulator_value(0.1);
  adagrad.mutable_optimizer()->set_eps(1e-10);
  adagrad.mutable_optimizer()->set_weight_decay(0.01);
  specs.emplace_back("zero2_adagrad", adagrad);

  tessel::v1::JobSpec hybrid = real;
  hybrid.set_strategy(tessel::v1::STRATEGY_HYBRID);
  specs.emplace_back("bad_hybrid", hybrid);
  tessel::v1::JobSpec f16 = real;
  f16.mutable_tensors(1)->set_dtype(tessel::v1::DTYPE_F16);
  specs.emplace_back("bad_f16", f16);
  tessel::v1::JobSpec no_units = fsdp;
  no_units.clear_unit_first_tensor();
  specs.emplace_back("bad_fsdp_no_units", no_units);
  tessel::v1::JobSpec dup = real;
  *dup.add_tensors() = real.tensors(0);
  specs.emplace_back("bad_duplicate_tensor", dup);

  for (const auto& [name, spec] : specs) {
    if (!WriteFile(dir + "/" + name + ".pb", spec.SerializeAsString())) return false;
  }
  return true;
}

std::string Bytes(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// Descriptors as the UCX transport sends them: a data-path frame header as
// the message header and a packed key of UCX 1.13's size for a posix region
// (its bytes are opaque here); then one defect each. Releases of each status.
bool UcxDescriptors(const std::string& dir) {
  namespace ucx = tessel::ucx_internal;
  tessel::FrameHeader push{tessel::FrameType::kPush, tessel::JobId("mlp"), 2, 17, 1, 0, 3};
  push.payload_bytes = 1 << 20;
  const tessel::HeaderBytes h = tessel::EncodeHeader(push);
  const std::vector<uint8_t> header(h.begin(), h.end());
  std::vector<uint8_t> rkey(41);
  for (size_t i = 0; i < rkey.size(); ++i) rkey[i] = static_cast<uint8_t>(i * 37 + 5);
  ucx::DescriptorFields f;
  f.lease = 12;
  f.region = 3;
  f.remote_base = 0x7f3a5c000000;
  f.region_bytes = 1 << 20;
  f.offset = 4096;
  f.bytes = push.payload_bytes;
  const std::vector<uint8_t> push_desc = ucx::EncodeDescriptor(f, header, rkey);
  ucx::DescriptorFields params = f;
  params.lease = 1;
  params.offset = 0;
  params.bytes = 4 * 4096 * 4;
  ucx::DescriptorFields empty_payload = f;
  empty_payload.bytes = 0;
  ucx::DescriptorFields wraps = f;
  wraps.offset = ~uint64_t{0} - 8;

  std::vector<uint8_t> bad_trailing = push_desc;
  bad_trailing.push_back(0);
  std::vector<uint8_t> bad_lengths = push_desc;
  bad_lengths[48] = 65;  // header_len one past the header
  std::vector<uint8_t> bad_status = ucx::EncodeRelease({12, ucx::ReleaseStatus::kDropped});
  bad_status[8] = 3;
  using Status = ucx::ReleaseStatus;
  return WriteFile(dir + "/push", Bytes(push_desc)) &&
         WriteFile(dir + "/params", Bytes(ucx::EncodeDescriptor(params, header, rkey))) &&
         WriteFile(dir + "/no_header", Bytes(ucx::EncodeDescriptor(f, {}, rkey))) &&
         WriteFile(dir + "/empty_payload",
                   Bytes(ucx::EncodeDescriptor(empty_payload, header, rkey))) &&
         WriteFile(dir + "/bad_truncated", Bytes(push_desc).substr(0, push_desc.size() - 1)) &&
         WriteFile(dir + "/bad_short", Bytes(push_desc).substr(0, 47)) &&
         WriteFile(dir + "/bad_trailing", Bytes(bad_trailing)) &&
         WriteFile(dir + "/bad_lengths", Bytes(bad_lengths)) &&
         WriteFile(dir + "/bad_no_rkey", Bytes(ucx::EncodeDescriptor(f, header, {}))) &&
         WriteFile(dir + "/bad_offset_wraps", Bytes(ucx::EncodeDescriptor(wraps, header, rkey))) &&
         WriteFile(dir + "/release_read", Bytes(ucx::EncodeRelease({12, Status::kReadInPlace}))) &&
         WriteFile(dir + "/release_resend", Bytes(ucx::EncodeRelease({12, Status::kResend}))) &&
         WriteFile(dir + "/release_dropped", Bytes(ucx::EncodeRelease({12, Status::kDropped}))) &&
         WriteFile(dir + "/bad_release_status", Bytes(bad_status));
}

bool Seeds(const std::string& dir, const std::map<std::string, std::string>& seeds) {
  for (const auto& [name, bytes] : seeds) {
    if (!WriteFile(dir + "/" + name, bytes)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_corpus CORPUS_DIR MANIFEST_JSON\n";
    return 2;
  }
  const std::string corpus = argv[1];
  const bool ok = Headers(corpus + "/wire_header") && Npy(corpus + "/npy") &&
                  Specs(corpus + "/job_spec", argv[2]) &&
                  UcxDescriptors(corpus + "/ucx_descriptor") &&
                  Seeds(corpus + "/data_plane", tessel::fuzz::DataPlaneSeeds()) &&
                  Seeds(corpus + "/worker_frames", tessel::fuzz::WorkerFramesSeeds()) &&
                  Seeds(corpus + "/peer_group", tessel::fuzz::PeerGroupSeeds()) &&
                  Seeds(corpus + "/ucx_receiver", tessel::fuzz::UcxReceiverSeeds());
  return ok ? 0 : 1;
}
