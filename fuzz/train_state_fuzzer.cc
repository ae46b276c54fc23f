// Fuzz target: tessel::DecodeTrainState, the decoder of Worker::Deserialize's
// blob (which a user may load from anywhere).
//
// Inputs are raw blobs, or (first byte kStructuredTag, never the first byte
// of a valid blob, which starts with "TESSELTS") bytes from which a valid
// TrainState is built, encoded, and then optionally damaged at one place:
// byte-level mutation alone rarely gets past the checksum, so structured
// inputs reach the header and size checks behind it.
//
// Invariants:
//   - it never crashes; a refusal is DataLoss;
//   - an accepted blob re-encodes to a blob that decodes to the same state
//     (spec, step, params and state bit for bit);
//   - an accepted state is self-consistent: params.size() is the spec's
//     parameter count and every state slot has that size;
//   - an undamaged structured blob is accepted and round-trips exactly.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/message_differencer.h"
#include "rpc/job_spec.h"
#include "worker/train_state.h"

namespace {

constexpr uint8_t kStructuredTag = 0x01;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void CheckAccepted(const tessel::TrainState& s) {
  auto layout = tessel::ValidateJobSpec(s.spec);
  FUZZ_CHECK(layout.ok(), "accepted a state whose spec does not validate");
  FUZZ_CHECK(static_cast<int64_t>(s.params.size()) == layout->num_params(),
             absl::StrCat("params ", s.params.size(), " vs layout ", layout->num_params()));
  for (const auto& slot : s.state) FUZZ_CHECK(slot.size() == s.params.size(), "slot size");
  absl::StatusOr<std::string> encoded = tessel::EncodeTrainState(s);
  FUZZ_CHECK(encoded.ok(),
             absl::StrCat("accepted state does not encode: ", encoded.status().ToString()));
  const std::string& again = *encoded;
  auto back = tessel::DecodeTrainState(again);
  FUZZ_CHECK(back.ok(), absl::StrCat("re-encoded state refused: ", back.status().ToString()));
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(back->spec, s.spec), "spec");
  FUZZ_CHECK(back->step == s.step, "step");
  FUZZ_CHECK(SameBits(back->params, s.params), "params");
  FUZZ_CHECK(back->state.size() == s.state.size(), "slots");
  for (size_t k = 0; k < s.state.size(); ++k)
    FUZZ_CHECK(SameBits(back->state[k], s.state[k]), "state");
}

std::string Structured(FuzzedDataProvider& fdp, bool* damaged) {
  tessel::TrainState s;
  s.spec.set_job("fuzz");
  s.spec.set_strategy(static_cast<tessel::v1::Strategy>(fdp.ConsumeIntegralInRange<int>(1, 4)));
  s.spec.set_world_size(fdp.ConsumeIntegralInRange<int>(1, 8));
  s.spec.set_num_shards(fdp.ConsumeIntegralInRange<int>(1, 4));
  s.spec.set_bucket_bytes(4 * fdp.ConsumeIntegralInRange<int>(1, 1024));
  int64_t n = 0;
  for (int t = fdp.ConsumeIntegralInRange<int>(1, 3); t > 0; --t) {
    auto* ts = s.spec.add_tensors();
    ts->set_name(absl::StrCat("t", t));
    const int64_t d = fdp.ConsumeIntegralInRange<int64_t>(1, 64);
    ts->add_shape(d);
    ts->set_dtype(tessel::v1::DTYPE_F32);
    n += d;
  }
  if (s.spec.strategy() == tessel::v1::STRATEGY_FSDP) s.spec.add_unit_first_tensor(0);
  tessel::OptimizerParams opt;
  opt.kind = static_cast<tessel::OptimizerParams::Kind>(fdp.ConsumeIntegralInRange<int>(0, 4));
  opt.momentum = fdp.ConsumeBool() ? 0.9f : 0.f;
  opt.centered = fdp.ConsumeBool();
  *s.spec.mutable_optimizer() = tessel::OptimizerToProto(opt);
  s.step = fdp.ConsumeIntegralInRange<int64_t>(0, 1 << 20);
  for (int64_t i = 0; i < n; ++i) s.params.push_back(fdp.ConsumeFloatingPoint<float>());
  s.state.assign(static_cast<size_t>(tessel::StateSlots(opt)), std::vector<float>(n, 0.5f));
  absl::StatusOr<std::string> encoded = tessel::EncodeTrainState(s);
  FUZZ_CHECK(encoded.ok(),
             absl::StrCat("a built state does not encode: ", encoded.status().ToString()));
  std::string blob = *encoded;
  *damaged = false;
  if (fdp.ConsumeBool() && !blob.empty()) {
    *damaged = true;
    switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {
      case 0:
        blob.resize(fdp.ConsumeIntegralInRange<size_t>(0, blob.size() - 1));
        break;
      case 1:
        blob[fdp.ConsumeIntegralInRange<size_t>(0, blob.size() - 1)] ^=
            static_cast<char>(fdp.ConsumeIntegralInRange<int>(1, 255));
        break;
      default:
        blob.insert(fdp.ConsumeIntegralInRange<size_t>(0, blob.size()),
                    fdp.ConsumeRandomLengthString(16) + "x");
    }
  } else {
    auto back = tessel::DecodeTrainState(blob);
    FUZZ_CHECK(back.ok(), absl::StrCat("a valid state was refused: ", back.status().ToString()));
    FUZZ_CHECK(SameBits(back->params, s.params) && back->step == s.step, "round trip");
  }
  return blob;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string blob;
  bool damaged = true;
  if (size > 0 && data[0] == kStructuredTag) {
    FuzzedDataProvider fdp(data + 1, size - 1);
    blob = Structured(fdp, &damaged);
  } else {
    blob.assign(reinterpret_cast<const char*>(data), size);
  }
  auto state = tessel::DecodeTrainState(blob);
  if (!state.ok()) {
    FUZZ_CHECK(state.status().code() == absl::StatusCode::kDataLoss,
               absl::StrCat("refusal is not DataLoss: ", state.status().ToString()));
    FUZZ_CHECK(damaged, "an undamaged structured blob was refused");
    return 0;
  }
  CheckAccepted(*state);
  return 0;
}
