// tesselctl's config file: named contexts (registry, pool, credentials), so
// that flags are not needed each time, as kubectl's kubeconfig. YAML at
// $TESSEL_CONFIG, else $XDG_CONFIG_HOME/tessel/config, else
// ~/.config/tessel/config:
//
//   current-context: prod
//   contexts:
//     - name: prod
//       registry: tessel-registry.prod.svc:7070
//       pool: default
//       token_file: /home/me/.config/tessel/prod.token
//       tls_ca: /home/me/.config/tessel/ca.crt
//       tls_cert: /home/me/.config/tessel/me.crt
//       tls_key: /home/me/.config/tessel/me.key
//       tls_server_name: tessel
//
// Precedence: flags, then the environment (TESSEL_REGISTRY, TESSEL_TOKEN,
// ...), then the context (--context NAME, else current-context), then the
// built-in defaults (main.cc applies it). The `tesselctl config` commands
// that edit the file are in config.cc.
//
// Example:
//   absl::StatusOr<Config> config = LoadConfig(ConfigPath());
//   if (!config.ok()) return Fail(config.status());
//   config->contexts.push_back({"dev", {{"registry", "127.0.0.1:7070"}}});
//   config->current_context = "dev";
//   absl::Status saved = SaveConfig(ConfigPath(), *config);  // 0600, atomic
#ifndef TESSEL_CLIENT_CONFIG_FILE_H_
#define TESSEL_CLIENT_CONFIG_FILE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessel::ctl {

// The keys a context may set, in the order they are written.
const std::vector<std::string>& ContextKeys();

struct Context {
  std::string name;
  std::map<std::string, std::string> values;  // keys of ContextKeys()
};

struct Config {
  std::string current_context;
  std::vector<Context> contexts;

  const Context* Find(const std::string& name) const;
};

std::string ConfigPath();

// NotFound-free: a missing file is an empty config. InvalidArgument naming
// the file for bad YAML, an unknown key, a context without a name, or one
// named twice.
absl::StatusOr<Config> LoadConfig(const std::string& path);
// Writes atomically (temporary file, rename), mode 0600, creating the folder.
absl::Status SaveConfig(const std::string& path, const Config& config);

}  // namespace tessel::ctl

#endif  // TESSEL_CLIENT_CONFIG_FILE_H_
