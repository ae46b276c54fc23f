// tessel._tessel: the worker SDK (worker/worker.h) for Python, with pybind11.
//
// A thin layer: every method calls the C++ Worker and turns a non-OK status
// into a Python exception (ValueError for bad input, tessel.RecoverableError
// for a step Recover() can repair, tessel.TesselError otherwise). params(),
// grads() and unit views are NumPy arrays over the worker's own buffers (no
// copy); they keep the Worker alive. Blocking calls (connect, steps,
// gathers, recovery) release the GIL. group_job_name is core/job_name.h's
// GroupJobName, the one grammar of derived job names. python/tessel/torch/
// builds the PyTorch binding on top.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/job_name.h"
#include "core/optimizer.h"
#include "python/binding.h"
#include "worker/train_state.h"
#include "worker/worker.h"

namespace py = pybind11;

namespace tessel {
namespace {

using pybind::Check;
using pybind::PyWorker;
using pybind::Take;
using pybind::Unlocked;
using pybind::View;

// Half bit patterns (bf16, fp16) as an int16 view: torch has no uint16, and
// tensor.view(torch.bfloat16) reinterprets int16 bits as they are.
template <typename T>
py::array HalfView(absl::Span<T> span, py::handle owner) {
  using I = std::conditional_t<std::is_const_v<T>, const int16_t, int16_t>;
  return View(absl::Span<I>(reinterpret_cast<I*>(span.data()), span.size()), owner,
              /*writeable=*/true);
}

// A NumPy array of its own holding `v`.
py::array_t<float> Copy(absl::Span<const float> v) {
  py::array_t<float> out(static_cast<py::ssize_t>(v.size()));
  std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(float));
  return out;
}

void CheckUnit(Worker& w, int unit) {
  if (unit < 0 || unit >= w.num_units()) {
    throw py::value_error(absl::StrCat("unit ", unit, " is outside [0, ", w.num_units(), ")"));
  }
}

}  // namespace
}  // namespace tessel

PYBIND11_MODULE(_tessel, m) {
  using tessel::CheckUnit;
  using tessel::Copy;
  using tessel::HalfView;
  using tessel::StepPhases;
  using tessel::StragglerReport;
  using tessel::Worker;
  using tessel::WorkerMemory;
  using tessel::pybind::Check;
  using tessel::pybind::PyWorker;
  using tessel::pybind::Take;
  using tessel::pybind::Unlocked;
  using tessel::pybind::View;
  m.doc() = "Tessel's worker SDK (C++), for Python. Use tessel.torch for PyTorch.";
  static py::exception<std::runtime_error> tessel_error(m, "TesselError", PyExc_RuntimeError);
  static py::exception<std::runtime_error> recoverable(m, "RecoverableError", tessel_error.ptr());
  tessel::pybind::g_tessel_error = tessel_error.ptr();
  tessel::pybind::g_recoverable_error = recoverable.ptr();
  tessel::pybind::BindMesh(m);

  m.def(
      "group_job_name",
      [](const std::string& job, int group) {
        if (group < 0) throw py::value_error("group_job_name: group must be >= 0");
        return tessel::GroupJobName(job, group);
      },
      py::arg("job"), py::arg("group"),
      "The job of parameter group `group` of job `job` (core/job_name.h): `job` itself for "
      "group 0, else job.g<group>.");

  m.def(
      "buffers_job_name", [](const std::string& job) { return tessel::BuffersJobName(job); },
      py::arg("job"),
      "The job holding the buffers of job `job`'s model (core/job_name.h): job.buffers.");

  m.def(
      "train_state_at",
      [](const py::bytes& blob, int64_t step,
         py::array_t<float, py::array::c_style | py::array::forcecast> params) {
        std::string b = blob;
        absl::StatusOr<tessel::TrainState> s = tessel::DecodeTrainState(b);
        if (!s.ok()) throw py::value_error(std::string(s.status().message()));
        if (step < 0) throw py::value_error("train_state_at: step must be >= 0");
        if (static_cast<size_t>(params.size()) != s->params.size()) {
          throw py::value_error(absl::StrCat("train_state_at: ", params.size(),
                                             " parameters for a state of ", s->params.size()));
        }
        s->step = step;
        s->params.assign(params.data(), params.data() + params.size());
        absl::StatusOr<std::string> out = tessel::EncodeTrainState(*s);
        if (!out.ok()) throw py::value_error(std::string(out.status().message()));
        return py::bytes(*out);
      },
      py::arg("blob"), py::arg("step"), py::arg("params"),
      "A serialize() blob with its step and parameters replaced (optimizer state kept): "
      "what deserialize() then loads.");

  py::class_<PyWorker>(m, "Worker")
      .def(
          py::init(
              [](const std::string& registry, const std::string& job, int rank, int world_size,
                 const std::string& strategy, const py::dict& optimizer, int num_servers,
                 int64_t bucket_bytes, const std::string& precision, const std::vector<int>& units,
                 const std::string& ucx_tls, double connect_timeout_s, double step_timeout_s,
                 bool recovery, bool auto_resume, int64_t checkpoint_every_steps,
                 bool checkpoint_initial, const std::string& token, double topk_ratio,
                 const std::string& metrics_address, const std::string& timeline,
                 int64_t timeline_first_step, int64_t timeline_steps,
                 const std::string& aggregation, const std::string& host_id, bool rejoin_in_place) {
                tessel::WorkerOptions o = tessel::pybind::MakeOptions(
                    registry, job, rank, world_size, strategy, optimizer, num_servers, bucket_bytes,
                    precision, units, ucx_tls, connect_timeout_s, step_timeout_s, recovery,
                    auto_resume, checkpoint_every_steps, checkpoint_initial, token, topk_ratio);
                o.metrics_address = metrics_address;
                o.timeline = timeline;
                o.timeline_window = {.first_step = timeline_first_step, .steps = timeline_steps};
                auto a = tessel::AggregationFromName(aggregation);
                if (!a.ok()) throw py::value_error(std::string(a.status().message()));
                o.aggregation = *a;
                o.host_id = host_id;
                o.rejoin_in_place = rejoin_in_place;
                auto* pw = new PyWorker;
                pw->w = Take(Unlocked([&] { return Worker::Connect(o); }));
                return pw;
              }),
          py::arg("registry"), py::arg("job"), py::arg("rank"), py::arg("world_size"),
          py::arg("strategy") = "zero2", py::arg("optimizer") = py::dict(),
          py::arg("num_servers") = 0, py::arg("bucket_bytes") = int64_t{4} << 20,
          py::arg("precision") = "fp32", py::arg("units") = std::vector<int>(),
          py::arg("ucx_tls") = "", py::arg("connect_timeout_s") = 60.0,
          py::arg("step_timeout_s") = 120.0, py::arg("recovery") = false,
          py::arg("auto_resume") = false, py::arg("checkpoint_every_steps") = 0,
          py::arg("checkpoint_initial") = false, py::arg("token") = "", py::arg("topk_ratio") = 0.0,
          py::arg("metrics_address") = "", py::arg("timeline") = "",
          py::arg("timeline_first_step") = tessel::TimelineOptions{}.first_step,
          py::arg("timeline_steps") = tessel::TimelineOptions{}.steps,
          py::arg("aggregation") = "auto", py::arg("host_id") = "",
          py::arg("rejoin_in_place") = true,
          "Joins the job (registry host:port, job name, rank of world_size) and waits for the "
          "world and the shard servers. metrics_address (HOST:PORT, port 0: a free one): serve "
          "this worker's Prometheus metrics there; timeline (a path, '{rank}' replaced): write "
          "a Chrome trace of steps timeline_first_step .. + timeline_steps - 1. aggregation: "
          "'auto', 'flat' or 'host' (docs/hierarchical.md); host_id: this worker's host for it "
          "('' = detected). rejoin_in_place (with recovery, zero1/zero2): a lost worker costs "
          "no rollback, its replacement rejoins the step in flight (WorkerOptions).")
      .def(
          "aggregation", [](PyWorker& self) { return self.w->aggregation(); },
          "How this worker's host sends gradients: 'host aggregation: ...' or 'flat (why)'")
      .def(
          "data_path", [](PyWorker& self) { return self.w->data_path(); },
          "How payloads move to and from the shard servers: 'in place' (shared memory on one "
          "host) or 'copied' (per shard when they differ)")
      .def(
          "register_layout",
          [](PyWorker& self, const std::vector<std::string>& names,
             const std::vector<std::vector<int64_t>>& shapes,
             std::optional<py::array_t<float, py::array::c_style | py::array::forcecast>> init) {
            if (names.size() != shapes.size()) {
              throw py::value_error(
                  absl::StrCat(names.size(), " tensor names but ", shapes.size(), " shapes"));
            }
            std::vector<tessel::TensorDesc> tensors;
            for (size_t i = 0; i < names.size(); ++i) tensors.push_back({names[i], shapes[i]});
            absl::Span<const float> span;
            if (init.has_value()) span = absl::MakeConstSpan(init->data(), init->size());
            Check(Unlocked([&] { return self.get().RegisterLayout(tensors, span); }));
          },
          py::arg("names"), py::arg("shapes"), py::arg("init") = py::none(),
          "Declares the model's tensors (in order) and creates the job on the shard servers; "
          "`init` (float32, num_params) is rank 0's initial parameters.")
      .def(
          "params",
          [](py::object self) {
            return View(self.cast<PyWorker&>().get().params(), self, /*writeable=*/true);
          },
          "The parameters (a float32 NumPy view of the worker's buffer).")
      .def(
          "grads",
          [](py::object self) {
            return View(self.cast<PyWorker&>().get().grads(), self, /*writeable=*/true);
          },
          "The gradient buffer Step() pushes (a float32 NumPy view).")
      .def(
          "half_params",
          [](py::object self) {
            return HalfView(self.cast<PyWorker&>().get().half_params(), self);
          },
          "Mixed precision: the parameters as half bit patterns (an int16 NumPy view).")
      .def(
          "half_grads",
          [](py::object self) { return HalfView(self.cast<PyWorker&>().get().half_grads(), self); },
          "Mixed precision: the gradient buffer as half bit patterns (an int16 NumPy view).")
      .def(
          "gather_half",
          [](py::object self, int unit) {
            Worker& w = self.cast<PyWorker&>().get();
            CheckUnit(w, unit);
            return HalfView(Take(Unlocked([&] { return w.GatherHalf(unit); })), self);
          },
          py::arg("unit"), "Mixed precision fsdp: gather(unit) as half bit patterns (int16).")
      .def(
          "unit_half_grads",
          [](py::object self, int unit) {
            Worker& w = self.cast<PyWorker&>().get();
            CheckUnit(w, unit);
            return HalfView(w.UnitHalfGrads(unit), self);
          },
          py::arg("unit"), "Mixed precision fsdp: unit_grads(unit) as half bit patterns (int16).")
      .def(
          "gradients_ready",
          [](PyWorker& self, int64_t begin, int64_t end) {
            Check(Unlocked([&] { return self.get().GradientsReady(begin, end); }));
          },
          py::arg("begin"), py::arg("end"),
          "Gradients of flat elements [begin, end) are final: complete buckets are pushed now.")
      .def(
          "step", [](PyWorker& self) { Check(Unlocked([&] { return self.get().Step(); })); },
          "Pushes the gradients, waits for the updated parameters (one synchronous step).")
      .def(
          "recover", [](PyWorker& self) { Check(Unlocked([&] { return self.get().Recover(); })); },
          "After a RecoverableError: rolls back to the latest complete checkpoint.")
      .def(
          "recover_to",
          [](PyWorker& self, int64_t step) {
            Check(Unlocked([&] { return self.get().RecoverTo(step); }));
          },
          py::arg("step"), "Rolls back to the complete checkpoint of `step`.")
      // --- fsdp: parameters and gradients unit by unit ------------------
      .def_property_readonly("num_units", [](PyWorker& self) { return self.get().num_units(); })
      .def(
          "unit_range",
          [](PyWorker& self, int unit) {
            CheckUnit(self.get(), unit);
            const tessel::Range r = self.get().unit_range(unit);
            return std::make_pair(r.begin, r.end);
          },
          py::arg("unit"), "The unit's flat element range [begin, end).")
      .def(
          "prefetch",
          [](PyWorker& self, int unit) {
            CheckUnit(self.get(), unit);
            Check(self.get().Prefetch(unit));
          },
          py::arg("unit"), "Starts gathering the unit's parameters in the background.")
      .def(
          "gather",
          [](py::object self, int unit) {
            Worker& w = self.cast<PyWorker&>().get();
            CheckUnit(w, unit);
            return View(Take(Unlocked([&] { return w.Gather(unit); })), self,
                        /*writeable=*/true);
          },
          py::arg("unit"),
          "Waits for the unit's parameters of this step: a view valid until release(unit).")
      .def(
          "release",
          [](PyWorker& self, int unit) {
            CheckUnit(self.get(), unit);
            self.get().Release(unit);
          },
          py::arg("unit"), "Frees the unit's parameters (drop every view of them first).")
      .def(
          "unit_grads",
          [](py::object self, int unit) {
            Worker& w = self.cast<PyWorker&>().get();
            CheckUnit(w, unit);
            return View(w.UnitGrads(unit), self, /*writeable=*/true);
          },
          py::arg("unit"), "A zeroed buffer for the unit's gradients, valid until push_unit.")
      .def(
          "push_unit",
          [](PyWorker& self, int unit) {
            CheckUnit(self.get(), unit);
            Check(Unlocked([&] { return self.get().PushUnit(unit); }));
          },
          py::arg("unit"), "Pushes the unit's gradients (drop every view of them first).")
      .def(
          "push_unit_part",
          [](PyWorker& self, int unit) {
            CheckUnit(self.get(), unit);
            Check(Unlocked([&] { return self.get().PushUnitPart(unit); }));
          },
          py::arg("unit"),
          "fsdp, fp32: pushes the unit's gradients of one micro-batch, summed on the servers "
          "into this step's push_unit (drop every view of them first).")
      .def(
          "finish_step",
          [](PyWorker& self) { Check(Unlocked([&] { return self.get().FinishStep(); })); },
          "fsdp: waits until every shard applied this step.")
      .def(
          "hold_updates", [](PyWorker& self, bool hold) { Check(self.get().HoldUpdates(hold)); },
          py::arg("hold"),
          "Pushes of the coming steps ask the servers to hold each step's update until "
          "release_step (clipping by the job-wide norm; zero1, zero2, fsdp).")
      .def_property_readonly("holding_updates",
                             [](PyWorker& self) { return self.get().holding_updates(); })
      .def(
          "held_gradient_norm",
          [](PyWorker& self) {
            const tessel::GradNormStats s =
                Take(Unlocked([&] { return self.get().HeldGradientNorm(); }));
            return py::make_tuple(s.sum_sq, s.sum_abs, s.max_abs);
          },
          "A held step: pushes what is left and returns its mean gradient's (sum of squares, sum "
          "of magnitudes, largest magnitude) over the job's shards.")
      .def(
          "pull_mean",
          [](PyWorker& self) { Check(Unlocked([&] { return self.get().PullMean(); })); },
          "ddp: pushes what is left and receives the step's mean gradient (grads) without "
          "applying it; step() applies it.")
      .def(
          "release_step",
          [](PyWorker& self, float multiplier) {
            Check(Unlocked([&] { return self.get().ReleaseStep(multiplier); }));
          },
          py::arg("multiplier"),
          "Lets the servers apply the held step with its gradient times `multiplier` (0: the "
          "step's own settings).")
      .def(
          "gather_all",
          [](PyWorker& self) {
            const std::vector<float> all = Take(Unlocked([&] { return self.get().GatherAll(); }));
            return Copy(absl::MakeConstSpan(all));
          },
          "The full parameters at the current step (a copy).")
      .def(
          "set_optimizer",
          [](PyWorker& self, const py::dict& optimizer) {
            const tessel::OptimizerParams o = tessel::pybind::OptimizerFromDict(optimizer);
            Check(Unlocked([&] { return self.get().SetOptimizer(o); }));
          },
          py::arg("optimizer"),
          "New hyper-parameters (same kind) from the next step on; every rank passes the same.")
      .def(
          "skip_tensors",
          [](PyWorker& self, const std::vector<int32_t>& tensors) {
            Check(Unlocked([&] { return self.get().SkipTensors(tensors); }));
          },
          py::arg("tensors"),
          "Tensors (layout indices) the next step leaves alone, as torch leaves a parameter "
          "whose .grad is None: every rank passes the same set (those no rank has a gradient "
          "for) before pushing them.")
      .def(
          "request_checkpoint", [](PyWorker& self) { Check(self.get().RequestCheckpoint()); },
          "Asks every shard server to snapshot the job at the next step.")
      .def(
          "synchronize_gradients",
          [](PyWorker& self) {
            return Copy(Take(Unlocked([&] { return self.get().SynchronizeGradients(); })));
          },
          "The mean over ranks of this step's gradients (a copy); the step is not applied.")
      .def(
          "all_reduce_mean",
          [](PyWorker& self, py::array_t<float, py::array::c_style> data) {
            if (!data.writeable()) throw py::value_error("all_reduce_mean needs a writeable array");
            const absl::Span<float> span(data.mutable_data(), static_cast<size_t>(data.size()));
            Check(Unlocked([&] { return self.get().AllReduceMean(span); }));
          },
          py::arg("data"), "The mean over ranks of `data` (float32, C order), in place.")
      .def(
          "broadcast",
          [](PyWorker& self, py::array data, int root) {
            if (!data.writeable()) throw py::value_error("broadcast needs a writeable array");
            if (!(data.flags() & py::array::c_style)) {
              throw py::value_error("broadcast needs a C-contiguous array");
            }
            const char kind = data.dtype().kind();
            if (kind != 'b' && kind != 'i' && kind != 'u' && kind != 'f' && kind != 'c') {
              throw py::value_error(
                  absl::StrCat("broadcast moves numbers (bool, int, uint, float, complex), not "
                               "dtype kind '",
                               std::string(1, kind), "'"));
            }
            const absl::Span<uint8_t> bytes(static_cast<uint8_t*>(data.mutable_data()),
                                            static_cast<size_t>(data.nbytes()));
            Check(Unlocked([&] { return self.get().Broadcast(root, bytes); }));
          },
          py::arg("data"), py::arg("root") = 0,
          "Rank `root`'s `data` onto every rank, in place and exactly (its bytes): a writeable "
          "C-contiguous array of numbers, the same size on every rank.")
      .def(
          "report_loss", [](PyWorker& self, double loss) { self.get().ReportLoss(loss); },
          py::arg("loss"),
          "The loss of the step just finished, for the registry's status page (rank 0's is "
          "plotted; it rides on the next heartbeat). Cheap: call it every step.")
      .def_property_readonly(
          "metrics_address", [](PyWorker& self) { return self.get().metrics_address(); },
          "HOST:PORT where this worker serves /metrics ('' when off).")
      .def(
          "serialize",
          [](PyWorker& self) {
            return py::bytes(Take(Unlocked([&] { return self.get().Serialize(); })));
          },
          "The whole training state as a portable blob (any world size, shard count, strategy).")
      .def(
          "deserialize",
          [](PyWorker& self, const py::bytes& blob) {
            std::string b = blob;
            Check(Unlocked([&] { return self.get().Deserialize(b); }));
          },
          py::arg("blob"), "Loads a serialize() blob (every rank passes the same bytes).")
      .def(
          "load_params",
          [](PyWorker& self, py::array_t<float, py::array::c_style | py::array::forcecast> data) {
            const absl::Span<const float> span(data.data(), static_cast<size_t>(data.size()));
            Check(Unlocked([&] { return self.get().LoadParameters(span); }));
          },
          py::arg("params"),
          "New parameters (float32, num_params, the same on every rank); optimizer state and "
          "step kept. Collective.")
      .def(
          "synchronize_optimizer_state",
          [](PyWorker& self) {
            return Take(Unlocked([&] { return self.get().SynchronizeOptimizerState(); }))
                .consistent;
          },
          "DDP: every rank takes rank 0's state exactly; returns whether they were equal.")
      .def(
          "report_metric",
          [](PyWorker& self, float value) {
            return Take(Unlocked([&] { return self.get().ReportMetric(value); }));
          },
          py::arg("value"), "Early stopping: the job-wide decision for this metric report.")
      .def("should_early_stop", [](PyWorker& self) { return self.get().ShouldEarlyStop(); })
      .def_property_readonly("rank", [](PyWorker& self) { return self.get().rank(); })
      .def_property_readonly("world_size", [](PyWorker& self) { return self.get().world_size(); })
      .def_property_readonly("current_step", [](PyWorker& self) { return self.get().step(); })
      .def_property_readonly("epoch", [](PyWorker& self) { return self.get().epoch(); })
      .def_property_readonly("num_servers", [](PyWorker& self) { return self.get().num_servers(); })
      .def(
          "memory",
          [](PyWorker& self) {
            const WorkerMemory m = self.get().memory();
            py::dict d;
            d["params_bytes"] = m.params_bytes;
            d["grads_bytes"] = m.grads_bytes;
            d["optimizer_bytes"] = m.optimizer_bytes;
            d["peak_bytes"] = m.peak_bytes;
            d["peak_grads_bytes"] = m.peak_grads_bytes;
            return d;
          },
          "Bytes the worker holds now (params, grads, optimizer) and at peak (fsdp: "
          "parameters + gradients; peak_grads_bytes: gradients alone).")
      .def(
          "last_step_phases",
          [](PyWorker& self) {
            const StepPhases p = self.get().last_step_phases();
            py::dict d;
            d["compute"] = p.compute_ns / 1e9;
            d["push"] = p.push_ns / 1e9;
            d["wait"] = p.wait_ns / 1e9;
            d["pull"] = p.pull_ns / 1e9;
            d["update"] = p.update_ns / 1e9;
            return d;
          },
          "Where the last step() went, in seconds: compute (the caller's time since the step "
          "before), push, wait, pull, update (ddp's update here); zeros for fsdp.")
      .def(
          "stragglers",
          [](PyWorker& self) {
            py::list out;
            for (const StragglerReport& s : self.get().stragglers()) {
              py::dict d;
              d["rank"] = s.rank;
              d["registry_rank"] = s.registry_rank;
              d["score"] = s.score;
              d["lateness"] = s.lateness_seconds;
              d["shard"] = s.shard;
              d["since_unix_ms"] = s.since_unix_ms;
              d["host"] = s.host;
              d["pid"] = s.pid;
              out.append(std::move(d));
            }
            return out;
          },
          "The ranks the shard servers name stragglers now (rank order; empty: none), as the "
          "registry's last heartbeat answer said: rank, registry_rank, score (1.0 = the "
          "median rank's pace), lateness (seconds), shard, since_unix_ms, host, pid.")
      .def_property_readonly("num_params",
                             [](PyWorker& self) { return self.get().layout().num_params(); })
      .def_property_readonly("recoveries", [](PyWorker& self) { return self.get().recoveries(); })
      .def_property_readonly(
          "rejoined_in_place", [](PyWorker& self) { return self.get().rejoined_in_place(); },
          "Whether this worker, a replacement, rejoined the job's step in flight without a "
          "rollback (current_step is the step the shards had applied)")
      .def_property_readonly(
          "rejoined_step_held", [](PyWorker& self) { return self.get().rejoined_step_held(); },
          "After rejoining in place: whether the step in flight is held for clipping (the "
          "others pushed it held; hold_updates is set to match)")
      .def(
          "close",
          [](PyWorker& self) {
            py::gil_scoped_release release;
            self.w.reset();
          },
          "Leaves the job (the worker's views become invalid).");
}
