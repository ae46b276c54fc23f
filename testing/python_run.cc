#include "testing/python_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessel {

int RunPython(const std::string& script, const std::vector<std::string>& args, std::string* out) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string script_path = absl::StrCat(dir ? dir : "/tmp", "/interop.py");
  {
    std::ofstream f(script_path, std::ios::binary | std::ios::trunc);
    f << script;
  }
  std::string cmd = absl::StrCat(kPython, " '", script_path, "'");
  for (const std::string& a : args) absl::StrAppend(&cmd, " '", a, "'");
  absl::StrAppend(&cmd, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool HavePythonModule(const std::string& module) {
  std::string out;
  return access(kPython, X_OK) == 0 && RunPython("import " + module + "\n", {}, &out) == 0;
}

}  // namespace tessel
