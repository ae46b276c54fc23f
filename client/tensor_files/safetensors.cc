#include "client/tensor_files/safetensors.h"

#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessel::tensor_files {
namespace {

constexpr char kMetadataKey[] = "__metadata__";

absl::Status Put(std::ostream* out, const char* data, size_t size) {
  out->write(data, static_cast<std::streamsize>(size));
  if (!out->good()) return absl::DataLossError("writing the safetensors file failed");
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::vector<NamedTensor>& tensors, const Metadata& metadata,
                              std::ostream* out) {
  TESSEL_RETURN_IF_ERROR(ValidateTensors(tensors));
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    std::set<std::string> keys;
    for (const auto& [key, value] : metadata) {
      if (!keys.insert(key).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors metadata key '", key, "' appears twice"));
      }
      meta[key] = value;
    }
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name == kMetadataKey) {
      return absl::InvalidArgumentError(
          "a tensor may not be named '__metadata__' in a safetensors file");
    }
    const uint64_t bytes = Bytes(t).size();
    header[t.name] = {{"dtype", t.dtype->safetensors},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // not UTF-8: ValidateTensors rules it out
    return absl::InvalidArgumentError(absl::StrCat("safetensors header: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  TESSEL_RETURN_IF_ERROR(Put(out, length, sizeof(length)));
  TESSEL_RETURN_IF_ERROR(Put(out, text.data(), text.size()));
  for (const NamedTensor& t : tensors) {
    const absl::string_view bytes = Bytes(t);
    TESSEL_RETURN_IF_ERROR(Put(out, bytes.data(), bytes.size()));
  }
  out->flush();
  if (!out->good()) return absl::DataLossError("writing the safetensors file failed");
  return absl::OkStatus();
}

}  // namespace tessel::tensor_files
