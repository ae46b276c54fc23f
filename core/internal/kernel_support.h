// What the vectorised loops of core/optimizer.cc and core/reduce.cc share:
// the target_clones attribute and the abort on a programmer error.
//
// Every hot loop of those files is a plain loop that GCC vectorises on its
// own (the files are built with -O3 -fno-math-errno -ffp-contract=off),
// compiled twice through target_clones and picked at load time by an ifunc
// resolver. With contraction off, both clones and the scalar remainder loops
// perform the same IEEE operations in the same order, so results depend
// neither on the CPU, nor on n, nor on alignment.
//
// Private to //core (the optimizer and reduce targets).
//
// Example:
//   TESSEL_VECTOR_CLONES void Scale(float* __restrict x, float a, size_t n) {
//     for (size_t i = 0; i < n; ++i) x[i] = x[i] * a;
//   }
//   if (w < 1) internal::KernelFatal("ReduceSum: w must be >= 1");
#ifndef TESSEL_CORE_INTERNAL_KERNEL_SUPPORT_H_
#define TESSEL_CORE_INTERNAL_KERNEL_SUPPORT_H_

#include <cstdio>
#include <cstdlib>

// ThreadSanitizer cannot run ifunc resolvers (they run before its runtime is
// up), so tsan builds keep the default clone only.
#if defined(__SANITIZE_THREAD__)
#define TESSEL_VECTOR_CLONES
#else
#define TESSEL_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif

namespace tessel::internal {

// A kernel called against its contract (step < 1, w < 1): the caller's bug,
// not an input error, so it aborts with `what` on stderr.
[[noreturn]] inline void KernelFatal(const char* what) {
  std::fprintf(stderr, "tessel/core/optimizer: %s\n", what);
  std::abort();
}

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_KERNEL_SUPPORT_H_
