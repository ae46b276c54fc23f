#include "runtime/flag_config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/cli.h"

ABSL_FLAG(std::string, config, "",
          "JSON job config: flags from its \"common\" section (those this binary has) and "
          "from this binary's own section; flags on the command line override it (see "
          "deploy/base/tessel.json)");

namespace tessel {
namespace {
using Json = nlohmann::json;

constexpr const char* kSections[] = {"common", "registry", "server", "worker", "launch", "comment"};

absl::StatusOr<std::string> ScalarText(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return std::string(value.get<bool>() ? "true" : "false");
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  if (value.is_number_float()) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.17g", value.get<double>());
    return std::string(buffer);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a ", value.type_name(), " where a string, number or boolean belongs"));
}

absl::StatusOr<std::string> ValueText(const Json& value) {
  if (!value.is_array()) return ScalarText(value);
  std::vector<std::string> items;
  for (const Json& item : value) {
    TESSEL_ASSIGN_OR_RETURN(auto text, ScalarText(item));
    items.push_back(text);
  }
  return absl::StrJoin(items, ",");
}

absl::Status ApplySection(const std::string& path, const Json& config, const std::string& section,
                          bool only_known) {
  auto it = config.find(section);
  if (it == config.end()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", path, ": \"", section, "\" must be an object of flag values"));
  }
  for (const auto& [key, value] : it->items()) {
    const std::string where = absl::StrCat("config ", path, ": ", section, ".", key);
    if (key == "config") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a config cannot name another"));
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(key);
    if (flag == nullptr || flag->IsRetired()) {
      if (only_known) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not a flag of this program (--helpfull lists its flags)"));
    }
    auto text = ValueText(value);
    if (!text.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", text.status().message()));
    std::string error;
    if (!flag->ParseFrom(*text, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", error));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status ApplyFlagConfig(const std::string& path, absl::string_view section) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config ", path, ": cannot open the file"));
  std::stringstream text;
  text << in.rdbuf();
  Json config = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false,
                            /*ignore_comments=*/true);
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", path, ": not valid JSON"));
  }
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", path, ": must be a JSON object"));
  }
  for (const auto& [key, value] : config.items()) {
    bool known = false;
    for (const char* s : kSections) known = known || key == s;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("config ", path, ": unknown section \"", key,
                       "\" (sections: common, registry, server, worker, launch, comment)"));
    }
  }
  TESSEL_RETURN_IF_ERROR(ApplySection(path, config, "common", /*only_known=*/true));
  return ApplySection(path, config, std::string(section), /*only_known=*/false);
}

std::string FindConfigArg(int argc, char** argv) {
  std::string found;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    for (absl::string_view prefix : {"--config=", "-config="}) {
      if (absl::StartsWith(arg, prefix)) found = std::string(arg.substr(prefix.size()));
    }
    if ((arg == "--config" || arg == "-config") && i + 1 < argc) found = argv[++i];
  }
  return found;
}

std::vector<char*> ParseCommandLineWithConfig(int argc, char** argv, absl::string_view section) {
  const std::string path = FindConfigArg(argc, argv);
  if (!path.empty()) {
    absl::Status s = ApplyFlagConfig(path, section);
    if (!s.ok()) {
      std::string program = argc > 0 ? argv[0] : "tessel";
      program = program.substr(program.find_last_of('/') + 1);
      std::cerr << program << ": " << s.message() << "\n";
      std::exit(2);
    }
  }
  return ParseFlags(argc, argv);
}

}  // namespace tessel
