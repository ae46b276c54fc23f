#include "client/config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel::ctl {

const std::vector<std::string>& ContextKeys() {
  static const auto* keys = new std::vector<std::string>{
      "registry", "pool", "token_file", "tls_ca", "tls_cert", "tls_key", "tls_server_name"};
  return *keys;
}

const Context* Config::Find(const std::string& name) const {
  for (const Context& c : contexts) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ConfigPath() {
  if (const char* p = std::getenv("TESSEL_CONFIG"); p != nullptr && *p != '\0') return p;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x != nullptr && *x != '\0') {
    return absl::StrCat(x, "/tessel/config");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : ".", "/.config/tessel/config");
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  Config config;
  std::ifstream in(path);
  if (!in) return config;  // no file: no contexts
  std::stringstream text;
  text << in.rdbuf();
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("config ", path, ": ", what));
  };
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    return bad(absl::StrCat("not YAML: ", e.what()));
  }
  if (root.IsNull()) return config;
  if (!root.IsMap()) return bad("expected a mapping with current-context and contexts");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "current-context") {
        config.current_context = kv.second.as<std::string>();
      } else if (key == "contexts") {
        if (!kv.second.IsSequence()) return bad("contexts: expected a list");
        std::set<std::string> seen;
        for (const auto& item : kv.second) {
          if (!item.IsMap()) return bad("contexts: each entry is a mapping");
          Context c;
          for (const auto& field : item) {
            const std::string k = field.first.as<std::string>();
            const std::string v = field.second.as<std::string>();
            if (k == "name") {
              c.name = v;
            } else if (std::count(ContextKeys().begin(), ContextKeys().end(), k)) {
              c.values[k] = v;
            } else {
              return bad(absl::StrCat("context key \"", k, "\" is not one of name, ",
                                      absl::StrJoin(ContextKeys(), ", ")));
            }
          }
          if (c.name.empty()) return bad("a context without a name");
          if (!seen.insert(c.name).second)
            return bad(absl::StrCat("context \"", c.name, "\" twice"));
          config.contexts.push_back(std::move(c));
        }
      } else {
        return bad(absl::StrCat("unknown key \"", key, "\" (current-context, contexts)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return bad(e.what());
  }
  return config;
}

absl::Status SaveConfig(const std::string& path, const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "current-context" << YAML::Value << config.current_context;
  out << YAML::Key << "contexts" << YAML::Value << YAML::BeginSeq;
  for (const Context& c : config.contexts) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name;
    for (const std::string& k : ContextKeys()) {
      auto it = c.values.find(k);
      if (it != c.values.end()) out << YAML::Key << k << YAML::Value << it->second;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  // mkdir -p of the folder.
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    for (size_t i = 1; i <= dir.size(); ++i) {
      if (i == dir.size() || dir[i] == '/') {
        const std::string part = dir.substr(0, i);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
          return absl::PermissionDeniedError(
              absl::StrCat("cannot create ", part, ": ", std::strerror(errno)));
        }
      }
    }
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  // Owner-only from its creation (it names the user's token and key files).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::fchmod(fd, 0600) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(err)));
  }
  ::close(fd);
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
    f << out.c_str() << "\n";
    if (!f.flush()) return absl::DataLossError(absl::StrCat("writing ", tmp, " failed"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot replace ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace tessel::ctl
