// Test helper: run a body in a forked child (strict-mode tests must, since a seccomp filter can
// never be removed and a violation kills the process) and collect its exit status and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

namespace rdmx::test {

struct ChildResult {
  int status = 0;
  std::string err;  // the child's stderr
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool skipped() const { return WIFEXITED(status) && WEXITSTATUS(status) == 77; }
  bool killed_by_sigsys() const { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS; }
  std::string status_text() const {
    return WIFEXITED(status)     ? "exit " + std::to_string(WEXITSTATUS(status))
           : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                 : "status " + std::to_string(status);
  }
  std::string describe() const { return status_text() + "; stderr:\n" + err; }
};

// A child leaves with _exit (or is killed by its filter), so an EAL it started never ran
// rte_eal_cleanup: its per-process runtime directory (rdmx-test-PID: the test EAL's unique file
// prefix, under /var/run/dpdk, or $XDG_RUNTIME_DIR/dpdk when not root) is removed here, by the
// parent.
inline void remove_runtime_dirs(pid_t child) {
  namespace fs = std::filesystem;
  std::string suffix(1, '-');
  suffix += std::to_string(child);
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  fs::path bases[2] = {fs::path("/var/run/dpdk"), fs::path(xdg ? xdg : "/tmp")};
  bases[1] /= "dpdk";
  for (const fs::path& base : bases) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(base, ec)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with("rdmx-test") && n.ends_with(suffix)) fs::remove_all(e.path(), ec);
    }
  }
}

// Runs body() in a child process; its return value is the exit code. The child's stderr is
// captured; with echo it is also printed to stdout so counts and rates appear in the test log.
inline ChildResult run_child(const std::function<int()>& body, bool echo = false) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    close(fds[1]);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // a SIGSYS death must not leave a core file
    int rc = body();
    std::fflush(nullptr);
    _exit(rc);
  }
  close(fds[1]);
  ChildResult r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) r.err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  EXPECT_EQ(waitpid(pid, &r.status, 0), pid);
  remove_runtime_dirs(pid);
  if (echo)
    std::fprintf(stdout, "--- child (%s), its stderr: ---\n%s", r.status_text().c_str(),
                 r.err.c_str());
  return r;
}

}  // namespace rdmx::test
