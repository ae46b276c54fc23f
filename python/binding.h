// What the _tessel extension's source files share: turning a status into
// the Python exception (ValueError for bad input, tessel.RecoverableError for
// a step Recover() can repair, tessel.TesselError otherwise), running a
// blocking call without the GIL, NumPy views that keep their owner alive,
// the Python-visible Worker, and the bindings defined in other files.
//
// Example (a binding):
//   .def("step", [](PyWorker& self) { Check(Unlocked([&] { return self.get().Step(); })); })
#ifndef TESSEL_PYTHON_BINDING_H_
#define TESSEL_PYTHON_BINDING_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "worker/worker.h"

namespace tessel {
namespace pybind {

namespace py = pybind11;

inline PyObject* g_tessel_error = nullptr;
inline PyObject* g_recoverable_error = nullptr;

// Raises the Python exception for a non-OK status.
inline void Check(const absl::Status& s) {
  if (s.ok()) return;
  const std::string message(s.message());
  if (Worker::IsRecoverable(s)) {
    PyErr_SetString(g_recoverable_error, message.c_str());
  } else if (absl::IsInvalidArgument(s) || absl::IsOutOfRange(s)) {
    PyErr_SetString(PyExc_ValueError, message.c_str());
  } else {
    PyErr_SetString(g_tessel_error,
                    absl::StrCat(absl::StatusCodeToString(s.code()), ": ", message).c_str());
  }
  throw py::error_already_set();
}

// Runs `f` (a blocking SDK call: connect, a step, a gather) without the
// GIL, so other Python threads run meanwhile.
template <typename F>
auto Unlocked(F&& f) {
  py::gil_scoped_release release;
  return f();
}

template <typename T>
T Take(absl::StatusOr<T> v) {
  Check(v.status());
  return *std::move(v);
}

// A NumPy view of `span` that keeps `owner` (the Python Worker) alive.
template <typename T>
py::array View(absl::Span<T> span, py::handle owner, bool writeable) {
  py::array_t<std::remove_const_t<T>> a({static_cast<py::ssize_t>(span.size())},
                                        {static_cast<py::ssize_t>(sizeof(T))},
                                        const_cast<std::remove_const_t<T>*>(span.data()), owner);
  if (!writeable) {
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return std::move(a);
}

// The Python-visible worker: the C++ one, closed explicitly or when collected.
struct PyWorker {
  std::unique_ptr<Worker> w;
  Worker& get() {
    if (w == nullptr) throw py::value_error("the worker was closed");
    return *w;
  }
};

// tessel.Mesh (python/mesh_binding.cc): a hybrid job's worker-to-worker mesh.
void BindMesh(py::module_& m);

// An optimizer's settings from a dict of torch-style names (python/
// worker_options.cc); ValueError for an unknown key or kind.
OptimizerParams OptimizerFromDict(const py::dict& d);

// The options a Python caller gives, by keyword (python/worker_options.cc);
// the rest keep the SDK's defaults. ValueError for an unknown strategy,
// precision or optimizer setting.
WorkerOptions MakeOptions(const std::string& registry, const std::string& job, int rank,
                          int world_size, const std::string& strategy, const py::dict& optimizer,
                          int num_servers, int64_t bucket_bytes, const std::string& precision,
                          const std::vector<int>& units, const std::string& ucx_tls,
                          double connect_timeout_s, double step_timeout_s, bool recovery,
                          bool auto_resume, int64_t checkpoint_every_steps, bool checkpoint_initial,
                          const std::string& token, double topk_ratio);

}  // namespace pybind
}  // namespace tessel

#endif  // TESSEL_PYTHON_BINDING_H_
