// ThreadSanitizer annotations for Debian's Abseil synchronization library.
//
// libabsl_synchronization.so is not built with -fsanitize=thread, so TSan
// cannot see that absl::Mutex and absl::Notification order memory: every
// access to data guarded by an absl::Mutex would be reported as a race (the
// false positives that kept --config=tsan from being clean). Abseil built
// with TSan annotates itself; Debian's is not, so this file does it from the
// outside, in tsan builds only (//third_party/absl_tsan, selected by
// --config=tsan): it defines the out-of-line Mutex and Notification entry
// points, which preempt the shared library's, calls the real ones through
// dlsym(RTLD_NEXT) and tells TSan about the happens-before edges they make:
//   release(mu) before every unlock (and before waiting in Await, which
//   unlocks inside), acquire(mu) after every lock (and after Await returns);
//   release(n) before Notify, acquire(n) after a successful wait.
// Only happens-before is modelled (no lock-order checking); our own code is
// fully instrumented, so real races in it are still reported.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

template <typename F>
F Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_shim: %s not found in the Abseil library: %s\n", mangled,
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

#define TESSEL_REAL(type, mangled)              \
  static const auto real = Real<type>(mangled); \
  (void)0

void Acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
void Release(const void* p) { __tsan_release(const_cast<void*>(p)); }

// Abseil evaluates a waiter's Condition under the mutex but on whichever
// thread holds it (the waiter, or another thread inside Unlock), so each
// evaluation is annotated as a critical section of its own. The waiter
// hands its Guarded (and the caller's Condition) to that thread through
// Abseil's uninstrumented waiter queue, so Wrap releases it and EvalGuarded
// acquires it. The wrapping Condition uses the void* constructor, which lives
// in the (uninstrumented) library, so TSan sees no unordered access to the
// Condition object itself.
struct Guarded {
  const absl::Mutex* mu;
  const absl::Condition* cond;
};
bool EvalGuarded(void* arg) {
  Acquire(arg);
  const Guarded* g = static_cast<const Guarded*>(arg);
  Acquire(g->mu);
  const bool ok = g->cond->Eval();
  Release(g->mu);
  return ok;
}
absl::Condition Wrap(Guarded* g) {
  Release(g);
  return absl::Condition(&EvalGuarded, static_cast<void*>(g));
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  TESSEL_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  Acquire(this);
}

void Mutex::Unlock() {
  TESSEL_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Release(this);
  real(this);
}

bool Mutex::TryLock() {
  TESSEL_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool ok = real(this);
  if (ok) Acquire(this);
  return ok;
}

void Mutex::ReaderLock() {
  TESSEL_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}

void Mutex::ReaderUnlock() {
  TESSEL_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}

bool Mutex::ReaderTryLock() {
  TESSEL_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool ok = real(this);
  if (ok) Acquire(this);
  return ok;
}

void Mutex::Await(const Condition& cond) {
  TESSEL_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Guarded g{this, &cond};
  Release(this);
  real(this, Wrap(&g));
  Acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  TESSEL_REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
              "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Guarded g{this, &cond};
  Release(this);
  const bool ok = real(this, Wrap(&g), timeout);
  Acquire(this);
  return ok;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  TESSEL_REAL(bool (*)(Mutex*, const Condition&, absl::Time),
              "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Guarded g{this, &cond};
  Release(this);
  const bool ok = real(this, Wrap(&g), deadline);
  Acquire(this);
  return ok;
}

void Mutex::LockWhen(const Condition& cond) {
  TESSEL_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Guarded g{this, &cond};
  real(this, Wrap(&g));
  Acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  TESSEL_REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
              "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Guarded g{this, &cond};
  const bool ok = real(this, Wrap(&g), timeout);
  Acquire(this);
  return ok;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  TESSEL_REAL(bool (*)(Mutex*, const Condition&, absl::Time),
              "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Guarded g{this, &cond};
  const bool ok = real(this, Wrap(&g), deadline);
  Acquire(this);
  return ok;
}

void CondVar::Wait(Mutex* mu) {
  TESSEL_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  TESSEL_REAL(bool (*)(CondVar*, Mutex*, absl::Duration),
              "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  TESSEL_REAL(bool (*)(CondVar*, Mutex*, absl::Time),
              "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  TESSEL_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  Release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  TESSEL_REAL(void (*)(const Notification*),
              "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  TESSEL_REAL(bool (*)(const Notification*, absl::Duration),
              "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool ok = real(this, timeout);
  if (ok) Acquire(this);
  return ok;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  TESSEL_REAL(bool (*)(const Notification*, absl::Time),
              "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool ok = real(this, deadline);
  if (ok) Acquire(this);
  return ok;
}

ABSL_NAMESPACE_END
}  // namespace absl

// Every tsan binary (tests and the processes they start): stop at the first
// report, so a race fails the test that found it.
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0";
}

// Reports raised by interceptors (memcpy, malloc, fd calls...) called from
// inside uninstrumented third-party libraries are ignored: TSan cannot see
// the atomics those libraries synchronize with (gRPC's queues and pollers,
// absl::Status and Cord reference counts, UCX's progress threads), so every
// such report is about a hand-over it could not observe. CI found them one
// library at a time (libupb, libabsl_status, libabsl_time, each seen only on
// CI's machine), so every uninstrumented library our binaries load is listed,
// including libstdc++ (gRPC's and protobuf's strings are copied there).
// Ignoring a library's interceptor calls keeps its synchronization (mutexes,
// thread creation and joins still order our accesses), and our own code is
// fully checked: its loads, stores and interceptor calls are all reported.
// Each entry must match exactly one loaded library (TSan dies otherwise), so
// every name ends in ".so"; an entry for a library that is not loaded is
// inert.
//
// race:epoll_ctl: the UCX transport registers UCX's event fd
// (ucp_worker_get_efd) in its epoll set and removes it before destroying the
// worker; UCX closes that fd inside libucs, whose calls are ignored above, so
// TSan never sees the close, and when another thread (the checkpointer's
// opendir) is then given the same fd number it reports a "race" on fd
// state between that thread and our epoll_ctl. Only reports with an
// epoll_ctl frame, i.e. fd-lifetime reports about our epoll registrations,
// are dropped (CI saw one in //worker:worker_test).
extern "C" const char* __tsan_default_suppressions() {
  return "race:epoll_ctl\n"
         "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgrpc++.so\n"
         "called_from_lib:libgpr.so\n"
         "called_from_lib:libupb.so\n"
         "called_from_lib:libaddress_sorting.so\n"
         "called_from_lib:libre2.so\n"
         "called_from_lib:libcares.so\n"
         "called_from_lib:libprotobuf.so\n"
         "called_from_lib:libssl.so\n"
         "called_from_lib:libcrypto.so\n"
         "called_from_lib:libz.so\n"
         "called_from_lib:libucs.so\n"
         "called_from_lib:libucp.so\n"
         "called_from_lib:libuct.so\n"
         "called_from_lib:libucm.so\n"
         "called_from_lib:libnuma.so\n"
         "called_from_lib:libxxhash.so\n"
         // cpp-httplib (/metrics) and yaml-cpp (tesselctl).
         "called_from_lib:libcpp-httplib.so\n"
         "called_from_lib:libyaml-cpp.so\n"
         "called_from_lib:libstdc++.so\n"
         "called_from_lib:libgcc_s.so\n"
         "called_from_lib:libabsl_bad_any_cast_impl.so\n"
         "called_from_lib:libabsl_bad_optional_access.so\n"
         "called_from_lib:libabsl_bad_variant_access.so\n"
         "called_from_lib:libabsl_base.so\n"
         "called_from_lib:libabsl_city.so\n"
         "called_from_lib:libabsl_civil_time.so\n"
         "called_from_lib:libabsl_cord.so\n"
         "called_from_lib:libabsl_cord_internal.so\n"
         "called_from_lib:libabsl_cordz_functions.so\n"
         "called_from_lib:libabsl_cordz_handle.so\n"
         "called_from_lib:libabsl_cordz_info.so\n"
         "called_from_lib:libabsl_cordz_sample_token.so\n"
         "called_from_lib:libabsl_debugging_internal.so\n"
         "called_from_lib:libabsl_demangle_internal.so\n"
         "called_from_lib:libabsl_examine_stack.so\n"
         "called_from_lib:libabsl_exponential_biased.so\n"
         "called_from_lib:libabsl_failure_signal_handler.so\n"
         "called_from_lib:libabsl_flags_commandlineflag.so\n"
         "called_from_lib:libabsl_flags_commandlineflag_internal.so\n"
         "called_from_lib:libabsl_flags_config.so\n"
         "called_from_lib:libabsl_flags_internal.so\n"
         "called_from_lib:libabsl_flags_marshalling.so\n"
         "called_from_lib:libabsl_flags_parse.so\n"
         "called_from_lib:libabsl_flags_private_handle_accessor.so\n"
         "called_from_lib:libabsl_flags_program_name.so\n"
         "called_from_lib:libabsl_flags_reflection.so\n"
         "called_from_lib:libabsl_flags_usage.so\n"
         "called_from_lib:libabsl_flags_usage_internal.so\n"
         "called_from_lib:libabsl_graphcycles_internal.so\n"
         "called_from_lib:libabsl_hash.so\n"
         "called_from_lib:libabsl_hashtablez_sampler.so\n"
         "called_from_lib:libabsl_int128.so\n"
         "called_from_lib:libabsl_leak_check.so\n"
         "called_from_lib:libabsl_log_severity.so\n"
         "called_from_lib:libabsl_low_level_hash.so\n"
         "called_from_lib:libabsl_malloc_internal.so\n"
         "called_from_lib:libabsl_periodic_sampler.so\n"
         "called_from_lib:libabsl_random_distributions.so\n"
         "called_from_lib:libabsl_random_internal_distribution_test_util.so\n"
         "called_from_lib:libabsl_random_internal_platform.so\n"
         "called_from_lib:libabsl_random_internal_pool_urbg.so\n"
         "called_from_lib:libabsl_random_internal_randen.so\n"
         "called_from_lib:libabsl_random_internal_randen_hwaes.so\n"
         "called_from_lib:libabsl_random_internal_randen_hwaes_impl.so\n"
         "called_from_lib:libabsl_random_internal_randen_slow.so\n"
         "called_from_lib:libabsl_random_internal_seed_material.so\n"
         "called_from_lib:libabsl_random_seed_gen_exception.so\n"
         "called_from_lib:libabsl_random_seed_sequences.so\n"
         "called_from_lib:libabsl_raw_hash_set.so\n"
         "called_from_lib:libabsl_raw_logging_internal.so\n"
         "called_from_lib:libabsl_scoped_set_env.so\n"
         "called_from_lib:libabsl_spinlock_wait.so\n"
         "called_from_lib:libabsl_stacktrace.so\n"
         "called_from_lib:libabsl_status.so\n"
         "called_from_lib:libabsl_statusor.so\n"
         "called_from_lib:libabsl_str_format_internal.so\n"
         "called_from_lib:libabsl_strerror.so\n"
         "called_from_lib:libabsl_strings.so\n"
         "called_from_lib:libabsl_strings_internal.so\n"
         "called_from_lib:libabsl_symbolize.so\n"
         "called_from_lib:libabsl_synchronization.so\n"
         "called_from_lib:libabsl_throw_delegate.so\n"
         "called_from_lib:libabsl_time.so\n"
         "called_from_lib:libabsl_time_zone.so\n"
         // absl::Status drops its last reference in the uninstrumented
         // library: TSan sees the delete but not the atomic refcount that
         // orders it after every other holder's use.
         "race:absl::*::Status::UnrefNonInlined\n"
         // gRPC's callback API hands its tag to a completion thread through
         // the uninstrumented completion queue.
         "race:grpc::internal::CallbackWithStatusTag::Run\n"
         // Likewise a server interceptor (rpc/grpc_metrics.cc): gRPC reads it
         // on the thread that runs the callback API's tag, and deletes it
         // with the call's ServerContext on another, ordered by that queue.
         "race:grpc::experimental::ServerRpcInfo::RunInterceptor\n"
         // ... and the CallOpSet of a callback-API call (the default health
         // service) that runs interceptors after its tag moves threads.
         "race:grpc::internal::CallbackWithSuccessTag::Run\n"
         // ... reached through StaticRun when the completion thread runs the
         // tag inline: CallOpSet::FinalizeResult written on one completion
         // thread, read on the next (seen in //server:shard_server_test).
         "race:grpc::internal::CallbackWithSuccessTag::StaticRun\n"
         // The interceptor's batch methods, built on one gRPC thread and
         // handed to the interceptor on another through the same queue.
         "race:grpc::internal::InterceptorBatchMethodsImpl\n"
         // gRPC reads the creation time of an error status (a Cord another
         // gRPC thread wrote) with absl::ParseTime, inside its own
         // uninstrumented hand-over; Tessel never calls ParseTime.
         "race:absl::*::ParseTime\n"
         // libucs unlocks its global mutexes from its ELF destructor at exit
         // and from its fork handlers, on threads TSan did not see lock them.
         "mutex:_dl_call_fini\n"
         "mutex:__run_prefork_handlers\n"
         "mutex:__run_postfork_handlers\n";
}
