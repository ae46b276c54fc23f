#include "runtime/cli.h"

#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "runtime/log.h"
#include "runtime/version.h"

ABSL_FLAG(std::string, log_format, "text",
          "log line format: text (level, RFC 3339 UTC time, process, source, message) or json "
          "(one object per line: time, level, process, source, job, rank, shard, step, msg)");
ABSL_FLAG(std::string, log_level, "info", "least severe level logged: debug, info, warning, error");

namespace tessel {
namespace {

std::string ProgramName(const char* argv0) {
  std::string program = argv0 != nullptr ? argv0 : "tessel";
  return program.substr(program.find_last_of('/') + 1);
}

void ConfigureUsage() {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return IsTesselFlagFile(std::string(file));
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] { return std::string(kVersion) + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

// --help / -h / --helpfull before Abseil sees them: Abseil 20220623 exits 1
// after help, and a user (or a script) asking for help has made no error.
void HandleHelp(int argc, char** argv) {
  using absl::flags_internal::HelpMode;
  HelpMode mode = HelpMode::kNone;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpshort") {
      mode = HelpMode::kImportant;
    } else if (arg == "--helpfull" || arg == "-helpfull") {
      mode = HelpMode::kFull;
    }
  }
  if (mode == HelpMode::kNone) return;
  // Abseil's usage line is "<program>: <usage message>"; the program name is
  // set by ParseCommandLine, which has not run yet ("UNKNOWN" otherwise).
  if (argc > 0) absl::flags_internal::SetProgramInvocationName(argv[0]);
  absl::flags_internal::SetFlagsHelpMode(mode);
  absl::flags_internal::HandleUsageFlags(std::cout, absl::ProgramUsageMessage());
  std::cout.flush();
  std::exit(0);
}

}  // namespace

void SetDefaultLogLevel(LogLevel level) {
  absl::SetFlag(&FLAGS_log_level, std::string(LogLevelName(level)));
}

bool IsTesselFlagFile(const std::string& filename) {
  return !absl::StartsWith(filename, "absl/") && !absl::StrContains(filename, "/absl/");
}

void ApplyLogFlags(const char* program) {
  LogFormat format;
  absl::Status s = ParseLogFormat(absl::GetFlag(FLAGS_log_format), &format);
  LogLevel level;
  if (s.ok()) s = ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level);
  if (!s.ok()) {
    std::cerr << ProgramName(program) << ": --log_format/--log_level: " << s.message() << "\n";
    std::exit(2);
  }
  SetLogFormat(format);
  SetMinLogLevel(level);
}

std::vector<char*> ParseFlags(int argc, char** argv) {
  ConfigureUsage();
  HandleHelp(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  ApplyLogFlags(argc > 0 ? argv[0] : nullptr);
  return positional;
}

}  // namespace tessel
