#include "worker/internal/fleet_testing.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/registry_client.h"

namespace tessel::internal {

absl::Status ConnectFleet(const std::string& registry_address, const std::string& pool, int servers,
                          ShardFleet* fleet) {
  RegistryClient registry(registry_address);
  auto view = registry.WaitForView(
      pool,
      [servers](const v1::View& v) {
        int n = 0;
        for (const auto& m : v.members()) n += m.role() == v1::ROLE_SERVER;
        return n == servers;
      },
      absl::Seconds(30));
  TESSEL_RETURN_IF_ERROR(view);
  const int connected = fleet->ConnectView(*view);
  if (connected != servers) {
    return absl::InternalError(absl::StrCat("connected ", connected, " of ", servers, " servers"));
  }
  return absl::OkStatus();
}

}  // namespace tessel::internal
