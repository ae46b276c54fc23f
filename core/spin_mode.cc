#include "core/spin_mode.h"

#include "absl/strings/str_cat.h"

namespace tessel {

absl::StatusOr<SpinMode> ParseSpinMode(absl::string_view text) {
  if (text == "auto") return SpinMode::kAuto;
  if (text == "spin") return SpinMode::kSpin;
  if (text == "event") return SpinMode::kEvent;
  return absl::InvalidArgumentError(absl::StrCat(
      "poll mode \"", text,
      "\" is not one of auto (poll while the host's polling threads fit its cores), spin "
      "(always poll) or event (sleep on the wake-up fd at once)"));
}

const char* SpinModeName(SpinMode mode) {
  switch (mode) {
    case SpinMode::kAuto:
      return "auto";
    case SpinMode::kSpin:
      return "spin";
    case SpinMode::kEvent:
      return "event";
  }
  return "?";
}

}  // namespace tessel
