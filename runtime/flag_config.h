// One job config file as the source of flag values: every long-running
// binary (tessel-registry, tessel-server, tessel-train) takes
// `--config=FILE`, a JSON object with a section per binary:
//
//   {
//     "common":   {"registry": "tessel-registry:7070", "pool": "default"},
//     "registry": {"listen": "0.0.0.0:7070", "backend": "memory"},
//     "server":   {"listen": "0.0.0.0:7100", "ucx_port_range": "7200-7299"},
//     "worker":   {"job": "mlp", "world": 2, "strategy": "zero2", "layers": [64, 512, 10]}
//   }
//
// A binary applies "common" first, taking only the keys that are its own
// flags (the registry has no --pool), then its own section, where every key
// must be one of its flags: a misspelt key is an error naming the file, the
// section and the key. Values are JSON strings, numbers, booleans or arrays
// of them (joined with commas); each is checked by the flag's own parser.
// Flags given on the command line override the file, so the same file serves
// every pod of a Kubernetes deployment (deploy/) and a local run alike.
// Other top-level keys: "comment" (ignored) and "launch" (tessel-launch).
//
// Example (main):
//   std::vector<char*> args = tessel::ParseCommandLineWithConfig(argc, argv, "server");
#ifndef TESSEL_RUNTIME_FLAG_CONFIG_H_
#define TESSEL_RUNTIME_FLAG_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessel {

// Sets the flags named by `section` (and "common") of the JSON config at
// `path`. InvalidArgument naming the file, section and key for anything that
// is not a flag of this binary or does not parse as one; NotFound for a
// missing file. Flags set before a failure keep their new values, so callers
// exit on error.
absl::Status ApplyFlagConfig(const std::string& path, absl::string_view section);

// The `--config` value in argv ("--config=F" or "--config F"), or "".
std::string FindConfigArg(int argc, char** argv);

// tessel::ParseFlags (runtime/cli.h: --help, --version, --log_format,
// --log_level) with --config: applies the file named by --config
// (if any) first, so the command line overrides it. On a bad config prints
// "<program>: <error>" to stderr and exits with status 2 (usage error).
// Returns the positional arguments, as absl::ParseCommandLine does.
std::vector<char*> ParseCommandLineWithConfig(int argc, char** argv, absl::string_view section);

}  // namespace tessel

#endif  // TESSEL_RUNTIME_FLAG_CONFIG_H_
