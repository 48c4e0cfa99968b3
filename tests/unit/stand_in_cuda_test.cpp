// The stand-in driver (tests/support/stand_in_cuda.c), for testing what meets the CUDA driver on machines
// without a GPU (issue 34): programs reach it at link time and through dlopen + cuGetProcAddress_v2, as
// the CUDA runtime does, and tracepool's CUDA backend on a driver lacking most entry points refuses with
// one clear line instead of failing later.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace {

// Runs `argv` with LD_LIBRARY_PATH naming the stand-in's folder; its stdout into *out, its exit status back.
int run(const std::vector<std::string>& argv, std::string* out) {
  std::vector<std::string> env = {std::string("LD_LIBRARY_PATH=") + TRACEPOOL_STAND_IN_CUDA_DIR};
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string(*e).rfind("LD_LIBRARY_PATH=", 0) != 0 && std::string(*e).rfind("TRACEPOOL_", 0) != 0)
      env.push_back(*e);
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
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

TEST(StandInCuda, AProgramLinkedAgainstTheDriverReachesIt) {
  std::string out;
  ASSERT_EQ(run({TRACEPOOL_STAND_IN_LINKED}, &out), 0) << out;
  EXPECT_NE(out.find("linked: allocated 5242880 bytes"), std::string::npos) << out;
}

TEST(StandInCuda, ARuntimeReachesItThroughGetProcAddress) {
  std::string out;
  ASSERT_EQ(run({TRACEPOOL_STAND_IN_CLIENT, "driver"}, &out), 0) << out;
  EXPECT_NE(out.find("cuMemCreate: NULL, status 1"), std::string::npos) << "a missing entry point, as the driver says it\n"
                                                                        << out;
  EXPECT_NE(out.find("allocated 3145728 bytes of 17179869184"), std::string::npos) << out;
  EXPECT_NE(out.find("after the free 0 bytes in use"), std::string::npos) << out;
}

// The stand-in has cuMemAlloc but not the primary context, events or streams the CUDA backend needs:
// tracepool says which entry point is missing, and its host backend still serves.
TEST(StandInCuda, TracepoolOnADriverWithoutItsEntryPointsSaysWhichIsMissing) {
  std::string out;
  ASSERT_EQ(run({TRACEPOOL_STAND_IN_CLIENT, "tracepool"}, &out), 0) << out;
  EXPECT_NE(out.find("backend:cuda: TRACEPOOL_ERR_UNAVAILABLE: backend unavailable: backend cuda: the driver has no "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("backend:host: serves"), std::string::npos) << out;
}

}  // namespace
