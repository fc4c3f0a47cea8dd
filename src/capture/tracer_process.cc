#include "capture/tracer_process.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>

#include "capture/embedded_python.h"
#include "common/temp_dir.h"

namespace vramscope::capture {

bool NeedsTracer(const std::string& model) {
  if (model.rfind("hf:", 0) == 0) return true;
  const size_t py = model.find(".py");
  return py != std::string::npos && (py + 3 == model.size() || model[py + 3] == ':');
}

TracerRun::~TracerRun() {
  if (pid_ > 0 && !exited_) {  // abandoned (another rank failed): stop it
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
  }
}

Result<std::unique_ptr<TracerRun>> StartTracer(const std::string& python,
                                               const std::vector<std::string>& args,
                                               const std::string& output) {
  auto run = std::unique_ptr<TracerRun>(new TracerRun());
  run->python_ = python;
  run->dir_ = std::make_unique<TempDir>("vramscope-tracer-");
  if (run->dir_->path().empty()) {
    return InternalError(
        fmt::format("cannot make a temporary folder for the tracer: {}", std::strerror(errno)));
  }
  RETURN_IF_ERROR(WriteEmbeddedPythonPackage(run->dir_->path()));
  run->errors_ = (run->dir_->path() / "stderr.txt").string();

  std::vector<std::string> argv = {python, "-m", "vramscope.tracer"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("-o");
  argv.push_back(output);
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  // What the child needs, made before fork (the child only redirects and execs).
  const std::string path = run->dir_->path().string();
  const char* old = std::getenv("PYTHONPATH");
  const std::string joined = old && *old ? path + ":" + old : path;
  const std::string& errors = run->errors_;
  // The child's environment: ours with the package on PYTHONPATH (execvpe: nothing to allocate
  // between fork and exec).
  std::vector<std::string> env_strings = {"PYTHONPATH=" + joined};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) env_strings.emplace_back(*e);
  }
  std::vector<char*> c_env;
  c_env.reserve(env_strings.size() + 1);
  for (std::string& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);

  (void)std::fflush(stdout);  // nothing buffered is written twice (by the child too)
  (void)std::fflush(stderr);
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
    execvpe(argv[0].c_str(), c_argv.data(), c_env.data());
    (void)std::fprintf(stderr, "exec: %s\n", std::strerror(errno));
    _exit(127);
  }
  run->pid_ = pid;
  return run;
}

bool TracerRun::Done() {
  if (exited_) return true;
  pid_t got = 0;
  while ((got = waitpid(pid_, &status_, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (got == pid_) exited_ = true;
  return exited_;
}

Status TracerRun::Wait() {
  while (!exited_) {
    if (waitpid(pid_, &status_, 0) == pid_)
      exited_ = true;
    else if (errno != EINTR)
      return InternalError("lost the tracer's process");
  }
  const int status = status_;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  // The tracer's last error line, which names what, where and what to do.
  std::ifstream in(errors_);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return UsageError(fmt::format(
        "--python {}: cannot be run; the tracer needs Python 3 with PyTorch (pip install torch, "
        "and transformers for hf: configs); give one with --python",
        python_));
  }
  if (last.find("No module named") != std::string::npos) {
    return InvalidInput(fmt::format(
        "the tracer: {} ({}); install it into that Python (pip install torch transformers) or "
        "give another with --python",
        last, python_));
  }
  const std::string prefix = "vramscope tracer: error: ";
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return InvalidInput(fmt::format("the tracer failed: {}", last.empty() ? "no message" : last));
}

Status RunTracer(const std::string& python, const std::vector<std::string>& args,
                 const std::string& output) {
  ASSIGN_OR_RETURN(std::unique_ptr<TracerRun> run, StartTracer(python, args, output));
  return run->Wait();
}

}  // namespace vramscope::capture
