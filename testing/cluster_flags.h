// The local launchers' one security flag (tessel-launch, tessel-demo,
// tessel-replay, tessel-hybrid-train --local): their embedded cluster makes
// its own credentials (testing/launch_credentials.h) unless --insecure.
//
// Example:
//   tessel::ClusterOptions copt;
//   copt.insecure = tessel::InsecureClusterFromFlags();
#ifndef TESSEL_TESTING_CLUSTER_FLAGS_H_
#define TESSEL_TESTING_CLUSTER_FLAGS_H_

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(bool, insecure);

namespace tessel {

// --insecure, and when it is set a warning on stderr that says what it means.
bool InsecureClusterFromFlags();

}  // namespace tessel

#endif  // TESSEL_TESTING_CLUSTER_FLAGS_H_
