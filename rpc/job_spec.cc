#include "rpc/job_spec.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {

// Only the fields a kind uses travel and are read back: an unset proto field
// is 0, which is not every field's default (e.g. RMSprop's alpha).
absl::StatusOr<OptimizerParams> OptimizerFromProto(const v1::OptimizerConfig& c) {
  OptimizerParams p;
  p.lr = static_cast<float>(c.lr());
  p.weight_decay = static_cast<float>(c.weight_decay());
  p.eps = static_cast<float>(c.eps());
  switch (c.kind()) {
    case v1::OptimizerConfig::SGD:
      p.kind = OptimizerParams::Kind::kSgd;
      p.momentum = static_cast<float>(c.momentum());
      p.dampening = static_cast<float>(c.dampening());
      p.nesterov = c.nesterov();
      p.eps = OptimizerParams().eps;
      break;
    case v1::OptimizerConfig::ADAM:
    case v1::OptimizerConfig::ADAMW:
      p.kind = c.kind() == v1::OptimizerConfig::ADAM ? OptimizerParams::Kind::kAdam
                                                     : OptimizerParams::Kind::kAdamW;
      p.beta1 = static_cast<float>(c.beta1());
      p.beta2 = static_cast<float>(c.beta2());
      break;
    case v1::OptimizerConfig::RMSPROP:
      p.kind = OptimizerParams::Kind::kRmsprop;
      p.momentum = static_cast<float>(c.momentum());
      p.alpha = static_cast<float>(c.alpha());
      p.centered = c.centered();
      break;
    case v1::OptimizerConfig::ADAGRAD:
      p.kind = OptimizerParams::Kind::kAdagrad;
      p.lr_decay = static_cast<float>(c.lr_decay());
      p.initial_accumulator_value = static_cast<float>(c.initial_accumulator_value());
      break;
    default:
      return absl::InvalidArgumentError(
          "optimizer kind must be SGD, ADAM, ADAMW, RMSPROP or ADAGRAD");
  }
  p.grad_scale = c.grad_scale() == 0 ? 1.0f : static_cast<float>(c.grad_scale());
  TESSEL_RETURN_IF_ERROR(ValidateOptimizerParams(p));
  return p;
}

v1::OptimizerConfig OptimizerToProto(const OptimizerParams& p) {
  v1::OptimizerConfig c;
  c.set_lr(p.lr);
  c.set_weight_decay(p.weight_decay);
  if (p.grad_scale != 1.0f) c.set_grad_scale(p.grad_scale);
  switch (p.kind) {
    case OptimizerParams::Kind::kSgd:
      c.set_kind(v1::OptimizerConfig::SGD);
      c.set_momentum(p.momentum);
      c.set_dampening(p.dampening);
      c.set_nesterov(p.nesterov);
      break;
    case OptimizerParams::Kind::kAdam:
    case OptimizerParams::Kind::kAdamW:
      c.set_kind(p.kind == OptimizerParams::Kind::kAdam ? v1::OptimizerConfig::ADAM
                                                        : v1::OptimizerConfig::ADAMW);
      c.set_beta1(p.beta1);
      c.set_beta2(p.beta2);
      c.set_eps(p.eps);
      break;
    case OptimizerParams::Kind::kRmsprop:
      c.set_kind(v1::OptimizerConfig::RMSPROP);
      c.set_momentum(p.momentum);
      c.set_alpha(p.alpha);
      c.set_centered(p.centered);
      c.set_eps(p.eps);
      break;
    case OptimizerParams::Kind::kAdagrad:
      c.set_kind(v1::OptimizerConfig::ADAGRAD);
      c.set_lr_decay(p.lr_decay);
      c.set_initial_accumulator_value(p.initial_accumulator_value);
      c.set_eps(p.eps);
      break;
  }
  return c;
}

absl::StatusOr<Layout> ValidateJobSpec(const v1::JobSpec& spec) {
  TESSEL_RETURN_IF_ERROR(ValidateJobName(spec.job()));
  if (spec.world_size() < 1 || spec.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("job '", spec.job(),
                                                   "': world_size must be in [1, ", kMaxWorldSize,
                                                   "], got ", spec.world_size()));
  }
  switch (spec.strategy()) {
    case v1::STRATEGY_DDP:
    case v1::STRATEGY_ZERO1:
    case v1::STRATEGY_ZERO2:
    case v1::STRATEGY_FSDP:
      break;
    case v1::STRATEGY_HYBRID:
      return absl::UnimplementedError(
          absl::StrCat("job '", spec.job(), "': strategy ", StrategyName(spec.strategy()),
                       " is not available in this build; use ddp, zero1, zero2 or fsdp"));
    default:
      return absl::InvalidArgumentError(absl::StrCat("job '", spec.job(), "': strategy is unset"));
  }
  std::vector<TensorDesc> tensors;
  for (const v1::TensorSpec& t : spec.tensors()) {
    if (t.dtype() != spec.tensors(0).dtype() ||
        (t.dtype() != v1::DTYPE_F32 && t.dtype() != v1::DTYPE_F16 && t.dtype() != v1::DTYPE_BF16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job '", spec.job(), "': tensor '", t.name(), "' has dtype ", v1::DType_Name(t.dtype()),
          "; every tensor of a job must be DTYPE_F32, or all DTYPE_F16, or all DTYPE_BF16"));
    }
    tensors.push_back({t.name(), {t.shape().begin(), t.shape().end()}});
  }
  if (spec.bucket_bytes() < 4 || spec.bucket_bytes() % 4 != 0 ||
      spec.bucket_bytes() > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", spec.job(), "': bucket_bytes must be a multiple of 4 in [4, 1 GiB], got ",
        spec.bucket_bytes()));
  }
  if (spec.align_elems() < 0 || spec.align_elems() > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", spec.job(), "': align_elems must be in [0, 1048576], got ", spec.align_elems()));
  }
  const int64_t align = spec.align_elems() == 0 ? 1 : spec.align_elems();
  int64_t bucket_elems = spec.bucket_bytes() / 4;
  bucket_elems -= bucket_elems % align;
  if (bucket_elems == 0) bucket_elems = align;
  auto optimizer = OptimizerFromProto(spec.optimizer());
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.job(), "': ", optimizer.status().message()));
  }
  // Sizes are checked (overflow included) by Layout::Create; unit cut points
  // come from its tensor offsets, so nothing is multiplied unchecked here.
  auto plain = Layout::Create(tensors, spec.num_shards(), align, bucket_elems);
  if (!plain.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.job(), "': ", plain.status().message()));
  }
  std::vector<int64_t> cuts;
  {
    int previous = -1;
    for (int u : spec.unit_first_tensor()) {
      if (u <= previous || u < 0 || u >= static_cast<int>(tensors.size()) ||
          (previous < 0 && u != 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job '", spec.job(), "': unit_first_tensor must rise from 0 and stay below ",
            tensors.size(), " tensors"));
      }
      previous = u;
      cuts.push_back(plain->tensors()[u].offset);
    }
    if (spec.strategy() == v1::STRATEGY_FSDP && spec.unit_first_tensor_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", spec.job(), "': fsdp needs units (WorkerOptions.fsdp_units)"));
    }
  }
  const double topk = spec.compression().topk_ratio();
  if (!(topk >= 0 && topk <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.job(), "': compression.topk_ratio ", topk,
                     " must be in [0, 1] (0 = off; 0.01 pushes the largest 1% of each bucket)"));
  }
  if (topk > 0) {
    if (spec.strategy() != v1::STRATEGY_DDP && spec.strategy() != v1::STRATEGY_ZERO1 &&
        spec.strategy() != v1::STRATEGY_ZERO2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job '", spec.job(), "': top-k compression is for ddp, zero1 and zero2, not ",
          StrategyName(spec.strategy())));
    }
    if ((!spec.tensors().empty() && spec.tensors(0).dtype() != v1::DTYPE_F32) ||
        spec.unit_first_tensor_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", spec.job(),
                       "': top-k compression needs fp32 gradients in one full buffer (no mixed "
                       "precision, no units)"));
    }
  }
  if (spec.rank_groups_size() > 0) {
    if (spec.rank_groups_size() != spec.world_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job '", spec.job(), "': rank_groups has ", spec.rank_groups_size(),
          " entries; it needs one per rank (world_size ", spec.world_size(), ") or none"));
    }
    int next = 0;  // groups are numbered in the order of their lowest rank
    for (int r = 0; r < spec.world_size(); ++r) {
      const int g = spec.rank_groups(r);
      if (g < 0 || g > next) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job '", spec.job(), "': rank_groups[", r, "] = ", g,
            ": groups must be numbered 0, 1, ... in the order of their lowest rank (expected 0 to ",
            next, ")"));
      }
      if (g == next) ++next;
    }
    if (topk > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", spec.job(),
                       "': top-k compression does not combine with rank_groups (a "
                       "group's partial sum of sparse pushes is not sparse)"));
    }
  }
  auto layout = Layout::Create(tensors, spec.num_shards(), align, bucket_elems, cuts);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.job(), "': ", layout.status().message()));
  }
  return layout;
}

std::vector<int> RankGroups(const v1::JobSpec& spec) {
  if (spec.rank_groups_size() > 0) {
    return std::vector<int>(spec.rank_groups().begin(), spec.rank_groups().end());
  }
  std::vector<int> g(static_cast<size_t>(std::max(0, spec.world_size())));
  for (size_t r = 0; r < g.size(); ++r) g[r] = static_cast<int>(r);
  return g;
}

int NumRankGroups(const v1::JobSpec& spec) {
  const std::vector<int> g = RankGroups(spec);
  return g.empty() ? 0 : *std::max_element(g.begin(), g.end()) + 1;
}

std::string DiffJobSpecs(const v1::JobSpec& a, const v1::JobSpec& b) {
  std::string diff;
  google::protobuf::util::MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  if (d.Compare(a, b)) return "";
  return diff;
}

std::string DiffRestorableSpecs(const v1::JobSpec& saved, const v1::JobSpec& spec) {
  v1::JobSpec a = saved, b = spec;
  for (v1::JobSpec* x : {&a, &b}) {
    x->clear_num_shards();
    x->clear_world_size();
    x->clear_bucket_bytes();
    x->clear_align_elems();
    x->clear_checkpoint();
    x->clear_compression();  // the push's wire form, not the model
    x->clear_rank_groups();  // who sums with whom first: the hosts of this run
  }
  return DiffJobSpecs(a, b);
}

absl::StatusOr<std::string> JobSpecToJson(const v1::JobSpec& spec) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  std::string json;
  auto s = google::protobuf::util::MessageToJsonString(spec, &json, opts);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.job(), "': its spec cannot be written as JSON: ", s.ToString()));
  }
  return json;
}

absl::StatusOr<v1::JobSpec> JobSpecFromJson(const std::string& json) {
  v1::JobSpec spec;
  auto s = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unreadable job spec: ", s.ToString()));
  }
  return spec;
}

absl::StatusOr<v1::Strategy> ParseStrategy(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "ddp") return v1::STRATEGY_DDP;
  if (n == "zero1") return v1::STRATEGY_ZERO1;
  if (n == "zero2") return v1::STRATEGY_ZERO2;
  if (n == "fsdp" || n == "zero3") return v1::STRATEGY_FSDP;
  if (n == "hybrid") return v1::STRATEGY_HYBRID;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown strategy '", name, "'; expected ddp, zero1, zero2, fsdp or hybrid"));
}

std::optional<HalfType> JobHalfType(const v1::JobSpec& spec) {
  if (spec.tensors().empty()) return std::nullopt;
  switch (spec.tensors(0).dtype()) {
    case v1::DTYPE_F16:
      return HalfType::kF16;
    case v1::DTYPE_BF16:
      return HalfType::kBF16;
    default:
      return std::nullopt;
  }
}

std::string StrategyName(v1::Strategy s) {
  switch (s) {
    case v1::STRATEGY_DDP:
      return "ddp";
    case v1::STRATEGY_ZERO1:
      return "zero1";
    case v1::STRATEGY_ZERO2:
      return "zero2";
    case v1::STRATEGY_FSDP:
      return "fsdp";
    case v1::STRATEGY_HYBRID:
      return "hybrid";
    default:
      return "unspecified";
  }
}

}  // namespace tessel
