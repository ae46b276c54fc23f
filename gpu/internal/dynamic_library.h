// A shared library loaded at run time with dlopen, and the table of its
// functions a caller needs: the one loader behind everything in gpu/ that
// reaches CUDA libraries without linking them (the CUDA runtime for
// gpu/detect.h, cuBLAS for gpu/cublas.h).
//
// Contract:
//   - OpenFirst tries the candidates in order (sonames searched on the
//     library path, or paths) with RTLD_NOW | RTLD_LOCAL and keeps the first
//     that loads. None loading: NotFound naming every candidate with dlerror's
//     reason for each.
//   - The handle is never closed: CUDA libraries keep threads and atexit
//     handlers that must outlive it, and dlopen counts references, so opening
//     the same library again costs nothing.
//   - Resolve fills a table of function pointers: each entry's symbol is
//     looked up; a missing optional one is left null; any missing required one
//     fails the whole call with FailedPrecondition naming all of them (the
//     table is then partly filled and must not be used).
//
// Thread safety: dlopen/dlsym are thread-safe; a DynamicLibrary is an
// immutable value.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(DynamicLibrary lib,
//                           DynamicLibrary::OpenFirst({"libfoo.so.1", "libfoo.so"}));
//   int (*foo_version)(int*) = nullptr;
//   TESSEL_RETURN_IF_ERROR(lib.Resolve({Required("foo_version", &foo_version)}));
#ifndef TESSEL_GPU_INTERNAL_DYNAMIC_LIBRARY_H_
#define TESSEL_GPU_INTERNAL_DYNAMIC_LIBRARY_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessel::gpu::internal {

// One entry of a symbol table: the symbol, and where its address goes (as
// the slot's own function pointer type: `assign` converts it).
struct SymbolSlot {
  const char* symbol;
  void* slot;                                 // a Fn*
  void (*assign)(void* slot, void* address);  // *static_cast<Fn*>(slot) = Fn(address)
  bool required;
};

namespace dynamic_library_internal {
template <typename Fn>
void Assign(void* slot, void* address) {
  // POSIX: a data pointer from dlsym converts to a function pointer.
  *static_cast<Fn*>(slot) = reinterpret_cast<Fn>(address);
}
}  // namespace dynamic_library_internal

template <typename Fn>
SymbolSlot Required(const char* symbol, Fn* slot) {
  return {symbol, slot, &dynamic_library_internal::Assign<Fn>, true};
}
template <typename Fn>
SymbolSlot Optional(const char* symbol, Fn* slot) {
  return {symbol, slot, &dynamic_library_internal::Assign<Fn>, false};
}

class DynamicLibrary {
 public:
  static absl::StatusOr<DynamicLibrary> OpenFirst(const std::vector<std::string>& candidates);

  // The candidate that loaded, as named to dlopen.
  const std::string& name() const { return name_; }

  // The address of `symbol`, or null when the library lacks it.
  void* Symbol(const char* symbol) const;

  absl::Status Resolve(std::initializer_list<SymbolSlot> table) const;

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  void* handle_;  // never closed (see above)
  std::string name_;
};

}  // namespace tessel::gpu::internal

#endif  // TESSEL_GPU_INTERNAL_DYNAMIC_LIBRARY_H_
