// Reports under hostile conditions (issue 31): a reader that stops reading is given up on (Note [Bounded
// writes]), a path is checked before anything is written, a report that cannot go to its path goes to
// the temporary folder (Note [When a report cannot be written]), and SIGTERM writes the exit report and
// still ends the process by the signal (Note [SIGTERM] in capi/exit_report.cpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "report/report.h"
#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

namespace core = tracepool::core;
using tracepool::status;
using tracepool::testing::read_file;
using tracepool::testing::scratch_dir;

constexpr size_t MiB = size_t{1} << 20;

std::string error() { return tracepool::last_error(); }

// ---- Note [Bounded writes] ---------------------------------------------------------------------------

TEST(BoundedWrite, AFifoWhoseReaderTakesNothingIsGivenUpOnAfterTheStallLimit) {
  const std::string fifo = scratch_dir() + "/report.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // held open, never read
  ASSERT_GE(reader, 0);
  const std::string data(MiB, 'x');
  EXPECT_EQ(core::write_file_to(fifo.c_str(), data.data(), data.size(), /*stall_ms=*/300), status::invalid_argument);
  ::close(reader);
  EXPECT_NE(error().find("cannot write " + fifo + ": its reader took nothing for 1 s"), std::string::npos) << error();
  EXPECT_NE(error().find(" of 1048576 bytes written); gave up"), std::string::npos) << error();
}

TEST(BoundedWrite, ABlockingPipeWhoseReaderTakesNothingIsGivenUpOnToo) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);  // blocking, as a program's stderr piped to a stopped reader
  const std::string path = "/dev/fd/" + std::to_string(p[1]), data(MiB, 'x');
  EXPECT_EQ(core::write_file_to(path.c_str(), data.data(), data.size(), 300), status::invalid_argument);
  EXPECT_NE(error().find("its reader took nothing for 1 s"), std::string::npos) << error();
  ::close(p[0]);
  ::close(p[1]);
}

TEST(BoundedWrite, ASlowReaderGetsEverything) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::string got;
  std::thread slow([&] {
    char buf[16384];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) {
      got.append(buf, static_cast<size_t>(n));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // far slower than the writer, never stalled
    }
  });
  std::string data(4 * MiB, 'x');
  for (size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>('a' + i / 4096 % 26);
  const std::string path = "/dev/fd/" + std::to_string(p[1]);
  EXPECT_EQ(core::write_file_to(path.c_str(), data.data(), data.size(), 5000), status::ok) << error();
  ::close(p[1]);
  slow.join();
  ::close(p[0]);
  EXPECT_TRUE(got == data) << got.size() << " bytes read";
}

// ---- Checked before anything is written --------------------------------------------------------------

TEST(ReportPathCheck, SaysWhatWouldFailAndWritesNothing) {
  const std::string dir = scratch_dir(), file = dir + "/old.json", sub = dir + "/sub", fifo = dir + "/fifo";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  for (const std::string& fine : {dir + "/new.json", file, fifo, std::string("stderr"), std::string("/dev/null")})
    EXPECT_EQ(core::check_report_path(fine.c_str()), status::ok) << fine << ": " << error();
  const struct {
    std::string path, said;
  } refused[] = {
      {dir + "/missing/r.json", "cannot write " + dir + "/missing/r.json: " + dir + "/missing: no such folder"},
      {file + "/r.json", "cannot write " + file + "/r.json: Not a directory"},
      {sub, sub + " is a directory"},
      {dir + "/" + std::string(300, 'r'), ": File name too long"},
      {"/dev/fd/987", "cannot write /dev/fd/987: file descriptor 987 is not open"},
      {dir + "/ends/", "it ends in '/': give a file name"},
  };
  for (const auto& r : refused) {
    EXPECT_EQ(core::check_report_path(r.path.c_str()), status::invalid_argument) << r.path;
    EXPECT_NE(error().find(r.said), std::string::npos) << r.path << ": " << error();
  }
  EXPECT_EQ(tracepool_check_report_path((dir + "/missing/r.json").c_str()), TRACEPOOL_ERR_INVALID_ARGUMENT);
  if (::geteuid() != 0) {  // root may write anywhere
    ASSERT_EQ(::chmod(sub.c_str(), 0555), 0);
    EXPECT_EQ(core::check_report_path((sub + "/r.json").c_str()), status::invalid_argument);
    EXPECT_NE(error().find("no permission to create files in " + sub), std::string::npos) << error();
  }
  struct stat st {};
  EXPECT_NE(::stat((dir + "/new.json").c_str(), &st), 0) << "a check writes nothing";
}

// ---- Note [When a report cannot be written] -----------------------------------------------------------

TEST(ReportFallback, WhatCannotGoToItsPathGoesToTheTemporaryFolderPrivately) {
  const std::string tmp = scratch_dir(), missing = scratch_dir() + "/gone/r.json";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  char* where = nullptr;
  ASSERT_EQ(tracepool_write_file_or_fallback(missing.c_str(), "{}", 2, &where), TRACEPOOL_OK) << tracepool_last_error();
  const std::string went = where;
  tracepool_string_free(where);
  EXPECT_NE(std::string(tracepool_last_error()).find("cannot write " + missing), std::string::npos)
      << "why not at the path: " << tracepool_last_error();
  const std::string prefix = tmp + "/tracepool-report-" + std::to_string(::getpid()) + "-";
  EXPECT_EQ(went.rfind(prefix, 0), 0u) << went;
  EXPECT_EQ(went.substr(went.size() - 5), ".json") << went;
  EXPECT_EQ(read_file(went), "{}");
  struct stat st {};
  ASSERT_EQ(::stat(went.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const std::string ok = tmp + "/fine.txt";  // a path that works is written, and said so
  ASSERT_EQ(tracepool_write_file_or_fallback(ok.c_str(), "x", 1, &where), TRACEPOOL_OK);
  EXPECT_EQ(std::string(where), ok);
  tracepool_string_free(where);

  ::setenv("TMPDIR", (tmp + "/no-such-dir").c_str(), 1);  // neither: an error, nothing written
  EXPECT_EQ(tracepool_write_file_or_fallback(missing.c_str(), "{}", 2, &where), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(where, nullptr);
  ::unsetenv("TMPDIR");
}

// ---- Note [SIGTERM] -----------------------------------------------------------------------------------

// The exit-report child, waiting (TRACEPOOL_CHILD_WAIT) after it leaked; SIGTERM once it says so.
int terminated_child(const std::string& report, const std::string& extra_env, std::string* said) {
  std::vector<std::string> env = {"TRACEPOOL_CONF=backend:host", "TRACEPOOL_REPORT=" + report, "TRACEPOOL_CHILD_WAIT=1"};
  if (!extra_env.empty()) env.push_back(extra_env);
  int out = -1;
  const pid_t pid = tracepool::testing::spawn_exit_child(env, &out);
  char buf[64] = {};
  const ssize_t n = pid > 0 ? ::read(out, buf, sizeof buf - 1) : 0;
  *said = std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  if (pid > 0) ::kill(pid, SIGTERM);
  int wstatus = 0;
  if (pid > 0) ::waitpid(pid, &wstatus, 0);
  ::close(out);
  return wstatus;
}

TEST(ExitReport, SigtermWritesItAndTheProcessStillEndsByTheSignal) {
  const std::string path = scratch_dir() + "/exit.json";
  std::string said;
  const int wstatus = terminated_child(path, "", &said);
  EXPECT_EQ(said, "waiting\n");
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGTERM) << "status " << wstatus;
  const auto report = tracepool::testing::parse_report(path);
  EXPECT_EQ(report["reason"], "exit");
  EXPECT_EQ(report["leaks"].size(), 1u) << "the child's 7 blocks of one site";
}

TEST(ExitReport, AProgramsOwnSigtermHandlerIsLeftAlone) {
  const std::string path = scratch_dir() + "/exit.json";
  std::string said;
  const int wstatus = terminated_child(path, "TRACEPOOL_CHILD_OWN_SIGTERM=1", &said);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 3) << "its handler exits 3; status " << wstatus;
  EXPECT_EQ(tracepool::testing::parse_report(path)["leaks"].size(), 1u) << "written at that exit";
}

}  // namespace
