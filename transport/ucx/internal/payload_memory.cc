#include "transport/ucx/internal/payload_memory.h"

#include <sys/statvfs.h>

#include <cstring>

namespace tessel {
namespace ucx_internal {

UcxPayloadMemory::~UcxPayloadMemory() {
  absl::MutexLock lock(&mu_);
  for (auto& [base, r] : regions_) ucp_mem_unmap(context_->get(), r.memh);
}

void* UcxPayloadMemory::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) == 0 &&
      static_cast<double>(fs.f_bavail) * fs.f_frsize < 1.25 * static_cast<double>(bytes)) {
    return nullptr;
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = nullptr;
  mp.length = bytes;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  if (ucp_mem_map(context_->get(), &mp, &memh) != UCS_OK) return nullptr;
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  void* packed = nullptr;
  size_t packed_len = 0;
  if (ucp_mem_query(memh, &attr) != UCS_OK || attr.length < bytes ||
      ucp_rkey_pack(context_->get(), memh, &packed, &packed_len) != UCS_OK) {
    ucp_mem_unmap(context_->get(), memh);
    return nullptr;
  }
  Region r;
  r.bytes = bytes;
  r.memh = memh;
  r.rkey = std::make_shared<const std::string>(static_cast<const char*>(packed), packed_len);
  ucp_rkey_buffer_release(packed);
  std::memset(attr.address, 0, bytes);  // some allocation methods (heap) do not zero
  absl::MutexLock lock(&mu_);
  r.id = next_id_++;
  regions_[reinterpret_cast<uintptr_t>(attr.address)] = std::move(r);
  return attr.address;
}

bool UcxPayloadMemory::Free(void* p) {
  ucp_mem_h memh = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end()) return false;
    memh = it->second.memh;
    regions_.erase(it);
  }
  ucp_mem_unmap(context_->get(), memh);
  return true;
}

std::optional<UcxPayloadMemory::Found> UcxPayloadMemory::Find(const void* p, size_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  absl::MutexLock lock(&mu_);
  auto it = regions_.upper_bound(at);
  if (it == regions_.begin()) return std::nullopt;
  --it;
  if (at + bytes > it->first + it->second.bytes) return std::nullopt;
  return Found{it->second.id, it->first, it->second.bytes, it->second.rkey};
}

}  // namespace ucx_internal
}  // namespace tessel
