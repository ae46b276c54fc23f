// A peer that dies while writing into a UCX shared-memory receive queue
// wedges it: UCX reads the FIFO strictly in order, and the dead peer's slot
// never fills. CheckReceiveQueue() must say so, and Reset() must cure it.
// The dying peer is a real process (ucx_crash_sender) that faults inside
// UCX's copy into this process's FIFO.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "transport/transport_testing.h"
#include "transport/ucx/ucx_transport.h"

extern char** environ;

namespace tessel {
namespace {

constexpr char kTls[] = "posix,sysv,self";

// Runs ucx_crash_sender against `address`; returns its wait status.
int RunCrashSender(const std::string& address) {
  const std::string binary = FindBinary("transport/ucx_crash_sender");
  std::vector<std::string> args = {binary, absl::BytesToHexString(address), kTls};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = {"UCX_HANDLE_ERRORS=none"};
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) {
    ADD_FAILURE() << "cannot start " << binary;
    return -1;
  }
  int status = 0;
  for (int i = 0; i < 3000; ++i) {  // 30 s
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "ucx_crash_sender did not die within 30 s";
  return status;
}

std::unique_ptr<UcxTransport> Make() { return MakeUcxTransport({.tls = kTls}); }

// Sends one header-only message from `from` to `address`.
void SendOne(UcxTransport* from, const std::string& address) {
  auto peer = from->Connect(address);
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::vector<uint8_t> header(16, 1);
  from->Send(*peer, header, nullptr, 0, [](absl::Status) {});
}

bool WaitFor(const std::atomic<int>& n, int want, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  while (n.load() < want && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
  return n.load() >= want;
}

TEST(UcxWedgeTest, PeerDyingMidSendWedgesTheQueueAndResetCuresIt) {
  auto receiver = Make();
  auto sender = Make();
  ASSERT_TRUE(receiver != nullptr && sender != nullptr);
  std::atomic<int> received{0};
  receiver->SetHandler([&](const Incoming&) {
    ++received;
    return Accept{};
  });
  ASSERT_TRUE(receiver->CheckReceiveQueue(absl::Seconds(10)).ok());
  SendOne(sender.get(), receiver->address());
  ASSERT_TRUE(WaitFor(received, 1, absl::Seconds(10)));

  const int status = RunCrashSender(receiver->address());
  ASSERT_TRUE(WIFSIGNALED(status)) << "wait status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);

  // Wedged: neither the probe nor a live peer's message gets through.
  absl::Status probe = receiver->CheckReceiveQueue(absl::Seconds(2));
  EXPECT_EQ(probe.code(), absl::StatusCode::kFailedPrecondition) << probe;
  EXPECT_NE(probe.message().find("wedged"), std::string::npos) << probe;
  SendOne(sender.get(), receiver->address());
  EXPECT_FALSE(WaitFor(received, 2, absl::Seconds(1)));

  // Reset: a new address; the probe and the live peer get through again.
  const std::string old_address = receiver->address();
  ASSERT_TRUE(receiver->Reset().ok());
  EXPECT_NE(receiver->address(), old_address);
  EXPECT_TRUE(receiver->CheckReceiveQueue(absl::Seconds(10)).ok());
  SendOne(sender.get(), receiver->address());
  EXPECT_TRUE(WaitFor(received, 2, absl::Seconds(10)));
  EXPECT_EQ(received.load(), 2);  // the message sent into the wedge is gone with it
}

}  // namespace
}  // namespace tessel
