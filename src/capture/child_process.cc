#include "capture/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vramscope::capture {

namespace {

volatile sig_atomic_t g_child = 0;

// SIGTERM/SIGHUP sent to vramscope go on to the program, so that its bootstrap can still write
// what it captured; SIGINT from a terminal reaches the program directly (same process group), so
// vramscope itself ignores it while it waits, as system() does.
void ForwardSignal(int sig) {
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

}  // namespace

Result<ChildOutcome> RunChild(const std::vector<std::string>& command,
                              const std::vector<std::pair<std::string, std::string>>& env) {
  int report_pipe[2];
  if (pipe2(report_pipe, O_CLOEXEC) != 0) {
    return InternalError(fmt::format("cannot start the program: {}", std::strerror(errno)));
  }
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction forward {};
  forward.sa_handler = ForwardSignal;
  struct sigaction old_int {
  }, old_quit{}, old_term{}, old_hup{};
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  sigaction(SIGTERM, &forward, &old_term);
  sigaction(SIGHUP, &forward, &old_hup);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    close(report_pipe[0]);
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    execvp(argv[0], argv.data());
    const int err = errno;
    (void)!write(report_pipe[1], &err, sizeof(err));
    _exit(127);
  }
  close(report_pipe[1]);
  if (pid < 0) {
    close(report_pipe[0]);
    return InternalError(fmt::format("cannot start the program: {}", std::strerror(errno)));
  }
  g_child = pid;
  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = read(report_pipe[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  close(report_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    return InvalidInput(fmt::format(
        "cannot run '{}': {}{}", command.front(), std::strerror(exec_errno),
        exec_errno == ENOENT && command.front().find('/') == std::string::npos ? " (is it on PATH?)"
                                                                               : ""));
  }
  ChildOutcome out;
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
    out.description = fmt::format("exited with status {}", out.exit_code);
  } else if (WIFSIGNALED(status)) {
    out.exit_code = 128 + WTERMSIG(status);
    out.description =
        fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return out;
}

Result<BoundedOutcome> RunBounded(const std::vector<std::string>& command,
                                  std::chrono::milliseconds timeout, size_t max_output) {
  int pipes[3][2];  // stdout, stderr, exec's errno
  for (int i = 0; i < 3; ++i) {
    if (pipe2(pipes[i], O_CLOEXEC) != 0) {
      const int err = errno;
      for (int j = 0; j < i; ++j) close(pipes[j][0]), close(pipes[j][1]);
      return InternalError(fmt::format("cannot start '{}': {}", command.front(), strerror(err)));
    }
  }
  int(&out_pipe)[2] = pipes[0];
  int(&err_pipe)[2] = pipes[1];
  int(&report_pipe)[2] = pipes[2];
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    dup2(err_pipe[1], STDERR_FILENO);
    execvp(argv[0], argv.data());
    const int err = errno;
    (void)!write(report_pipe[1], &err, sizeof(err));
    _exit(127);
  }
  for (int fd : {out_pipe[1], err_pipe[1], report_pipe[1]}) close(fd);
  if (pid < 0) {
    for (int fd : {out_pipe[0], err_pipe[0], report_pipe[0]}) close(fd);
    return InternalError(fmt::format("cannot start '{}': {}", command.front(), strerror(errno)));
  }
  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = read(report_pipe[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  close(report_pipe[0]);

  BoundedOutcome out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&out.out, &out.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      out.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int ready = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        std::string& sink = *sinks[i];
        sink.append(buffer, std::min(static_cast<size_t>(n),
                                     max_output - std::min(max_output, sink.size())));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll skips negative descriptors
        --open_fds;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    return InvalidInput(fmt::format("cannot run '{}': {}", command.front(), strerror(exec_errno)));
  }
  out.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
  return out;
}

}  // namespace vramscope::capture
