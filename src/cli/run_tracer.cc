#include "cli/run_tracer.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>

#include "cli/embedded_python.h"
#include "common/temp_dir.h"

namespace vramscope::cli {

bool NeedsTracer(const std::string& model) {
  if (model.rfind("hf:", 0) == 0) return true;
  const size_t py = model.find(".py");
  return py != std::string::npos && (py + 3 == model.size() || model[py + 3] == ':');
}

Status RunTracer(const std::string& python, const std::vector<std::string>& args,
                 const std::string& output) {
  TempDir dir("vramscope-tracer-");
  if (dir.path().empty()) {
    return InternalError(
        fmt::format("cannot make a temporary folder for the tracer: {}", std::strerror(errno)));
  }
  RETURN_IF_ERROR(WriteEmbeddedPythonPackage(dir.path()));
  const std::string errors = (dir.path() / "stderr.txt").string();

  std::vector<std::string> argv = {python, "-m", "vramscope.tracer"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("-o");
  argv.push_back(output);
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0)
    return InternalError(fmt::format("cannot start the tracer: {}", std::strerror(errno)));
  if (pid == 0) {
    // The child: the tracer's progress goes to our stderr only through the file (one clear
    // error line is ours to print).
    // stdout too: ours may be JSON (--json) that the tracer's summary line would corrupt.
    FILE* err = std::freopen(errors.c_str(), "w", stderr);
    (void)err;
    if (dup2(fileno(stderr), fileno(stdout)) < 0) _exit(126);
    const std::string path = dir.path().string();
    const char* old = std::getenv("PYTHONPATH");
    const std::string joined = old && *old ? path + ":" + old : path;
    setenv("PYTHONPATH", joined.c_str(), 1);
    execvp(argv[0].c_str(), c_argv.data());
    std::fprintf(stderr, "exec: %s\n", std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  // The tracer's last error line, which names what, where and what to do.
  std::ifstream in(errors);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return UsageError(fmt::format(
        "--python {}: cannot be run; the tracer needs Python 3 with PyTorch (pip install torch, "
        "and transformers for hf: configs); give one with --python",
        python));
  }
  if (last.find("No module named") != std::string::npos) {
    return InvalidInput(fmt::format(
        "the tracer: {} ({}); install it into that Python (pip install torch transformers) or "
        "give another with --python",
        last, python));
  }
  const std::string prefix = "vramscope tracer: error: ";
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return InvalidInput(fmt::format("the tracer failed: {}", last.empty() ? "no message" : last));
}

}  // namespace vramscope::cli
