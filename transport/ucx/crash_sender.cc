// Test helper: a UCX peer that dies in the middle of a send.
//
// It connects to the UCX address given in hex and sends a message whose
// payload lies in unreadable memory. UCX claims a slot in the receiver's
// shared-memory FIFO, then faults while copying the payload into it, and
// the process dies with SIGSEGV: the slot stays claimed and never filled,
// as when a peer is killed mid-send. (ucx_wedge_test.)
//
// Usage: ucx_crash_sender HEX_ADDRESS UCX_TLS
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <vector>

#include "absl/strings/escaping.h"
#include "transport/ucx/ucx_transport.h"

// Under AddressSanitizer the fault must still kill the process by SIGSEGV
// (ASan's own handler would exit with a report instead).
extern "C" const char* __asan_default_options() { return "handle_segv=0:detect_leaks=0"; }

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: ucx_crash_sender HEX_ADDRESS UCX_TLS\n";
    return 2;
  }
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  auto transport = tessel::UcxTransport::Create({.tls = argv[2]});
  if (!transport.ok()) {
    std::cerr << transport.status() << "\n";
    return 1;
  }
  auto peer = (*transport)->Connect(absl::HexStringToBytes(argv[1]));
  if (!peer.ok()) {
    std::cerr << peer.status() << "\n";
    return 1;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* unreadable = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::vector<uint8_t> header(32, 0xEE);
  // Eager (below the FIFO segment size): copied into the receiver's slot.
  (*transport)->Send(*peer, header, unreadable, 2048, [](absl::Status) {});
  sleep(20);
  std::cerr << "ucx_crash_sender: the send did not fault\n";
  return 3;
}
