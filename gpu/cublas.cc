#include "gpu/cublas.h"

#include "absl/strings/str_cat.h"
#include "gpu/internal/dynamic_library.h"

namespace tessel::gpu {

using internal::DynamicLibrary;
using internal::Optional;
using internal::Required;

std::vector<std::string> CublasLibrary::DefaultLibraries() {
  return {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"};
}

absl::StatusOr<CublasLibrary> CublasLibrary::Load(const std::vector<std::string>& libraries) {
  absl::StatusOr<DynamicLibrary> lib = DynamicLibrary::OpenFirst(libraries);
  if (!lib.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLAS cannot be loaded (", lib.status().message(),
                     "); install cuBLAS 13 or add its directory to LD_LIBRARY_PATH"));
  }
  CublasLibrary c;
  c.library = lib->name();
  absl::Status s = lib->Resolve(
      {Required("cublasCreate_v2", &c.create), Required("cublasDestroy_v2", &c.destroy),
       Required("cublasSetStream_v2", &c.set_stream),
       Required("cublasSetMathMode", &c.set_math_mode), Required("cublasSgemm_v2", &c.sgemm),
       Optional("cublasGetStatusString", &c.status_string)});
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cuBLAS library that was loaded is not usable: ", s.message()));
  }
  return c;
}

std::string CublasLibrary::StatusString(CublasStatus status) const {
  const char* s = status_string != nullptr ? status_string(status) : nullptr;
  return s != nullptr ? absl::StrCat(s, " (", status, ")") : absl::StrCat("status ", status);
}

}  // namespace tessel::gpu
