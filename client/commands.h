// tesselctl's command groups, one file each. Each Add* function declares its
// subcommands (flags and help text) on `app` and appends what runs when one
// of them was chosen; main runs it after resolving the global flags `g`.
//
// Subcommands appear in --help in the order main adds them.
//
// Example: a new group, in its own file:
//   void AddFooCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
//     CLI::App* foo = app.add_subcommand("foo", "what foo shows");
//     commands->push_back({foo, [&g] {
//       Cluster c(g);
//       absl::Status s = c.ConnectServers();
//       return s.ok() ? kOk : Fail(s);
//     }});
//   }
#ifndef TESSEL_CLIENT_COMMANDS_H_
#define TESSEL_CLIENT_COMMANDS_H_

#include <functional>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/context.h"

namespace tessel::ctl {

// A leaf subcommand and its action; the action returns the exit code.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// members.cc: `members`.
void AddMemberCommands(CLI::App& app, Globals& g, std::vector<Command>* commands);
// jobs.cc: `jobs`.
void AddJobCommands(CLI::App& app, Globals& g, std::vector<Command>* commands);
// shards.cc: `shards`, `stats`.
void AddShardCommands(CLI::App& app, Globals& g, std::vector<Command>* commands);
// top_why.cc: `top JOB`, `why JOB`.
void AddTopWhyCommands(CLI::App& app, Globals& g, std::vector<Command>* commands);
// jobs.cc also: `describe job NAME`, `delete job NAME`.
// checkpoint.cc: `checkpoint save|list|show|verify|restore|delete|export`.
void AddCheckpointCommands(CLI::App& app, Globals& g, std::vector<Command>* commands);
// checkpoint_export.cc: `checkpoint export`, added to the `checkpoint` group.
void AddCheckpointExportCommand(CLI::App* checkpoint, Globals& g, std::vector<Command>* commands);

// version.cc: `version` (this client and the pool's shard servers).
void AddVersionCommand(CLI::App& app, Globals& g, std::vector<Command>* commands);
// config.cc: `config view|get-contexts|current-context|use-context|set-context|delete-context`.
void AddConfigCommands(CLI::App& app, Globals& g, std::vector<Command>* commands);
// completion.cc: `completion bash`.
void AddCompletionCommand(CLI::App& app, Globals& g, std::vector<Command>* commands);

// -w/--watch and --watch_interval on a read command.
void AddWatchFlags(CLI::App* command, Globals& g);

}  // namespace tessel::ctl

#endif  // TESSEL_CLIENT_COMMANDS_H_
