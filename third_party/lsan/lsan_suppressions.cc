// LeakSanitizer's built-in suppressions for every binary of an asan build
// (tests and the processes they start alike, whatever their working folder).
//
// OpenSSL keeps each thread's error queue (ERR_STATE, 904 bytes, allocated by
// CRYPTO_zalloc) in a thread-local that its thread-exit handler frees. A gRPC
// thread that exits while the process does can skip that handler, and
// LeakSanitizer then reports the queue: CI saw it once in //rpc:tls_test, after
// all 13 cases had passed. It is OpenSSL's per-thread state, not a leak of
// ours, so leaks whose stack is inside libcrypto are not reported.
extern "C" const char* __lsan_default_suppressions() { return "leak:libcrypto.so\n"; }
