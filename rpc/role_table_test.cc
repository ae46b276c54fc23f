// The role table (rpc/role_table.h) covers every RPC of both services.
#include "rpc/role_table.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <string>

#include "proto/registry.grpc.pb.h"
#include "proto/shard.grpc.pb.h"

namespace tessel {
namespace {

// Every RPC of both services has a row: none is left unchecked.
TEST(RoleTableTest, EveryRpcHasARule) {
  for (const char* name : {"tessel.v1.ShardServer", "tessel.v1.Registry"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string rpc = service->method(i)->name();
      if (service->name() == "Registry" && rpc == "Join") {
        EXPECT_NE(RuleFor("Registry", "Join/SERVER"), nullptr);
        EXPECT_NE(RuleFor("Registry", "Join/WORKER"), nullptr);
        continue;
      }
      EXPECT_NE(RuleFor(service->name(), rpc), nullptr) << service->name() << "." << rpc;
    }
  }
  for (const RpcRule& r : RoleTable()) {
    EXPECT_FALSE(r.action.empty()) << r.rpc;
  }
}

TEST(RoleTableTest, RoleNames) {
  EXPECT_EQ(RoleName(Role::kAdmin), "admin");
  EXPECT_EQ(RoleName(Role::kWorker), "worker");
  EXPECT_EQ(RoleName(Role::kServer), "server");
  EXPECT_EQ(RoleName(Role::kReader), "reader");
  EXPECT_EQ(RuleFor("ShardServer", "NoSuchRpc"), nullptr);
  EXPECT_EQ(RuleFor("Registry", "Join"), nullptr);  // Join/SERVER or Join/WORKER
}

}  // namespace
}  // namespace tessel
