// child_process.h: runs a test program as a child process with an environment of the test's choosing, for
// tests of what happens in a process of its own (the stand-in driver, the interposer, reports at exit).
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace tracepool::testing {

// Runs `argv` with this process's environment less LD_LIBRARY_PATH, LD_PRELOAD and TRACEPOOL_*, plus `env`
// ("NAME=value" each). Its stdout and stderr together into *out; its exit status back (128 + signal, -1
// where it could not start). A sanitizer's runtime must not stop a child over the interposer coming first
// (LD_PRELOAD), nor over the blocks that the test programs keep on purpose, nor over a forked child of a
// process with threads writing its report (TSan's die_after_fork: the symbolizer starts a thread there); TSan
// reads tsan_fork.supp (TRACEPOOL_TSAN_SUPPRESSIONS), which says what it suppresses and why.
inline int run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env, std::string* out) {
  std::vector<std::string> all = env;
  all.push_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
  all.push_back("TSAN_OPTIONS=die_after_fork=0:suppressions=" TRACEPOOL_TSAN_SUPPRESSIONS);
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v(*e);
    if (v.rfind("LD_LIBRARY_PATH=", 0) != 0 && v.rfind("LD_PRELOAD=", 0) != 0 && v.rfind("TRACEPOOL_", 0) != 0 &&
        v.rfind("ASAN_OPTIONS=", 0) != 0 && v.rfind("TSAN_OPTIONS=", 0) != 0)
      all.push_back(v);
  }
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& e : all) envp.push_back(e.data());
  envp.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return -1;
  }
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out->append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tracepool::testing
