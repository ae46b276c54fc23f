// `tesselctl completion bash`: a bash completion script for every command,
// subcommand and flag, generated from the command tree itself.
//
//   source <(tesselctl completion bash)
//   tesselctl completion bash > /etc/bash_completion.d/tesselctl
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/context.h"

namespace tessel::ctl {
namespace {

std::vector<std::string> Flags(const CLI::App* app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
    for (const std::string& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

// One case arm per level of the tree: `level` is the path of subcommand
// names ("" at the top, "checkpoint list" below it).
void Walk(const CLI::App* app, const std::string& level, const std::vector<std::string>& inherited,
          std::string* words, std::string* moves) {
  std::vector<std::string> choices;
  std::vector<std::string> flags = inherited;
  for (const std::string& f : Flags(app)) flags.push_back(f);
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    choices.push_back(sub->get_name());
    const std::string next = level.empty() ? sub->get_name() : level + " " + sub->get_name();
    absl::StrAppend(moves, "      \"", level, ":", sub->get_name(), "\") level=\"", next,
                    "\" ;;\n");
    // Global flags may follow a subcommand (fallthrough): every level offers them.
    Walk(sub, next, level.empty() ? Flags(app) : inherited, words, moves);
  }
  for (const std::string& f : flags) choices.push_back(f);
  absl::StrAppend(words, "    \"", level, "\") opts=\"", absl::StrJoin(choices, " "), "\" ;;\n");
}

int Completion(CLI::App* root, const std::string& shell) {
  if (shell != "bash") {
    std::cerr << "tesselctl: completion for \"" << shell << "\" is not available (bash)\n";
    return kUsage;
  }
  std::string words, moves;
  Walk(root, "", {}, &words, &moves);
  std::cout << "# bash completion for tesselctl: source <(tesselctl completion bash)\n"
               "_tesselctl() {\n"
               "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" level=\"\" w i opts=\"\"\n"
               "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
               "    w=\"${COMP_WORDS[i]}\"\n"
               "    case \"$level:$w\" in\n"
            << moves
            << "    esac\n"
               "  done\n"
               "  case \"$level\" in\n"
            << words
            << "  esac\n"
               "  COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
               "}\n"
               "complete -F _tesselctl tesselctl\n";
  return kOk;
}

}  // namespace

void AddCompletionCommand(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  (void)g;
  auto shell = std::make_shared<std::string>();
  CLI::App* completion = app.add_subcommand(
      "completion", "print a shell completion script: source <(tesselctl completion bash)");
  completion->add_option("shell", *shell, "bash")->required();
  CLI::App* root = &app;
  commands->push_back({completion, [root, shell] { return Completion(root, *shell); }});
}

}  // namespace tessel::ctl
