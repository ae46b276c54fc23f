// The options a Python caller gives, as the worker SDK's (binding.h): the
// optimizer's settings from a dict (an unknown key is a ValueError naming
// it), strategy and precision by name, the rest by keyword; whatever is not
// given keeps the SDK's defaults (worker/options.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/optimizer.h"
#include "python/binding.h"
#include "worker/worker.h"

namespace tessel {
namespace pybind {

OptimizerParams OptimizerFromDict(const py::dict& d) {
  OptimizerParams o;
  for (auto item : d) {
    const std::string key = py::str(item.first);
    py::handle v = item.second;
    if (key == "kind") {
      const std::string k = py::str(v);
      if (k == "sgd") {
        o.kind = OptimizerParams::Kind::kSgd;
      } else if (k == "adam") {
        o.kind = OptimizerParams::Kind::kAdam;
      } else if (k == "adamw") {
        o.kind = OptimizerParams::Kind::kAdamW;
      } else if (k == "rmsprop") {
        o.kind = OptimizerParams::Kind::kRmsprop;
      } else if (k == "adagrad") {
        o.kind = OptimizerParams::Kind::kAdagrad;
      } else {
        throw py::value_error(
            absl::StrCat("optimizer kind '", k, "': one of sgd, adam, adamw, rmsprop, adagrad"));
      }
    } else if (key == "lr") {
      o.lr = v.cast<float>();
    } else if (key == "momentum") {
      o.momentum = v.cast<float>();
    } else if (key == "dampening") {
      o.dampening = v.cast<float>();
    } else if (key == "nesterov") {
      o.nesterov = v.cast<bool>();
    } else if (key == "weight_decay") {
      o.weight_decay = v.cast<float>();
    } else if (key == "beta1") {
      o.beta1 = v.cast<float>();
    } else if (key == "beta2") {
      o.beta2 = v.cast<float>();
    } else if (key == "eps") {
      o.eps = v.cast<float>();
    } else if (key == "alpha") {
      o.alpha = v.cast<float>();
    } else if (key == "centered") {
      o.centered = v.cast<bool>();
    } else if (key == "lr_decay") {
      o.lr_decay = v.cast<float>();
    } else if (key == "initial_accumulator_value") {
      o.initial_accumulator_value = v.cast<float>();
    } else if (key == "grad_scale") {
      o.grad_scale = v.cast<float>();
    } else {
      throw py::value_error(absl::StrCat("unknown optimizer setting '", key, "'"));
    }
  }
  return o;
}

WorkerOptions MakeOptions(const std::string& registry, const std::string& job, int rank,
                          int world_size, const std::string& strategy, const py::dict& optimizer,
                          int num_servers, int64_t bucket_bytes, const std::string& precision,
                          const std::vector<int>& units, const std::string& ucx_tls,
                          double connect_timeout_s, double step_timeout_s, bool recovery,
                          bool auto_resume, int64_t checkpoint_every_steps, bool checkpoint_initial,
                          const std::string& token, double topk_ratio) {
  WorkerOptions o;
  o.registry = registry;
  o.job = job;
  o.rank = rank;
  o.world_size = world_size;
  auto s = StrategyFromName(strategy);
  if (!s.ok()) throw py::value_error(std::string(s.status().message()));
  o.strategy = *s;
  o.optimizer = OptimizerFromDict(optimizer);
  o.num_servers = num_servers;
  o.bucket_bytes = bucket_bytes;
  auto p = PrecisionFromName(precision);
  if (!p.ok()) throw py::value_error(std::string(p.status().message()));
  o.precision = *p;
  o.fsdp_units = units;
  o.ucx.tls = ucx_tls;
  o.connect_timeout = absl::Seconds(connect_timeout_s);
  o.step_timeout = absl::Seconds(step_timeout_s);
  o.recovery = recovery;
  o.auto_resume = auto_resume;
  o.checkpoint.every_steps = checkpoint_every_steps;
  o.checkpoint.initial = checkpoint_initial;
  o.token = token;
  o.topk_ratio = topk_ratio;
  return o;
}

}  // namespace pybind
}  // namespace tessel
