#include "gpu/internal/dynamic_library.h"

#include <dlfcn.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel::gpu::internal {

absl::StatusOr<DynamicLibrary> DynamicLibrary::OpenFirst(
    const std::vector<std::string>& candidates) {
  std::vector<std::string> errors;
  for (const std::string& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return DynamicLibrary(handle, name);
    const char* e = dlerror();
    errors.push_back(e != nullptr ? e : absl::StrCat(name, ": dlopen failed"));
  }
  if (candidates.empty()) return absl::NotFoundError("no library named");
  return absl::NotFoundError(
      absl::StrCat("tried ", absl::StrJoin(candidates, ", "), ": ", absl::StrJoin(errors, "; ")));
}

void* DynamicLibrary::Symbol(const char* symbol) const { return dlsym(handle_, symbol); }

absl::Status DynamicLibrary::Resolve(std::initializer_list<SymbolSlot> table) const {
  std::vector<const char*> missing;
  for (const SymbolSlot& s : table) {
    void* p = Symbol(s.symbol);
    if (p == nullptr && s.required) missing.push_back(s.symbol);
    s.assign(s.slot, p);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(name_, " lacks ", absl::StrJoin(missing, ", ")));
}

}  // namespace tessel::gpu::internal
