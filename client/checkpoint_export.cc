// `tesselctl checkpoint export`: a complete checkpoint's parameters as one
// model file other tools load (safetensors, torch, npz). Reads go to one
// shard server, as for show and verify (every server of a pool shares the
// checkpoint store): GetCheckpoint for the manifest (tensor names and shapes
// from its job spec), VerifyCheckpoint for every file's checksum, then
// ReadCheckpoint in chunks for the fp32 masters. Nothing needs the job's
// workers, nor the job to be on the servers.
//
// A torch model with several parameter groups is several jobs (J, J.g1,
// J.g2, ... core/job_name.h): the export of J takes every group job with a
// checkpoint at the same step, up to the first group number with no
// checkpoint at all. The model's buffers are J.buffers (tessel.torch writes
// it at J's checkpoint steps): its checkpoint at the step, when there is one,
// adds each buffer under its state_dict name with its dtype (int64
// num_batches_tracked stays int64), after the parameters.
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"
#include "client/tensor_files/named_tensor.h"
#include "client/tensor_files/npz.h"
#include "client/tensor_files/output_file.h"
#include "client/tensor_files/safetensors.h"
#include "client/tensor_files/torch_file.h"
#include "core/job_name.h"
#include "core/status_macros.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/limits.h"

namespace tessel::ctl {
namespace {

using Stub = v1::ShardServer::Stub;
using tensor_files::NamedTensor;

// Verifying or reading a large checkpoint takes longer than a control call.
constexpr absl::Duration kCheckpointIoTimeout = absl::Minutes(10);
// Group numbers probed past the last one found (tessel.torch numbers its
// groups 1, 2, ... without gaps; this only bounds a runaway loop).
constexpr int kMaxGroups = 100000;

struct ExportArgs {
  std::string job;
  int64_t step = -1;
  std::string format;
  std::string out;
  bool force = false;
};

// One job's share of the model: its tensors, in the spec's order, and the
// flat vector they are packed into.
struct JobPart {
  std::string job;
  v1::JobSpec spec;
  std::vector<float> values;
};

// J itself, then each group job J.gN that has a checkpoint at `step`, until
// the first N whose job has no checkpoint at all. Groups whose checkpoints
// miss `step` are left out and named in `*skipped`.
absl::StatusOr<std::vector<std::string>> JobsAtStep(const Cluster& c, const std::string& job,
                                                    int64_t step,
                                                    std::vector<std::string>* skipped) {
  std::vector<std::string> jobs = {job};
  for (int g = 1; g <= kMaxGroups; ++g) {
    const std::string group = GroupJobName(job, g);
    v1::JobRef ref;
    ref.set_job(group);
    v1::ListCheckpointsResponse list;
    TESSEL_RETURN_IF_ERROR(c.fleet().CallWithPrefix(c.AnyShard(), &Stub::ListCheckpoints, ref,
                                                    &list, "ListCheckpoints"));
    if (list.checkpoints().empty()) break;
    const bool has = std::any_of(list.checkpoints().begin(), list.checkpoints().end(),
                                 [step](const v1::CheckpointInfo& i) { return i.step() == step; });
    (has ? jobs : *skipped).push_back(group);
  }
  return jobs;
}

// Whether J.buffers (tessel.torch's job of the model's buffers) has a
// checkpoint at `step`; a warning when it has checkpoints, but not that one.
absl::StatusOr<bool> BuffersAtStep(const Cluster& c, const std::string& buffers_job, int64_t step) {
  v1::JobRef ref;
  ref.set_job(buffers_job);
  v1::ListCheckpointsResponse list;
  TESSEL_RETURN_IF_ERROR(c.fleet().CallWithPrefix(c.AnyShard(), &Stub::ListCheckpoints, ref, &list,
                                                  "ListCheckpoints"));
  if (list.checkpoints().empty()) return false;
  for (const v1::CheckpointInfo& i : list.checkpoints()) {
    if (i.step() == step) return true;
  }
  std::cerr << "tesselctl: warning: '" << buffers_job << "' has no checkpoint at step " << step
            << "; the model's buffers are not in the file\n";
  return false;
}

// A buffer's layout name: KEY@DTYPE[D0,D1,...] (python/tessel/torch/buffer_store.py).
bool ParseBufferName(const std::string& name, std::string* key, const tensor_files::DType** dtype,
                     std::vector<int64_t>* shape) {
  const size_t at = name.rfind('@');
  if (at == std::string::npos || at == 0 || name.back() != ']') return false;
  const size_t open = name.find('[', at);
  if (open == std::string::npos) return false;
  *key = name.substr(0, at);
  *dtype = tensor_files::FindDType(name.substr(at + 1, open - at - 1));
  if (*dtype == nullptr) return false;
  shape->clear();
  const std::string dims = name.substr(open + 1, name.size() - open - 2);
  if (dims.empty()) return true;
  for (absl::string_view d : absl::StrSplit(dims, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 0) return false;
    shape->push_back(v);
  }
  return true;
}

// The buffers in J.buffers' part, each with its dtype, viewing the part's
// values as bytes; each layout tensor holds ceil(bytes / 4) words (at least 1).
absl::StatusOr<std::vector<NamedTensor>> BufferTensors(const JobPart& p) {
  std::vector<NamedTensor> out;
  const char* base = reinterpret_cast<const char*>(p.values.data());
  int64_t offset = 0;  // in words
  for (const v1::TensorSpec& t : p.spec.tensors()) {
    NamedTensor nt;
    if (!ParseBufferName(t.name(), &nt.name, &nt.dtype, &nt.shape)) {
      return absl::DataLossError(absl::StrCat("job '", p.job, "' holds '", t.name(),
                                              "', which is not a buffer's name (KEY@DTYPE[dims])"));
    }
    const int64_t numel = tensor_files::NumElements(nt.shape);
    const int64_t words = t.shape_size() == 1 ? t.shape(0) : -1;
    const int64_t bytes = numel < 0 ? -1 : numel * nt.dtype->itemsize;
    if (bytes < 0 || words != std::max<int64_t>(1, (bytes + 3) / 4) ||
        offset + words > static_cast<int64_t>(p.values.size())) {
      return absl::DataLossError(absl::StrCat("buffer '", nt.name, "' of job '", p.job,
                                              "' does not fit its checkpoint's values"));
    }
    if (std::string(nt.dtype->name) == tensor_files::kFloat32.name) {
      nt.data = absl::MakeConstSpan(p.values.data() + offset, static_cast<size_t>(numel));
    } else {
      nt.bytes = absl::string_view(base + offset * 4, static_cast<size_t>(bytes));
    }
    offset += words;
    out.push_back(std::move(nt));
  }
  if (offset != static_cast<int64_t>(p.values.size())) {
    return absl::DataLossError(absl::StrCat("the buffers of job '", p.job, "' hold ", offset,
                                            " words; its checkpoint ", p.values.size()));
  }
  return out;
}

absl::StatusOr<JobPart> ReadJob(const Cluster& c, const std::string& job, int64_t step) {
  TESSEL_ASSIGN_OR_RETURN(auto info, GetCheckpoint(c, job, step));
  JobPart part;
  part.job = job;
  const nlohmann::json manifest = nlohmann::json::parse(info.manifest_json(), nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("spec") ||
      !google::protobuf::util::JsonStringToMessage(manifest["spec"].dump(), &part.spec).ok()) {
    return absl::DataLossError(
        absl::StrCat("the manifest of job '", job, "' step ", step, " has no readable job spec"));
  }
  v1::VerifyCheckpointResponse verified;
  TESSEL_RETURN_IF_ERROR(c.fleet().CallWithPrefix(c.AnyShard(), &Stub::VerifyCheckpoint,
                                                  CheckpointRef(job, step), &verified,
                                                  "VerifyCheckpoint", kCheckpointIoTimeout));
  if (!verified.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint of job '", job, "' at step ", step,
                     " is damaged; nothing exported: ", absl::StrJoin(verified.problems(), "; ")));
  }
  const int64_t n = info.num_params();
  part.values.resize(static_cast<size_t>(n));
  for (int64_t offset = 0; offset < n; offset += kMaxStateElementsPerCall) {
    v1::ReadCheckpointRequest req;
    req.set_job(job);
    req.set_step(step);
    req.set_offset(offset);
    req.set_count(std::min(kMaxStateElementsPerCall, n - offset));
    v1::CheckpointParams resp;
    TESSEL_RETURN_IF_ERROR(c.fleet().CallWithPrefix(c.AnyShard(), &Stub::ReadCheckpoint, req, &resp,
                                                    "ReadCheckpoint", kCheckpointIoTimeout));
    if (resp.step() != step || resp.num_params() != n || resp.offset() != offset ||
        resp.params().size() != static_cast<size_t>(req.count()) * sizeof(float)) {
      return absl::DataLossError(absl::StrCat("shard server answered ReadCheckpoint of job '", job,
                                              "' step ", step, " [", offset, ", +", req.count(),
                                              ") with something else; nothing exported"));
    }
    std::memcpy(part.values.data() + offset, resp.params().data(), resp.params().size());
  }
  return part;
}

// The tensors of every part, in job order and each job's spec order, viewing
// the parts' values. Tensor names must be unique across the jobs.
// The buffers (J.buffers' part, if any) come first here.
absl::StatusOr<std::vector<NamedTensor>> Tensors(const std::vector<JobPart>& parts,
                                                 const JobPart* buffers) {
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> owner;  // tensor name -> job
  std::vector<std::string> clashes;
  if (buffers != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(tensors, BufferTensors(*buffers));
    for (const NamedTensor& t : tensors) owner.emplace(t.name, buffers->job);
  }
  for (const JobPart& p : parts) {
    int64_t offset = 0;
    for (const v1::TensorSpec& t : p.spec.tensors()) {
      NamedTensor nt;
      nt.name = t.name();
      nt.shape.assign(t.shape().begin(), t.shape().end());
      const int64_t numel = tensor_files::NumElements(nt.shape);
      if (numel < 0 || offset + numel > static_cast<int64_t>(p.values.size())) {
        return absl::DataLossError(absl::StrCat("the tensors of job '", p.job,
                                                "' do not fit its checkpoint's ", p.values.size(),
                                                " parameters"));
      }
      nt.data = absl::MakeConstSpan(p.values.data() + offset, static_cast<size_t>(numel));
      offset += numel;
      auto [it, fresh] = owner.emplace(nt.name, p.job);
      if (!fresh) {
        clashes.push_back(
            absl::StrCat("'", nt.name, "' (jobs '", it->second, "' and '", p.job, "')"));
      }
      tensors.push_back(std::move(nt));
    }
    if (offset != static_cast<int64_t>(p.values.size())) {
      return absl::DataLossError(absl::StrCat("the tensors of job '", p.job, "' hold ", offset,
                                              " parameters; its checkpoint ", p.values.size()));
    }
  }
  if (!clashes.empty()) {
    std::sort(clashes.begin(), clashes.end());
    return absl::InvalidArgumentError(
        absl::StrCat("tensor names appear in more than one job, so one file cannot hold them: ",
                     absl::StrJoin(clashes, ", "), "; export each job by itself (--job J.gN)"));
  }
  return tensors;
}

int Export(const Globals& g, const ExportArgs& a) {
  // Refuse an existing file before fetching anything.
  if (absl::Status s = tensor_files::CheckOutputPath(a.out, a.force); !s.ok()) return Fail(s);
  Cluster c(g);
  if (absl::Status s = c.ConnectServers(); !s.ok()) return Fail(s);
  auto first = GetCheckpoint(c, a.job, a.step);
  if (!first.ok()) return Fail(first.status());
  const int64_t step = first->step();
  std::vector<std::string> skipped;
  auto jobs = JobsAtStep(c, a.job, step, &skipped);
  if (!jobs.ok()) return Fail(jobs.status());
  for (const std::string& s : skipped) {
    std::cerr << "tesselctl: warning: group job '" << s << "' has no checkpoint at step " << step
              << "; its tensors are not in the file\n";
  }
  std::vector<JobPart> parts;
  for (const std::string& job : *jobs) {
    auto part = ReadJob(c, job, step);
    if (!part.ok()) return Fail(part.status());
    parts.push_back(std::move(*part));
  }
  // The model's buffers (tessel.torch), written after the parameters.
  const std::string buffers_job = BuffersJobName(a.job);
  auto has_buffers = BuffersAtStep(c, buffers_job, step);
  if (!has_buffers.ok()) return Fail(has_buffers.status());
  std::optional<JobPart> buffers;
  if (*has_buffers) {
    auto part = ReadJob(c, buffers_job, step);
    if (!part.ok()) return Fail(part.status());
    buffers = std::move(*part);
  }
  auto tensors = Tensors(parts, buffers ? &*buffers : nullptr);
  if (!tensors.ok()) return Fail(tensors.status());
  const size_t num_buffers = buffers ? static_cast<size_t>(buffers->spec.tensors_size()) : 0;
  std::rotate(tensors->begin(), tensors->begin() + static_cast<std::ptrdiff_t>(num_buffers),
              tensors->end());
  int64_t params = 0;
  for (const JobPart& p : parts) params += static_cast<int64_t>(p.values.size());

  const absl::Status written =
      tensor_files::WriteFileAtomically(a.out, a.force, [&](std::ostream* out) -> absl::Status {
        if (a.format == "safetensors") {
          return tensor_files::WriteSafetensors(*tensors,
                                                {{"format", "pt"},
                                                 {"tessel.job", a.job},
                                                 {"tessel.step", absl::StrCat(step)},
                                                 {"tessel.jobs", absl::StrJoin(*jobs, ",")}},
                                                out);
        }
        if (a.format == "torch") return tensor_files::WriteTorchStateDict(*tensors, out);
        return tensor_files::WriteNpz(*tensors, out);
      });
  if (!written.ok()) {
    return Fail(absl::Status(written.code(), absl::StrCat("exporting job '", a.job, "' step ", step,
                                                          ": ", written.message())));
  }
  struct stat st;
  const int64_t bytes = stat(a.out.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  const nlohmann::json summary = {{"job", a.job},
                                  {"step", step},
                                  {"jobs", *jobs},
                                  {"format", a.format},
                                  {"file", a.out},
                                  {"bytes", bytes},
                                  {"tensors", tensors->size()},
                                  {"buffers", num_buffers},
                                  {"params", params}};
  Render(
      g, summary,
      [&](std::ostream& o) {
        o << "exported job '" << a.job << "' at step " << step;
        if (jobs->size() > 1) o << " (jobs " << absl::StrJoin(*jobs, ", ") << ")";
        o << ": " << tensors->size() << " tensors, " << params << " parameters";
        if (num_buffers > 0) o << ", " << num_buffers << " buffers (" << buffers_job << ")";
        o << " -> " << a.out << " (" << a.format << ", " << Bytes(bytes) << ")\n";
      },
      std::cout);
  return kOk;
}

}  // namespace

void AddCheckpointExportCommand(CLI::App* checkpoint, Globals& g, std::vector<Command>* commands) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* exp = checkpoint->add_subcommand(
      "export",
      "write a checkpoint's parameters as one model file (safetensors, torch or npz); needs "
      "the shard servers, not the workers");
  exp->add_option("--job", a->job,
                  "job name; its parameter-group jobs J.g1, J.g2, ... with a checkpoint at the "
                  "same step are included")
      ->required();
  exp->add_option("--step", a->step, "step (-1 = the latest complete checkpoint of --job)")
      ->capture_default_str();
  exp->add_option("--format", a->format,
                  "safetensors (huggingface), torch (torch.load gives an OrderedDict), npz "
                  "(np.load)")
      ->required()
      ->check(CLI::IsMember({"safetensors", "torch", "npz"}));
  exp->add_option("--out", a->out, "file to write (written as FILE.tmp, then renamed)")->required();
  exp->add_flag("--force", a->force, "overwrite FILE if it exists");
  exp->footer(
      "Each tensor is written under the name it was registered with (tessel.torch: the "
      "model's named_parameters(), i.e. its state_dict keys) with its shape, as float32: the "
      "servers' fp32 master copy, also for fp16/bf16 training. Optimizer state is not "
      "exported. A 0-d torch parameter was registered as shape [1] and is written so; "
      "tessel.torch.load_pretrained accepts [1] for a 0-d parameter. Tensor names that "
      "appear in two group jobs are an error. Every file is checked against its checksum "
      "first; on any error nothing is written (exit 3: no such job or step, 6: damaged, "
      "1: FILE exists without --force).\n"
      "Example: tesselctl checkpoint export --job mlp --format safetensors --out mlp.safetensors");
  commands->push_back({exp, [&g, a] { return Export(g, *a); }});
}

}  // namespace tessel::ctl
