// How a Tessel thread that ran out of work waits for the next: poll for a
// while (spin), sleep on its wake-up fd at once (event), or poll only while
// this host's polling threads fit its cores (auto). SpinPolicy
// (runtime/spin_budget.h) applies it; --poll_mode chooses it.
//
// Example:
//   absl::StatusOr<SpinMode> mode = ParseSpinMode(absl::GetFlag(FLAGS_poll_mode));
//   if (!mode.ok()) return mode.status();   // names auto, spin, event
//   SpinPolicy policy(*mode, absl::Milliseconds(5), /*threads=*/1, "ucx progress");
#ifndef TESSEL_CORE_SPIN_MODE_H_
#define TESSEL_CORE_SPIN_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

enum class SpinMode { kAuto, kSpin, kEvent };

// "auto", "spin", "event"; anything else is an InvalidArgument naming them.
absl::StatusOr<SpinMode> ParseSpinMode(absl::string_view text);
const char* SpinModeName(SpinMode mode);

}  // namespace tessel

#endif  // TESSEL_CORE_SPIN_MODE_H_
