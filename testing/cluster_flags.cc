#include "testing/cluster_flags.h"

#include <iostream>

#include "absl/flags/flag.h"

ABSL_FLAG(bool, insecure, false,
          "start the embedded registry and shard servers without credentials (every RPC open, "
          "data-path frames not authenticated). By default this launch makes its own tokens "
          "(mode 0600, in RUN_DIR/credentials-*) and every process it starts uses them "
          "(docs/security.md)");

namespace tessel {

bool InsecureClusterFromFlags() {
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (insecure) {
    std::cerr << "WARNING: --insecure: the embedded registry and shard servers run without "
                 "credentials; anyone who can reach them can read and change every job\n";
  }
  return insecure;
}

}  // namespace tessel
