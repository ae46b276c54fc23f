// Start-up shared by every Tessel binary: flag parsing with a --help that
// lists the binary's own flags, --version, and the logging flags.
//
//   --help (or -h)  this binary's flags with their help text and defaults (all
//                   but Abseil's own), then exit 0; --helpfull adds Abseil's
//   --version       tessel's version line, exit 0
//   --log_format    text (default) or json: one JSON object per line with
//                   time, level, process, source, job, rank, shard, step, msg
//   --log_level     debug, info (default), warning or error
//
// A bad --log_format or --log_level prints "<program>: <error>" and exits 2.
//
// Example (main):
//   absl::SetProgramUsageMessage("tessel-demo: ...");
//   std::vector<char*> args = tessel::ParseFlags(argc, argv);
#ifndef TESSEL_RUNTIME_CLI_H_
#define TESSEL_RUNTIME_CLI_H_

#include <string>
#include <vector>

#include "runtime/log.h"

namespace tessel {

// absl::ParseCommandLine with the behaviour above. Returns the positional
// arguments (argv[0] first), as absl::ParseCommandLine does.
std::vector<char*> ParseFlags(int argc, char** argv);

// Whether `filename` (where a flag is defined) is one of Tessel's own files
// rather than Abseil's: what --help lists.
bool IsTesselFlagFile(const std::string& filename);

// Before ParseFlags: the level --log_level defaults to in this binary (a
// launcher that embeds a registry keeps its INFO lines out of the user's
// terminal); the command line still overrides it.
void SetDefaultLogLevel(LogLevel level);

// Applies --log_format and --log_level (ParseFlags does). Exits 2 on a bad value.
void ApplyLogFlags(const char* program);

}  // namespace tessel

#endif  // TESSEL_RUNTIME_CLI_H_
