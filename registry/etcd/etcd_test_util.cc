#include "registry/etcd/etcd_test_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "registry/etcd/etcd_client.h"

namespace tessel {
namespace {

// A port the kernel just handed out (released again; etcd binds it next).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

bool EtcdProcess::Available() { return access(kBinary, X_OK) == 0; }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::string& dir) {
  static int instance = 0;
  std::string last_error;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a port may be taken in between
    auto etcd = std::unique_ptr<EtcdProcess>(new EtcdProcess());
    etcd->data_dir_ = absl::StrCat(dir, "/etcd-", getpid(), "-", instance++);
    std::filesystem::remove_all(etcd->data_dir_);
    std::filesystem::create_directories(etcd->data_dir_);
    const int client_port = FreePort();
    const int peer_port = FreePort();
    etcd->endpoint_ = absl::StrCat("127.0.0.1:", client_port);
    const std::string client_url = absl::StrCat("http://", etcd->endpoint_);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
    const std::string log = etcd->data_dir_ + "/etcd.log";
    std::vector<std::string> args = {kBinary,
                                     "--name=test",
                                     "--data-dir=" + etcd->data_dir_ + "/data",
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=test=" + peer_url,
                                     "--heartbeat-interval=10",
                                     "--election-timeout=100",
                                     "--logger=zap",
                                     "--log-level=warn"};
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kBinary, argv.data());
      _exit(127);
    }
    etcd->pid_ = pid;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    bool exited = false;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        etcd->pid_ = -1;
        exited = true;
        std::string tail;
        if (FILE* f = std::fopen(log.c_str(), "r")) {
          char buf[4096];
          size_t n = std::fread(buf, 1, sizeof(buf), f);
          tail.assign(buf, n);
          std::fclose(f);
        }
        last_error = absl::StrCat("etcd exited early: ", tail);
        break;
      }
      auto client = EtcdClient::Connect({etcd->endpoint_}, absl::Milliseconds(500));
      if (client.ok()) return etcd;
      last_error = std::string(client.status().message());
    }
    if (!exited)
      return absl::DeadlineExceededError("etcd did not answer within 30 s: " + last_error);
  }
  return absl::UnavailableError("could not start etcd: " + last_error);
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(data_dir_, ignored);
}

}  // namespace tessel
