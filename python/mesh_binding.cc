// tessel.Mesh: a hybrid job's worker-to-worker mesh (worker/hybrid.h's
// HybridSession without a partition worker of its own) for Python.
//
// tessel.torch.parallel builds tensor-parallel layers and the pipeline on it:
// tagged sends and receives between global ranks, the collectives of
// worker/collectives.h (an all-reduce that sums in fixed member order, so
// every member gets the same bits), the rank arithmetic of hybrid.h, and the
// session's recovery with the partition Worker that tessel.torch made
// (attach()). Every wait releases the GIL, has the session's deadline and
// names the peer and what it waited for; a peer that leaves the mesh ends it.
//
// Example:
//   m = tessel.Mesh("127.0.0.1:7070", "job", rank, 4, dp=2, tp=2, pp=1)
//   m.all_reduce_sum(m.tensor_group, m.tag(3, 0, 0, 0), partial, "fc2's output")
//   m.finish(); m.close()
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/job_name.h"
#include "python/binding.h"
#include "worker/collectives.h"
#include "worker/hybrid.h"

namespace tessel {
namespace pybind {
namespace {

struct PyMesh {
  // The tessel.Worker attached (s holds a pointer to its Worker): kept alive
  // while attached, so dropping the last other reference cannot free it.
  // Declared first: s goes first.
  py::object attached = py::none();
  std::unique_ptr<HybridSession> s;
  HybridSession& get() {
    if (s == nullptr) throw py::value_error("the mesh was closed");
    return *s;
  }
};

// The members a collective runs over: ascending, valid ranks, the caller among them.
std::vector<int> Members(HybridSession& s, const std::vector<int>& members) {
  const int world = s.config().world();
  bool mine = false;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= world) {
      throw py::value_error(absl::StrCat("rank ", members[i], " is outside [0, ", world, ")"));
    }
    if (i > 0 && members[i] <= members[i - 1]) {
      throw py::value_error("a collective's members must be ascending ranks");
    }
    mine = mine || members[i] == s.rank();
  }
  if (!mine) {
    throw py::value_error(absl::StrCat(s.Describe(), " runs a collective it is not a member of"));
  }
  return members;
}

void CheckPeer(HybridSession& s, int peer) {
  if (peer < 0 || peer >= s.config().world() || peer == s.rank()) {
    throw py::value_error(
        absl::StrCat("peer ", peer, ": not another rank of [0, ", s.config().world(), ")"));
  }
}

std::string BufferBytes(const py::buffer& b) {
  py::buffer_info info = b.request();
  if (info.ndim > 0) {
    py::ssize_t expect = info.itemsize;
    for (py::ssize_t i = info.ndim - 1; i >= 0; --i) {
      if (info.shape[i] != 1 && info.strides[i] != expect) {
        throw py::value_error("the buffer must be contiguous");
      }
      expect *= info.shape[i];
    }
  }
  return std::string(static_cast<const char*>(info.ptr),
                     static_cast<size_t>(info.size * info.itemsize));
}

}  // namespace

void BindMesh(py::module_& m) {
  m.attr("MAX_MICRO_BATCHES") = kMaxMicroBatches;
  m.attr("MESH_KINDS") =
      py::dict(py::arg("activation") = static_cast<int>(HybridMessage::kActivation),
               py::arg("activation_grad") = static_cast<int>(HybridMessage::kActivationGrad),
               py::arg("forward_sum") = static_cast<int>(HybridMessage::kForwardSum),
               py::arg("backward_sum") = static_cast<int>(HybridMessage::kBackwardSum),
               py::arg("collect") = static_cast<int>(HybridMessage::kCollect),
               py::arg("barrier") = static_cast<int>(HybridMessage::kBarrier),
               py::arg("config") = static_cast<int>(HybridMessage::kConfig),
               py::arg("loss") = static_cast<int>(HybridMessage::kLoss),
               py::arg("gather") = static_cast<int>(HybridMessage::kGather));
  m.def(
      "partition_job_name",
      [](const std::string& job, int stage, int tensor_rank) {
        if (stage < 0 || tensor_rank < 0) {
          throw py::value_error("partition_job_name: stage and tensor_rank must be >= 0");
        }
        return PartitionJobName(job, stage, tensor_rank);
      },
      py::arg("job"), py::arg("stage"), py::arg("tensor_rank"),
      "The shard-server job of pipeline stage `stage`'s tensor rank `tensor_rank` "
      "(core/job_name.h): job.p<stage>.t<tensor_rank>.");

  m.def(
      "one_f_one_b",
      [](int stage, int stages, int micro_batches) {
        if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1) {
          throw py::value_error(absl::StrCat("one_f_one_b: stage ", stage, " of ", stages, " with ",
                                             micro_batches, " micro-batches"));
        }
        std::vector<std::pair<bool, int>> out;
        for (const PipelineOp& op : OneFOneBSchedule(stage, stages, micro_batches)) {
          out.emplace_back(op.forward, op.micro_batch);
        }
        return out;
      },
      py::arg("stage"), py::arg("stages"), py::arg("micro_batches"),
      "worker/hybrid.h's 1F1B schedule of one stage: [(forward?, micro_batch), ...].");

  py::class_<PyMesh>(m, "Mesh")
      .def(py::init([](const std::string& registry, const std::string& job, int rank,
                       int world_size, int dp, int tp, int pp, const std::string& fingerprint,
                       const std::string& ucx_tls, const std::string& token,
                       double connect_timeout_s, double step_timeout_s, double recovery_timeout_s,
                       bool resume) {
             HybridOptions o;
             o.worker.registry = registry;
             o.worker.job = job;
             o.worker.rank = rank;
             o.worker.world_size = world_size;
             o.worker.ucx.tls = ucx_tls;
             o.worker.token = token;
             o.worker.connect_timeout = absl::Seconds(connect_timeout_s);
             o.worker.step_timeout = absl::Seconds(step_timeout_s);
             o.worker.recovery_timeout = absl::Seconds(recovery_timeout_s);
             o.worker.resume = resume;
             o.worker.recovery = resume;
             o.config = {.dp = dp, .tp = tp, .pp = pp, .micro_batches = 1};
             o.fingerprint = fingerprint;
             o.make_worker = false;
             auto* pm = new PyMesh;
             pm->s = Take(Unlocked([&] { return HybridSession::Connect(o); }));
             return pm;
           }),
           py::arg("registry"), py::arg("job"), py::arg("rank"), py::arg("world_size"),
           py::arg("dp"), py::arg("tp"), py::arg("pp"), py::arg("fingerprint") = "",
           py::arg("ucx_tls") = "", py::arg("token") = "", py::arg("connect_timeout_s") = 60.0,
           py::arg("step_timeout_s") = 120.0, py::arg("recovery_timeout_s") = 60.0,
           py::arg("resume") = false,
           "Joins the job's mesh (group <job>.mesh in the registry) as global rank `rank` of "
           "world_size = dp*tp*pp and waits for every process; every process must give the "
           "same dp, tp, pp and fingerprint (refused, naming both, otherwise). "
           "step_timeout_s bounds every wait. resume: a restarted process; it waits briefly to "
           "be welcomed into the running job as a replacement (else the whole job restarts), "
           "and the first worker attached resumes from the checkpoint every partition agrees "
           "on.")
      .def_property_readonly(
          "replacement", [](PyMesh& self) { return self.get().replacement(); },
          "True when this process was welcomed into a running job as a replacement: the "
          "others skip what a job does once at start-up, so it must too.")
      .def_property_readonly("rank", [](PyMesh& self) { return self.get().rank(); })
      .def_property_readonly("world_size", [](PyMesh& self) { return self.get().config().world(); })
      .def_property_readonly("dp", [](PyMesh& self) { return self.get().config().dp; })
      .def_property_readonly("tp", [](PyMesh& self) { return self.get().config().tp; })
      .def_property_readonly("pp", [](PyMesh& self) { return self.get().config().pp; })
      .def_property_readonly(
          "coords",
          [](PyMesh& self) {
            const RankCoords& c = self.get().coords();
            return std::make_tuple(c.d, c.p, c.t);
          },
          "(d, p, t): data-parallel replica, pipeline stage, tensor rank.")
      .def_property_readonly(
          "tensor_group",
          [](PyMesh& self) { return TensorGroup(self.get().config(), self.get().rank()); },
          "Global ranks (d, p, 0..tp-1) of this process's tensor-parallel group.")
      .def_property_readonly(
          "data_group",
          [](PyMesh& self) { return DataGroup(self.get().config(), self.get().rank()); },
          "Global ranks (0..dp-1, p, t): the replicas of this process's partition.")
      .def_property_readonly(
          "pipeline_group",
          [](PyMesh& self) {
            const HybridConfig& c = self.get().config();
            RankCoords x = self.get().coords();
            std::vector<int> out;
            for (x.p = 0; x.p < c.pp; ++x.p) out.push_back(RankOf(c, x));
            return out;
          },
          "Global ranks (d, 0..pp-1, t): this process's pipeline.")
      .def_property_readonly(
          "next_rank",
          [](PyMesh& self) { return NextStageRank(self.get().config(), self.get().rank()); },
          "The rank one stage later with the same (d, t); -1 on the last stage.")
      .def_property_readonly(
          "prev_rank",
          [](PyMesh& self) { return PrevStageRank(self.get().config(), self.get().rank()); },
          "The rank one stage earlier with the same (d, t); -1 on the first stage.")
      .def_property_readonly(
          "generation",
          [](PyMesh& self) {
            const PeerGeneration g = self.get().peers().generation();
            return py::make_tuple(g.epoch, g.round);
          },
          "The mesh's peer generation (mesh epoch, recovery round): (0, 0) until the first "
          "recovery, then the same on every process after each.")
      .def(
          "describe",
          [](PyMesh& self, int rank) { return DescribeRank(self.get().config(), rank); },
          py::arg("rank"), "'rank 5 (d1 p0 t1)'.")
      .def(
          "tag",
          [](PyMesh&, int kind, int64_t step, int micro_batch, int index) {
            if (kind < 1 || kind > 255 || step < 0 || step >= kMaxHybridSteps || micro_batch < 0 ||
                micro_batch > kMaxMicroBatches || index < 0 || index > 4095) {
              throw py::value_error(
                  absl::StrCat("mesh tag out of range: kind ", kind, " (1..255), step ", step,
                               " (0..", kMaxHybridSteps - 1, "), micro-batch ", micro_batch,
                               " (0..", kMaxMicroBatches, "), index ", index, " (0..4095)"));
            }
            return HybridTag(static_cast<HybridMessage>(kind), step, micro_batch, index);
          },
          py::arg("kind"), py::arg("step"), py::arg("micro_batch"), py::arg("index"),
          "A message tag (worker/hybrid.h HybridTag): kind | step | micro-batch | index.")
      .def(
          "send",
          [](PyMesh& self, int peer, uint64_t tag, const py::buffer& data) {
            CheckPeer(self.get(), peer);
            std::string bytes = BufferBytes(data);
            Check(self.get().peers().SendBytes(peer, tag, std::move(bytes)));
          },
          py::arg("peer"), py::arg("tag"), py::arg("data"),
          "Queues a copy of `data` (bytes or a contiguous array) to `peer`; returns at once.")
      .def(
          "recv",
          [](PyMesh& self, int peer, uint64_t tag, const std::string& what) {
            CheckPeer(self.get(), peer);
            std::string bytes =
                Take(Unlocked([&] { return self.get().peers().RecvBytes(peer, tag, what); }));
            return py::bytes(bytes);
          },
          py::arg("peer"), py::arg("tag"), py::arg("what"),
          "Waits for the message (peer, tag); `what` names it in a timeout's error.")
      .def(
          "all_reduce_sum",
          [](PyMesh& self, const std::vector<int>& members, uint64_t tag, py::object arg,
             const std::string& what) {
            std::vector<int> ranks = Members(self.get(), members);
            // No conversion: a converted copy would be summed and dropped, the
            // caller's array left as it was.
            if (!py::isinstance<py::array_t<float, py::array::c_style>>(arg)) {
              throw py::type_error(absl::StrCat(
                  "all_reduce_sum: data must be a C-contiguous float32 NumPy array (it is "
                  "summed in place); got ",
                  std::string(py::str(py::type::handle_of(arg).attr("__name__"))),
                  py::isinstance<py::array>(arg)
                      ? absl::StrCat(" of ", std::string(py::str(arg.attr("dtype"))))
                      : ""));
            }
            auto data = py::reinterpret_borrow<py::array_t<float, py::array::c_style>>(arg);
            if (!data.writeable()) throw py::value_error("all_reduce_sum: the array is read-only");
            absl::Span<float> span(data.mutable_data(), static_cast<size_t>(data.size()));
            Check(
                Unlocked([&] { return AllReduceSum(self.get().peers(), ranks, tag, span, what); }));
          },
          py::arg("members"), py::arg("tag"), py::arg("data"), py::arg("what"),
          "In place: data <- the sum over `members` (ascending global ranks) of their data, "
          "left to right in member order (every member gets the same bits). A writeable, "
          "C-contiguous float32 NumPy array (anything else: TypeError, nothing sent); every "
          "member gives the same size.")
      .def(
          "all_gather",
          [](PyMesh& self, const std::vector<int>& members, uint64_t tag, const py::buffer& mine,
             const std::string& what) {
            std::vector<int> ranks = Members(self.get(), members);
            std::string bytes = BufferBytes(mine);
            std::vector<std::string> all = Take(
                Unlocked([&] { return AllGather(self.get().peers(), ranks, tag, bytes, what); }));
            py::list out;
            for (const std::string& b : all) out.append(py::bytes(b));
            return out;
          },
          py::arg("members"), py::arg("tag"), py::arg("data"), py::arg("what"),
          "Every member's bytes, in member order.")
      .def(
          "broadcast",
          [](PyMesh& self, const std::vector<int>& members, int root, uint64_t tag,
             const py::buffer& data, const std::string& what) {
            std::vector<int> ranks = Members(self.get(), members);
            std::string bytes = BufferBytes(data);
            Check(Unlocked(
                [&] { return Broadcast(self.get().peers(), ranks, root, tag, &bytes, what); }));
            return py::bytes(bytes);
          },
          py::arg("members"), py::arg("root"), py::arg("tag"), py::arg("data"), py::arg("what"),
          "Member `root`'s bytes on every member (the others' `data` is ignored).")
      .def(
          "barrier",
          [](PyMesh& self, const std::vector<int>& members, uint64_t tag, const std::string& what) {
            std::vector<int> ranks = Members(self.get(), members);
            Check(Unlocked([&] { return Barrier(self.get().peers(), ranks, tag, what); }));
          },
          py::arg("members"), py::arg("tag"), py::arg("what"))
      .def(
          "attach",
          [](PyMesh& self, py::object worker) {
            HybridSession& s = self.get();
            Worker* w = worker.is_none() ? nullptr : &worker.cast<PyWorker&>().get();
            self.attached = worker;  // first: s points at it even if attaching fails
            Check(Unlocked([&] { return s.AttachWorker(w); }));
          },
          py::arg("worker"),
          "This process's partition Worker (job partition_job_name(job, p, t), rank d of dp), "
          "or None to detach it: a lost shard server then ends mesh waits too, and recover() "
          "rolls it back. Detach it before closing it. A mesh made with resume: attach the "
          "worker before its register_layout (it meets the others and agrees on the "
          "checkpoint to resume from).")
      .def(
          "recover",
          [](PyMesh& self, const std::string& why) {
            Check(Unlocked([&] {
              return self.get().Recover(Worker::MarkRecoverable(absl::AbortedError(why)));
            }));
          },
          py::arg("why"),
          "After a recoverable failure, on every process: a new peer generation (nothing of "
          "the abandoned step is received), a meeting of all processes, and the attached "
          "worker rolled back to the newest step whose checkpoint is complete in every "
          "partition job (its current_step then says which).")
      .def(
          "finish", [](PyMesh& self) { Check(Unlocked([&] { return self.get().Finish(); })); },
          "Waits until every process got here and every send has left (call before close).")
      .def(
          "close",
          [](PyMesh& self) {
            {
              py::gil_scoped_release release;
              self.s.reset();
            }
            self.attached = py::none();
          },
          "Leaves the mesh.");
}

}  // namespace pybind
}  // namespace tessel
