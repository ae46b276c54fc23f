#include "worker/train_state.h"

#include <xxhash.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/status_macros.h"
#include "core/tensor_steps.h"
#include "google/protobuf/util/json_util.h"
#include "rpc/job_spec.h"

namespace tessel {
namespace {

constexpr size_t kMagicBytes = 8;
constexpr uint32_t kMaxHeaderBytes = 16u << 20;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
void PutFloats(std::string* out, const std::vector<float>& v) {
  static_assert(sizeof(float) == 4);
  const size_t at = out->size();
  out->resize(at + v.size() * 4);
  std::memcpy(out->data() + at, v.data(), v.size() * 4);  // little-endian host (x86-64, arm64)
}

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError(absl::StrCat("training state blob: ", why));
}

}  // namespace

absl::StatusOr<std::string> EncodeTrainState(const TrainState& s) {
  nlohmann::json header;
  TESSEL_ASSIGN_OR_RETURN(std::string spec_json, JobSpecToJson(s.spec));
  header["job"] = s.spec.job();
  header["step"] = s.step;
  header["num_params"] = static_cast<int64_t>(s.params.size());
  header["state_slots"] = static_cast<int64_t>(s.state.size());
  header["spec"] = spec_json;
  nlohmann::json tensors = nlohmann::json::array();
  for (const v1::TensorSpec& t : s.spec.tensors()) {
    tensors.push_back(
        {{"name", t.name()}, {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
  }
  header["tensors"] = tensors;
  if (!NoSkips(s.tensor_skips)) header["tensor_skips"] = s.tensor_skips;
  const std::string text = header.dump();
  std::string out(kTrainStateMagic, kMagicBytes);
  PutU32(&out, kTrainStateVersion);
  PutU32(&out, static_cast<uint32_t>(text.size()));
  out += text;
  PutFloats(&out, s.params);
  for (const auto& slot : s.state) PutFloats(&out, slot);
  PutU64(&out, XXH64(out.data(), out.size(), 0));
  return out;
}

absl::StatusOr<TrainState> DecodeTrainState(absl::string_view bytes) {
  if (bytes.size() < kMagicBytes + 8 + 8)
    return Corrupt(absl::StrCat("only ", bytes.size(), " bytes"));
  if (std::memcmp(bytes.data(), kTrainStateMagic, kMagicBytes) != 0) {
    return Corrupt("bad magic (not a Tessel training state)");
  }
  const uint64_t version = GetLe(bytes.data() + 8, 4);
  if (version != kTrainStateVersion) {
    return Corrupt(absl::StrCat("format version ", version, "; this build reads version ",
                                kTrainStateVersion));
  }
  const uint64_t header_len = GetLe(bytes.data() + 12, 4);
  const size_t body = kMagicBytes + 8;
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - body - 8) {
    return Corrupt(
        absl::StrCat("header length ", header_len, " does not fit in ", bytes.size(), " bytes"));
  }
  const uint64_t want = GetLe(bytes.data() + bytes.size() - 8, 8);
  const uint64_t got = XXH64(bytes.data(), bytes.size() - 8, 0);
  if (want != got) return Corrupt("checksum mismatch (the blob is damaged or truncated)");

  nlohmann::json header = nlohmann::json::parse(bytes.substr(body, header_len), nullptr,
                                                /*allow_exceptions=*/false);
  if (!header.is_object()) return Corrupt("header is not a JSON object");
  for (const char* key : {"step", "num_params", "state_slots"}) {
    if (!header.contains(key) || !header[key].is_number_integer()) {
      return Corrupt(absl::StrCat("header field '", key, "' is missing or not an integer"));
    }
  }
  if (!header.contains("spec") || !header["spec"].is_string()) {
    return Corrupt("header field 'spec' is missing or not a string");
  }
  TrainState s;
  const int64_t step = header["step"].get<int64_t>();
  const int64_t n = header["num_params"].get<int64_t>();
  const int64_t slots = header["state_slots"].get<int64_t>();
  if (step < 0) return Corrupt(absl::StrCat("negative step ", step));
  if (n < 0 || slots < 0 || slots > kMaxStateSlots) {
    return Corrupt(absl::StrCat("num_params ", n, " / state_slots ", slots, " out of range"));
  }
  const uint64_t payload = bytes.size() - body - header_len - 8;
  if (static_cast<uint64_t>(n) > payload / 4 ||
      static_cast<uint64_t>(n) * 4 * static_cast<uint64_t>(1 + slots) != payload) {
    return Corrupt(absl::StrCat("payload is ", payload, " bytes; ", n, " params and ", slots,
                                " state slots need ", static_cast<uint64_t>(n) * 4 * (1 + slots)));
  }
  google::protobuf::util::JsonParseOptions popts;
  const std::string spec_json = header["spec"].get<std::string>();
  if (!google::protobuf::util::JsonStringToMessage(spec_json, &s.spec, popts).ok()) {
    return Corrupt("the job spec in the header does not parse");
  }
  auto layout = ValidateJobSpec(s.spec);
  if (!layout.ok())
    return Corrupt(absl::StrCat("the job spec is invalid: ", layout.status().message()));
  if (layout->num_params() != n) {
    return Corrupt(absl::StrCat("the spec's tensors hold ", layout->num_params(),
                                " params; the header says ", n));
  }
  auto optimizer = OptimizerFromProto(s.spec.optimizer());
  if (!optimizer.ok()) return Corrupt(absl::StrCat("optimizer: ", optimizer.status().message()));
  if (StateSlots(*optimizer) != slots) {
    return Corrupt(absl::StrCat("the optimizer has ", StateSlots(*optimizer),
                                " state slots; the header says ", slots));
  }
  s.step = step;
  if (header.contains("tensor_skips")) {
    const nlohmann::json& skips = header["tensor_skips"];
    if (!skips.is_array()) return Corrupt("header field 'tensor_skips' is not an array");
    for (const nlohmann::json& v : skips) {
      if (!v.is_number_integer()) return Corrupt("header field 'tensor_skips' holds a non-integer");
      s.tensor_skips.push_back(v.get<int64_t>());
    }
    absl::Status valid =
        ValidateSkips(s.tensor_skips, static_cast<int>(layout->tensors().size()), step);
    if (!valid.ok()) return Corrupt(std::string(valid.message()));
  }
  const char* p = bytes.data() + body + header_len;
  s.params.resize(static_cast<size_t>(n));
  std::memcpy(s.params.data(), p, static_cast<size_t>(n) * 4);
  p += n * 4;
  s.state.assign(static_cast<size_t>(slots), std::vector<float>(static_cast<size_t>(n)));
  for (auto& slot : s.state) {
    std::memcpy(slot.data(), p, static_cast<size_t>(n) * 4);
    p += n * 4;
  }
  return s;
}

absl::Status CheckTrainStateFits(const TrainState& state, const v1::JobSpec& spec) {
  const auto& a = state.spec.tensors();
  const auto& b = spec.tensors();
  if (a.size() != b.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the training state has ", a.size(), " tensors; job '", spec.job(), "' has ", b.size()));
  }
  for (int i = 0; i < a.size(); ++i) {
    if (a[i].name() != b[i].name() || !std::equal(a[i].shape().begin(), a[i].shape().end(),
                                                  b[i].shape().begin(), b[i].shape().end())) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", i, " differs: the training state has '", a[i].name(), "', job '",
                       spec.job(), "' has '", b[i].name(), "' (or another shape)"));
    }
  }
  if (state.spec.optimizer().kind() != spec.optimizer().kind()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the training state holds ", v1::OptimizerConfig::Kind_Name(state.spec.optimizer().kind()),
        " state; job '", spec.job(), "' uses ",
        v1::OptimizerConfig::Kind_Name(spec.optimizer().kind())));
  }
  TESSEL_ASSIGN_OR_RETURN(auto mine, OptimizerFromProto(spec.optimizer()));
  if (static_cast<size_t>(StateSlots(mine)) != state.state.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the training state has ", state.state.size(), " optimizer state slots; job '", spec.job(),
        "' needs ", StateSlots(mine), " (e.g. SGD momentum on in one and off in the other)"));
  }
  return absl::OkStatus();
}

}  // namespace tessel
