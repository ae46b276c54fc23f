#include "tests/attack_frames.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace tessel {

void AddFrame(std::vector<AttackFrame>* frames, const std::string& kind,
              absl::Span<const uint8_t> header, size_t payload_bytes) {
  frames->push_back(
      {kind, std::string(header.begin(), header.end()), std::vector<uint8_t>(payload_bytes, 0x7F)});
}

SprayResult Spray(Transport& transport, PeerId to, const std::vector<AttackFrame>& frames,
                  absl::Duration limit) {
  // Shared with the completions, which may run after a timeout returned.
  struct Counts {
    std::atomic<size_t> done{0}, failed{0};
  };
  auto counts = std::make_shared<Counts>();
  for (const AttackFrame& f : frames) {
    transport.Send(
        to, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(f.header.data()), f.header.size()),
        f.payload.data(), f.payload.size(), [counts](absl::Status s) {
          if (!s.ok()) ++counts->failed;
          ++counts->done;
        });
  }
  const absl::Time deadline = absl::Now() + limit;
  while (counts->done.load() < frames.size() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return {counts->done.load(), counts->failed.load()};
}

std::string KindCounts(const std::vector<AttackFrame>& frames) {
  std::vector<std::string> order;
  std::map<std::string, int64_t> n;
  for (const AttackFrame& f : frames) {
    if (n[f.kind]++ == 0) order.push_back(f.kind);
  }
  std::vector<std::string> out;
  for (const std::string& k : order) out.push_back(absl::StrCat(k, "=", n[k]));
  return absl::StrJoin(out, " ");
}

Transport::Handler CountingHandler(std::atomic<int64_t>* received) {
  return [received](const Incoming&) {
    ++*received;
    return Accept{};
  };
}

}  // namespace tessel
