#include "transport/ucx/internal/ep_lanes.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessel {
namespace ucx_internal {

EpLanes ParseEpInfo(absl::string_view info) {
  EpLanes lanes;
  auto add = [](std::vector<std::string>* to, const std::string& tl) {
    if (std::find(to->begin(), to->end(), tl) == to->end()) to->push_back(tl);
  };
  for (absl::string_view line : absl::StrSplit(info, '\n')) {
    // "#   lane[1]:  3:cma/memory.0 md[2]   -> md[2]/cma/sysdev[255] rma_bw#0"
    std::vector<absl::string_view> tok = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t at = 0;
    while (at < tok.size() && !absl::StartsWith(tok[at], "lane[")) ++at;
    if (at + 2 >= tok.size()) continue;
    absl::string_view resource = tok[at + 1];  // "3:cma/memory.0"
    const size_t colon = resource.find(':');
    const size_t slash = resource.find('/');
    if (colon == absl::string_view::npos || slash == absl::string_view::npos || slash < colon) {
      continue;
    }
    const std::string tl(resource.substr(colon + 1, slash - colon - 1));
    if (tl == "posix" || tl == "sysv" || tl == "xpmem") lanes.mappable = true;
    size_t arrow = at + 2;
    while (arrow < tok.size() && tok[arrow] != "->") ++arrow;
    for (size_t k = arrow + 2; k < tok.size(); ++k) {  // after "-> md[2]/cma/sysdev[255]"
      if (tok[k] == "am") add(&lanes.am, tl);
      if (absl::StartsWith(tok[k], "rma_bw")) add(&lanes.rma, tl);
    }
  }
  return lanes;
}

std::string DescribeCopied(const EpLanes& lanes) {
  if (!lanes.rma.empty()) {
    return absl::StrCat("copied (rendezvous by RMA over ", absl::StrJoin(lanes.rma, "+"), ")");
  }
  if (!lanes.am.empty()) {
    return absl::StrCat("copied (active messages over ", absl::StrJoin(lanes.am, "+"), ")");
  }
  return "copied";
}

}  // namespace ucx_internal
}  // namespace tessel
