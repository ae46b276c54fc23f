// --ucx_port_range: UCX's tcp transport listens inside the range, so a
// NetworkPolicy that names only those ports admits the data path.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {

// Local ports of this process's listening TCP sockets (IPv4 and IPv6):
// socket inodes from /proc/self/fd, states and ports from /proc/net/tcp{,6}.
std::set<int> ListeningPorts() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (!error && target.rfind("socket:[", 0) == 0) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

TEST(UcxPortRangeTest, TcpListensOnlyInsideTheRange) {
  // UCX listens once per network device per worker: a range needs room for
  // several ports per process.
  const int lo = 43100, hi = 43163;
  const std::set<int> before = ListeningPorts();
  UcxOptions options;
  options.tls = "tcp";
  options.tcp_port_range = absl::StrCat(lo, "-", hi);
  auto transport = UcxTransport::Create(options);
  ASSERT_TRUE(transport.ok()) << transport.status();
  std::set<int> opened;
  for (int port : ListeningPorts()) {
    if (before.count(port) == 0) opened.insert(port);
  }
  ASSERT_FALSE(opened.empty()) << "UCX opened no tcp listener";
  for (int port : opened) {
    EXPECT_GE(port, lo);
    EXPECT_LE(port, hi);
  }
  (*transport)->Shutdown();
}

TEST(UcxPortRangeTest, BadRangesAreRefused) {
  for (const char* range : {"7200", "7299-7200", "0-10", "7200-70000", "a-b", "7200-7300x"}) {
    UcxOptions options;
    options.tls = "tcp";
    options.tcp_port_range = range;
    auto transport = UcxTransport::Create(options);
    EXPECT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument) << range;
  }
}

}  // namespace
}  // namespace tessel
