#include "rpc/host_identity.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tessel {

namespace {

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(in, id)) return "?";
  id = std::string(absl::StripAsciiWhitespace(id));
  return id.empty() ? "?" : id;
}

std::string NamespaceInode(const char* kind) {
  struct stat st {};
  if (stat(absl::StrCat("/proc/self/ns/", kind).c_str(), &st) != 0) return "?";
  return absl::StrCat(st.st_ino);
}

}  // namespace

std::string HostIdentity() {
  if (const char* env = std::getenv("TESSEL_HOST_ID"); env != nullptr && *env != '\0') return env;
  return absl::StrCat(BootId(), "/net:", NamespaceInode("net"), "/ipc:", NamespaceInode("ipc"));
}

std::string ProcessIncarnation() {
  static const std::string* const incarnation = [] {
    std::random_device device;  // the kernel's entropy (getrandom or /dev/urandom)
    const uint64_t id = (uint64_t{device()} << 32) ^ device();
    return new std::string(absl::StrCat(absl::Hex(id, absl::kZeroPad16)));
  }();
  return *incarnation;
}

}  // namespace tessel
