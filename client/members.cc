// `tesselctl members`: the registry's groups and their members.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/context.h"
#include "client/output.h"
#include "proto/registry.grpc.pb.h"
#include "rpc/registry_client.h"

namespace tessel::ctl {
namespace {

std::string RoleName(v1::Role r) {
  return r == v1::ROLE_SERVER ? "server" : r == v1::ROLE_WORKER ? "worker" : "?";
}

int Members(const Globals& g, const std::string& group, std::ostream& out) {
  RegistryClient registry(g.registry, g.credentials, g.token);
  std::vector<v1::View> views;
  if (!group.empty()) {
    auto v = registry.GetView(group);
    if (!v.ok()) return Fail(v.status());
    views.push_back(*v);
  } else {
    auto all = registry.ListGroups();
    if (!all.ok()) return Fail(all.status());
    views = *all;
  }
  nlohmann::json data = nlohmann::json::array();
  for (const auto& v : views) data.push_back(ProtoJson(v));
  Render(
      g, data,
      [&](std::ostream& o) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& v : views) {
          for (const auto& m : v.members()) {
            rows.push_back({v.group(), absl::StrCat(v.epoch()), RoleName(m.role()),
                            absl::StrCat(m.rank()),
                            m.grpc_address().empty() ? "-" : m.grpc_address(), m.host(),
                            absl::StrCat(m.pid())});
          }
        }
        PrintTable({"GROUP", "EPOCH", "ROLE", "RANK", "GRPC", "HOST", "PID"}, rows, o);
      },
      out);
  return kOk;
}

}  // namespace

void AddMemberCommands(CLI::App& app, Globals& g, std::vector<Command>* commands) {
  auto group = std::make_shared<std::string>();
  CLI::App* members =
      app.add_subcommand("members", "registry members: groups, epochs, roles, ranks");
  members->add_option("--group", *group, "only this group (a job or a server pool)");
  AddWatchFlags(members, g);
  commands->push_back({members, [&g, group] {
                         return Watchable(g,
                                          [&](std::ostream& o) { return Members(g, *group, o); });
                       }});
}

}  // namespace tessel::ctl
