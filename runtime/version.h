// Tessel's version: the one string every binary prints for --version and the
// shard service reports in GetInfo, and the release number that tags the OCI
// images (deploy/image: tessel:<release>, tessel:<release>-gpu).
//
// Example (main, before parsing flags):
//   tessel::UseVersionForVersionFlag();  // --version prints kVersion, exits 0
#ifndef TESSEL_RUNTIME_VERSION_H_
#define TESSEL_RUNTIME_VERSION_H_

namespace tessel {

// The release, from runtime/release.bzl (the one place it is written) through
// runtime:version's `defines`.
#ifndef TESSEL_RELEASE
#error "TESSEL_RELEASE is set by //runtime:version from runtime/release.bzl"
#endif
inline constexpr char kRelease[] = TESSEL_RELEASE;

// The release and the versions of the formats a build speaks: the wire
// protocol (core/wire.h) and the checkpoint layout (core/checkpoint_manifest.h).
inline constexpr char kVersion[] = "tessel " TESSEL_RELEASE " (wire v1, checkpoint v1)";

// Makes Abseil's built-in --version flag print kVersion (one line) and exit 0,
// for binaries that parse flags with absl::ParseCommandLine.
void UseVersionForVersionFlag();

}  // namespace tessel

#endif  // TESSEL_RUNTIME_VERSION_H_
