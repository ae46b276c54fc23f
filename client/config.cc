#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/config_file.h"
#include "client/context.h"
#include "client/output.h"

namespace tessel::ctl {

namespace {

int Usage(const std::string& message) {
  std::cerr << "tesselctl: " << message << "\n";
  return kUsage;
}

absl::StatusOr<Config> Load() { return LoadConfig(ConfigPath()); }

int View(const Globals& g) {
  auto config = Load();
  if (!config.ok()) return Fail(config.status());
  nlohmann::json data = {{"current-context", config->current_context},
                         {"contexts", nlohmann::json::array()}};
  for (const Context& c : config->contexts) {
    nlohmann::json j = {{"name", c.name}};
    for (const auto& [k, v] : c.values) j[k] = v;
    data["contexts"].push_back(j);
  }
  if (g.output == "json") {
    std::cout << data.dump(2) << "\n";
  } else {
    std::cout << "# " << ConfigPath() << "\n" << ToYaml(data);
  }
  return kOk;
}

int GetContexts(const Globals& g) {
  auto config = Load();
  if (!config.ok()) return Fail(config.status());
  nlohmann::json data = nlohmann::json::array();
  for (const Context& c : config->contexts) {
    nlohmann::json j = {{"name", c.name}, {"current", c.name == config->current_context}};
    for (const auto& [k, v] : c.values) j[k] = v;
    data.push_back(j);
  }
  Render(
      g, data,
      [&](std::ostream& o) {
        std::vector<std::vector<std::string>> rows;
        for (const Context& c : config->contexts) {
          auto get = [&](const std::string& k) {
            auto it = c.values.find(k);
            return it == c.values.end() ? std::string("-") : it->second;
          };
          const bool tls = c.values.count("tls_cert") > 0;
          const bool token = c.values.count("token_file") > 0;
          rows.push_back({c.name == config->current_context ? "*" : "", c.name, get("registry"),
                          get("pool"),
                          tls && token ? "tls+token"
                          : tls        ? "tls"
                          : token      ? "token"
                                       : "none"});
        }
        PrintTable({"CURRENT", "NAME", "REGISTRY", "POOL", "CREDENTIALS"}, rows, o);
      },
      std::cout);
  return kOk;
}

int CurrentContext() {
  auto config = Load();
  if (!config.ok()) return Fail(config.status());
  if (config->current_context.empty()) {
    return Fail(absl::NotFoundError(absl::StrCat("no current context in ", ConfigPath(),
                                                 " (`tesselctl config use-context NAME`)")));
  }
  std::cout << config->current_context << "\n";
  return kOk;
}

int UseContext(const std::string& name) {
  auto config = Load();
  if (!config.ok()) return Fail(config.status());
  if (config->Find(name) == nullptr) {
    return Fail(absl::NotFoundError(absl::StrCat("no context \"", name, "\" in ", ConfigPath(),
                                                 " (`tesselctl config get-contexts`)")));
  }
  config->current_context = name;
  if (absl::Status s = SaveConfig(ConfigPath(), *config); !s.ok()) return Fail(s);
  std::cout << "switched to context \"" << name << "\"\n";
  return kOk;
}

int SetContext(const std::string& name, const std::vector<std::string>& assignments) {
  auto config = Load();
  if (!config.ok()) return Fail(config.status());
  std::map<std::string, std::string> changes;
  for (const std::string& a : assignments) {
    std::vector<std::string> kv = absl::StrSplit(a, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || !std::count(ContextKeys().begin(), ContextKeys().end(), kv[0])) {
      return Usage(absl::StrCat("\"", a, "\" is not KEY=VALUE with KEY one of ",
                                absl::StrJoin(ContextKeys(), ", ")));
    }
    changes[kv[0]] = kv[1];
  }
  Context* c = nullptr;
  for (Context& each : config->contexts) {
    if (each.name == name) c = &each;
  }
  const bool created = c == nullptr;
  if (created) {
    config->contexts.push_back({name, {}});
    c = &config->contexts.back();
  }
  for (const auto& [k, v] : changes) {
    if (v.empty()) {
      c->values.erase(k);
    } else {
      c->values[k] = v;
    }
  }
  if (config->current_context.empty()) config->current_context = name;
  if (absl::Status s = SaveConfig(ConfigPath(), *config); !s.ok()) return Fail(s);
  std::cout << "context \"" << name << "\" " << (created ? "created" : "modified") << "\n";
  return kOk;
}

int DeleteContext(const std::string& name) {
  auto config = Load();
  if (!config.ok()) return Fail(config.status());
  const auto it = std::find_if(config->contexts.begin(), config->contexts.end(),
                               [&](const Context& c) { return c.name == name; });
  if (it == config->contexts.end()) {
    return Fail(absl::NotFoundError(absl::StrCat("no context \"", name, "\" in ", ConfigPath())));
  }
  config->contexts.erase(it);
  if (config->current_context == name) config->current_context.clear();
  if (absl::Status s = SaveConfig(ConfigPath(), *config); !s.ok()) return Fail(s);
  std::cout << "context \"" << name << "\" deleted\n";
  return kOk;
}

}  // namespace

void AddConfigCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  CLI::App* config =
      app.add_subcommand("config", "contexts in " + ConfigPath() +
                                       " ($TESSEL_CONFIG): registry, pool and credentials by name");
  config->require_subcommand(1);
  commands->push_back(
      {config->add_subcommand("view", "print the config file"), [&g] { return View(g); }});
  commands->push_back({config->add_subcommand("get-contexts", "list the contexts"),
                       [&g] { return GetContexts(g); }});
  commands->push_back(
      {config->add_subcommand("current-context", "print the current context's name"),
       [] { return CurrentContext(); }});
  auto name = std::make_shared<std::string>();
  CLI::App* use = config->add_subcommand("use-context", "make NAME the current context");
  use->add_option("name", *name, "context")->required();
  commands->push_back({use, [name] { return UseContext(*name); }});
  auto assignments = std::make_shared<std::vector<std::string>>();
  CLI::App* set = config->add_subcommand(
      "set-context",
      "create or change context NAME: KEY=VALUE ... with KEY one of registry, pool, token_file, "
      "tls_ca, tls_cert, tls_key, tls_server_name (an empty VALUE removes the key); the first "
      "context becomes the current one");
  set->add_option("name", *name, "context")->required();
  set->add_option("settings", *assignments, "KEY=VALUE ...");
  commands->push_back({set, [name, assignments] { return SetContext(*name, *assignments); }});
  CLI::App* del = config->add_subcommand("delete-context", "remove context NAME");
  del->add_option("name", *name, "context")->required();
  commands->push_back({del, [name] { return DeleteContext(*name); }});
}

}  // namespace tessel::ctl
