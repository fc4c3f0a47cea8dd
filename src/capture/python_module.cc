#include "capture/python_module.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "capture/embedded_python.h"
#include "common/temp_dir.h"

extern char** environ;

namespace vramscope::capture {

namespace {

std::string ThisProgram() {
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

}  // namespace

Result<int> RunEmbeddedModule(const std::string& python, const std::string& module,
                              const std::vector<std::string>& args) {
  TempDir dir("vramscope-python-");
  if (dir.path().empty()) {
    return InternalError(
        fmt::format("cannot make a temporary folder for Python: {}", std::strerror(errno)));
  }
  RETURN_IF_ERROR(WriteEmbeddedPythonPackage(dir.path()));
  std::vector<std::string> argv = {python, "-m", "vramscope." + module};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  // The child's environment, made before fork: ours with the package first on PYTHONPATH and
  // VRAMSCOPE_BIN naming this program.
  const char* old = std::getenv("PYTHONPATH");
  std::vector<std::string> env = {"PYTHONPATH=" + dir.path().string() +
                                      (old != nullptr && *old != '\0' ? ":" : "") +
                                      (old != nullptr ? old : ""),
                                  "VRAMSCOPE_BIN=" + ThisProgram()};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0 && std::strncmp(*e, "VRAMSCOPE_BIN=", 14) != 0) {
      env.emplace_back(*e);
    }
  }
  std::vector<char*> c_env;
  for (std::string& e : env) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  (void)std::fflush(stdout);
  (void)std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return InternalError(fmt::format("cannot start Python: {}", std::strerror(errno)));
  if (pid == 0) {
    execvpe(argv[0].c_str(), c_argv.data(), c_env.data());
    _exit(127);
  }
  // Ctrl-C reaches the child too (one process group): it ends itself, and we wait for it.
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return InternalError("lost the Python process");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return UsageError(
        fmt::format("--python {}: cannot be run; give a Python 3 with --python", python));
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace vramscope::capture
