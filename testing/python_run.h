// Tests that check a file format against Python's own readers (numpy,
// torch): run a script under Debian's /usr/bin/python3, which sees Debian's
// python3-numpy and python3-torch, and ask whether it has a module.
//
// Example:
//   if (!HavePythonModule("numpy")) GTEST_SKIP() << kPython << " lacks numpy";
//   std::string out;
//   EXPECT_EQ(RunPython("import sys; print(sys.argv[1])", {"x"}, &out), 0) << out;
#ifndef TESSEL_TESTING_PYTHON_RUN_H_
#define TESSEL_TESTING_PYTHON_RUN_H_

#include <string>
#include <vector>

namespace tessel {

inline constexpr char kPython[] = "/usr/bin/python3";

// Writes `script` to $TEST_TMPDIR/interop.py (or /tmp) and runs it under
// kPython with `args`; returns its exit code (-1 if it could not run) and
// appends its stdout and stderr to *out.
int RunPython(const std::string& script, const std::vector<std::string>& args, std::string* out);
// kPython exists and imports `module`.
bool HavePythonModule(const std::string& module);

}  // namespace tessel

#endif  // TESSEL_TESTING_PYTHON_RUN_H_
