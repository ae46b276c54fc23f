// Fuzz target: tessel::ValidateJobSpec on a tessel.v1.JobSpec parsed from the
// fuzz bytes, as a shard server receives it in CreateJob (and a worker reads
// it back from the registry).
//
// Inputs are serialized JobSpecs, or (first byte kStructuredTag, never the
// first byte of a valid message) bytes that FuzzedSpec turns into a spec
// whose every field is plausible or, field by field, at an edge: byte-level
// mutation of a message rarely lands on dimensions whose product overflows or
// on sizes that are valid but enormous.
//
// Invariants:
//   - it never crashes, and refuses with InvalidArgument or Unimplemented;
//   - an accepted spec's layout covers num_params exactly: the sum of the
//     tensors' element counts (computed here in 128 bits), cut into
//     spec.num_shards contiguous ranges from 0, each cut into non-empty
//     buckets of at most bucket_elems elements that tile it;
//   - the accepted optimizer round-trips through OptimizerToProto.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/shard.pb.h"
#include "rpc/job_spec.h"

namespace {

constexpr uint8_t kStructuredTag = 0x01;

// `plausible` about half the time, else an edge value or any int64.
int64_t FuzzedInt(FuzzedDataProvider& fdp, int64_t plausible) {
  static constexpr int64_t kEdges[] = {0,
                                       1,
                                       -1,
                                       3,
                                       4,
                                       64,
                                       4096,
                                       4097,
                                       int64_t{1} << 20,
                                       int64_t{1} << 30,
                                       (int64_t{1} << 30) + 4,
                                       int64_t{1} << 31,
                                       int64_t{1} << 32,
                                       int64_t{1} << 40,
                                       (int64_t{1} << 40) + 1,
                                       int64_t{1} << 62,
                                       std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min()};
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 5:
    case 6:
      return kEdges[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kEdges) - 1)];
    case 7:
      return fdp.ConsumeIntegral<int64_t>();
    default:
      return plausible;
  }
}

double FuzzedDouble(FuzzedDataProvider& fdp, double plausible) {
  static constexpr double kEdges[] = {0.0,
                                      -0.0,
                                      1.0,
                                      -1.0,
                                      0.999999,
                                      1e-300,
                                      1e300,
                                      std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN(),
                                      3.5e38};
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 6:
      return kEdges[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kEdges) - 1)];
    case 7:
      return fdp.ConsumeFloatingPoint<double>();
    default:
      return plausible;
  }
}

tessel::v1::JobSpec FuzzedSpec(FuzzedDataProvider& fdp) {
  using tessel::v1::OptimizerConfig;
  tessel::v1::JobSpec spec;
  spec.set_job(fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? fdp.ConsumeRandomLengthString(140)
                                                          : "mlp");
  spec.set_strategy(static_cast<tessel::v1::Strategy>(
      FuzzedInt(fdp, 1 + fdp.ConsumeIntegralInRange<int>(0, 3)) & 7));
  spec.set_world_size(static_cast<int32_t>(FuzzedInt(fdp, 2)));
  spec.set_num_shards(static_cast<int32_t>(FuzzedInt(fdp, 2)));
  const int num_tensors = fdp.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < num_tensors; ++i) {
    tessel::v1::TensorSpec* t = spec.add_tensors();
    t->set_name(fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? fdp.ConsumeRandomLengthString(8)
                                                           : "t" + std::to_string(i));
    for (int d = fdp.ConsumeIntegralInRange<int>(0, 3); d > 0; --d) {
      t->add_shape(FuzzedInt(fdp, fdp.ConsumeIntegralInRange<int>(1, 64)));
    }
    t->set_dtype(fdp.ConsumeIntegralInRange<int>(0, 7) == 0
                     ? static_cast<tessel::v1::DType>(fdp.ConsumeIntegralInRange<int>(0, 3))
                     : tessel::v1::DTYPE_F32);
  }
  spec.set_bucket_bytes(FuzzedInt(fdp, 4 << fdp.ConsumeIntegralInRange<int>(0, 20)));
  spec.set_align_elems(FuzzedInt(fdp, fdp.ConsumeBool() ? 0 : 16));
  if (spec.strategy() == tessel::v1::STRATEGY_FSDP || fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {
    int first = 0;
    for (int u = fdp.ConsumeIntegralInRange<int>(0, 3); u > 0; --u) {
      spec.add_unit_first_tensor(static_cast<int32_t>(FuzzedInt(fdp, first)));
      first += fdp.ConsumeIntegralInRange<int>(1, 2);
    }
  }
  OptimizerConfig* o = spec.mutable_optimizer();
  o->set_kind(static_cast<OptimizerConfig::Kind>(fdp.ConsumeIntegralInRange<int>(0, 6)));
  o->set_lr(FuzzedDouble(fdp, 0.01));
  if (fdp.ConsumeBool()) o->set_weight_decay(FuzzedDouble(fdp, 0.01));
  switch (o->kind()) {
    case OptimizerConfig::SGD:
      o->set_momentum(FuzzedDouble(fdp, 0.9));
      o->set_dampening(FuzzedDouble(fdp, 0));
      o->set_nesterov(fdp.ConsumeBool());
      break;
    case OptimizerConfig::ADAM:
    case OptimizerConfig::ADAMW:
      o->set_beta1(FuzzedDouble(fdp, 0.9));
      o->set_beta2(FuzzedDouble(fdp, 0.999));
      o->set_eps(FuzzedDouble(fdp, 1e-8));
      break;
    case OptimizerConfig::RMSPROP:
      o->set_alpha(FuzzedDouble(fdp, 0.99));
      o->set_eps(FuzzedDouble(fdp, 1e-8));
      o->set_momentum(FuzzedDouble(fdp, 0));
      o->set_centered(fdp.ConsumeBool());
      break;
    default:
      o->set_lr_decay(FuzzedDouble(fdp, 0));
      o->set_initial_accumulator_value(FuzzedDouble(fdp, 0));
      o->set_eps(FuzzedDouble(fdp, 1e-10));
      break;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) o->set_alpha(FuzzedDouble(fdp, 0.99));
  return spec;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

bool SameOptimizer(const tessel::OptimizerParams& a, const tessel::OptimizerParams& b) {
  return a.kind == b.kind && SameBits(a.lr, b.lr) && SameBits(a.momentum, b.momentum) &&
         SameBits(a.dampening, b.dampening) && a.nesterov == b.nesterov &&
         SameBits(a.weight_decay, b.weight_decay) && SameBits(a.beta1, b.beta1) &&
         SameBits(a.beta2, b.beta2) && SameBits(a.eps, b.eps) && SameBits(a.alpha, b.alpha) &&
         a.centered == b.centered && SameBits(a.lr_decay, b.lr_decay) &&
         SameBits(a.initial_accumulator_value, b.initial_accumulator_value) &&
         SameBits(a.grad_scale, b.grad_scale);
}

}  // namespace

// Parse failures of random bytes are expected; protobuf's log of each is noise.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessel::v1::JobSpec spec;
  if (size > 0 && data[0] == kStructuredTag) {
    FuzzedDataProvider fdp(data + 1, size - 1);
    spec = FuzzedSpec(fdp);
    tessel::fuzz::ShowGeneratedInput(spec.DebugString());
  } else if (!spec.ParseFromArray(data, static_cast<int>(size))) {
    return 0;
  }
  absl::StatusOr<tessel::Layout> layout = tessel::ValidateJobSpec(spec);
  if (!layout.ok()) {
    tessel::fuzz::CheckRefusal(
        layout.status(), {absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented});
    return 0;
  }

  __int128 expected = 0;
  for (const tessel::v1::TensorSpec& t : spec.tensors()) {
    __int128 n = 1;
    for (int64_t d : t.shape()) {
      FUZZ_CHECK(d >= 0, absl::StrCat("accepted tensor '", t.name(), "' with dimension ", d));
      n *= d;
      if (n > (__int128{1} << 64)) n = __int128{1} << 64;  // far over any limit; no overflow
    }
    expected += n;
  }
  FUZZ_CHECK(expected == layout->num_params(),
             absl::StrCat("layout has ", layout->num_params(),
                          " params, but the tensors have more or fewer"));
  FUZZ_CHECK(
      layout->num_shards() == spec.num_shards(),
      absl::StrCat("layout has ", layout->num_shards(), " shards, the spec ", spec.num_shards()));
  int64_t pos = 0;
  for (int s = 0; s < layout->num_shards(); ++s) {
    const tessel::Range r = layout->shard_range(s);
    FUZZ_CHECK(r.begin == pos && r.end >= r.begin,
               absl::StrCat("shard ", s, " range [", r.begin, ", ", r.end, ") after ", pos));
    int64_t b_pos = r.begin;
    for (int b = 0; b < layout->num_buckets(s); ++b) {
      const tessel::Range br = layout->bucket_range(s, b);
      FUZZ_CHECK(br.begin == b_pos && br.end > br.begin && br.size() <= layout->bucket_elems(),
                 absl::StrCat("shard ", s, " bucket ", b, " is [", br.begin, ", ", br.end, ")"));
      b_pos = br.end;
    }
    FUZZ_CHECK(b_pos == r.end, absl::StrCat("shard ", s, " buckets end at ", b_pos));
    pos = r.end;
  }
  FUZZ_CHECK(pos == layout->num_params(),
             absl::StrCat("shard ranges end at ", pos, " of ", layout->num_params()));

  absl::StatusOr<tessel::OptimizerParams> opt = tessel::OptimizerFromProto(spec.optimizer());
  FUZZ_CHECK(opt.ok(), "accepted spec's optimizer is refused on its own");
  absl::StatusOr<tessel::OptimizerParams> back =
      tessel::OptimizerFromProto(tessel::OptimizerToProto(*opt));
  FUZZ_CHECK(back.ok() && SameOptimizer(*opt, *back),
             absl::StrCat("optimizer changed in a round trip: ", spec.optimizer().DebugString()));
  return 0;
}
