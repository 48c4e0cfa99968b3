// Where reports may go: regular files and new paths are replaced atomically, descriptors, character
// devices and FIFOs are written straight (and stay what they are), anything else is refused and left
// alone; a process killed while writing its exit report leaves no temporary file and no half report.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "report_support.h"
#include "sanitizers.h"
#include "tracepool/tracepool.h"

extern char** environ;

namespace {

using tracepool::testing::json;
using tracepool::testing::read_file;
using tracepool::testing::scratch_dir;

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void put(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

std::string read_fd(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

mode_t file_type(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

struct ReportPath : tracepool::testing::HostInstanceTest {
  std::string error() const { return tracepool_last_error(); }
};

// The one format-by-extension rule (report_format_of), as the C API and the Python package ask it.
TEST(ReportFormat, TheFormatGivenElseTheExtension) {
  const struct { const char* path; const char* format; const char* expected; } table[] = {
      {"r.json", nullptr, "json"}, {"r.html", nullptr, "html"}, {"dir.json/r.htm", nullptr, "html"},
      {"r.txt", nullptr, "text"},  {"r", nullptr, "text"},        {nullptr, nullptr, "text"},
      {"r.json", "text", "text"},  {"stderr", "html", "html"},    {"r.JSON", nullptr, "text"}};
  for (const auto& row : table) {
    const char* chosen = nullptr;
    ASSERT_EQ(tracepool_report_format(row.path, row.format, &chosen), TRACEPOOL_OK) << tracepool_last_error();
    EXPECT_STREQ(chosen, row.expected) << (row.path ? row.path : "NULL");
  }
  const char* chosen = "unchanged";
  EXPECT_EQ(tracepool_report_format("r.json", "xml", &chosen), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(chosen, nullptr);
  EXPECT_NE(std::string(tracepool_last_error()).find("unknown report format 'xml'"), std::string::npos);
  EXPECT_EQ(tracepool_report_format("r.json", nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
}

TEST_F(ReportPath, DevFdNIsWrittenToThatDescriptorAndNothingIsReplaced) {
  const std::string target = dir + "/target";
  const int fd = ::open(target.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::string n = std::to_string(fd);
  ASSERT_EQ(tracepool_write_report(tp, ("/dev/fd/" + n).c_str(), "text"), TRACEPOOL_OK) << error();
  ASSERT_EQ(tracepool_write_report(tp, ("/proc/self/fd/" + n).c_str(), "json"), TRACEPOOL_OK) << error();
  ::close(fd);
  const std::string written = read_file(target);
  EXPECT_EQ(written.rfind("== tracepool report (demand)", 0), 0u) << written.substr(0, 200);
  EXPECT_NE(written.find("{\"schema\":\"tracepool.report/1\""), std::string::npos) << "the JSON follows the text";
  EXPECT_EQ(file_type("/dev/fd"), S_IFLNK);
  EXPECT_EQ(listing(dir), std::vector<std::string>{"target"});

  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_EQ(tracepool_write_report(tp, ("/dev/fd/" + std::to_string(pipe_fds[1])).c_str(), "json"), TRACEPOOL_OK)
      << error();
  ::close(pipe_fds[1]);
  const std::string piped = read_fd(pipe_fds[0]);
  ::close(pipe_fds[0]);
  EXPECT_FALSE(json::parse(piped, nullptr, false).is_discarded()) << piped.substr(0, 200);
}

// fd 2 (or 1) goes to a file while the report is written, and comes back.
std::string written_through(int fd, tracepool_t* tp, const char* path) {
  std::fflush(nullptr);
  const std::string file = scratch_dir() + "/captured";
  const int saved = ::dup(fd);
  const int to = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ::dup2(to, fd);
  ::close(to);
  const int rc = tracepool_write_report(tp, path, "text");
  const std::string message = tracepool_last_error();
  ::dup2(saved, fd);
  ::close(saved);
  EXPECT_EQ(rc, TRACEPOOL_OK) << path << ": " << message;
  return read_file(file);
}

TEST_F(ReportPath, DevStdoutAndDevStderrAreTheProcessDescriptors) {
  for (const auto& [fd, path] : {std::pair{2, "/dev/stderr"}, std::pair{1, "/dev/stdout"}, std::pair{2, "stderr"}}) {
    const std::string got = written_through(fd, tp, path);
    EXPECT_EQ(got.rfind("== tracepool report (demand)", 0), 0u) << path << ": " << got.substr(0, 200);
  }
  EXPECT_EQ(file_type("/dev/stderr"), S_IFLNK) << "the link is still a link";
  EXPECT_EQ(file_type("/dev/stdout"), S_IFLNK);
}

TEST_F(ReportPath, AClosedOrReadOnlyDescriptorIsAClearError) {
  const int closed = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(closed, 0);
  ::close(closed);
  const std::string path = "/dev/fd/" + std::to_string(closed);
  EXPECT_EQ(tracepool_write_report(tp, path.c_str(), "json"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(error().find(path + ": file descriptor " + std::to_string(closed) + " is not open"), std::string::npos)
      << error();

  const int read_only = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string ro_path = "/proc/self/fd/" + std::to_string(read_only);
  EXPECT_EQ(tracepool_write_report(tp, ro_path.c_str(), "json"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("not open for writing"), std::string::npos) << error();
  ::close(read_only);

  EXPECT_EQ(tracepool_write_report(tp, "/dev/fd/99999999999999999999", "json"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("99999999999999999999"), std::string::npos) << error();
}

TEST_F(ReportPath, AFifoWithAReaderGetsTheReportAndStaysAFifo) {
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A reader, and a writer of our own so that the reader sees no end of file before the report's.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  const int keep_open = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(keep_open, 0);
  ASSERT_EQ(::fcntl(reader, F_SETFL, 0), 0);
  std::string got;
  std::thread drain([&] { got = read_fd(reader); });
  const int rc = tracepool_write_report(tp, fifo.c_str(), "json");
  const std::string message = error();
  ::close(keep_open);
  drain.join();
  ::close(reader);
  ASSERT_EQ(rc, TRACEPOOL_OK) << message;
  EXPECT_FALSE(json::parse(got, nullptr, false).is_discarded()) << got.substr(0, 200);
  EXPECT_EQ(file_type(fifo), S_IFIFO);
  EXPECT_EQ(listing(dir), std::vector<std::string>{"fifo"});
}

TEST_F(ReportPath, AFifoWithoutAReaderIsAnErrorNotAHang) {
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // In a child process with an alarm: a write that blocks fails the test instead of stalling it.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);
    // The writer reports share, without a report: making one starts the symbolizer's thread, which
    // TSan forbids in a child of a process with threads (die_after_fork).
    const std::string text = "{}\n";
    const int rc = tracepool_write_file(fifo.c_str(), text.data(), text.size());
    const bool said = std::strstr(tracepool_last_error(), "no process is reading the FIFO") != nullptr;
    if (!said) std::fprintf(stderr, "child: rc %d: %s\n", rc, tracepool_last_error());
    ::_exit(rc == TRACEPOOL_ERR_INVALID_ARGUMENT && said ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus)) << "killed by signal " << WTERMSIG(wstatus) << " (SIGALRM: the write hung)";
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  EXPECT_EQ(file_type(fifo), S_IFIFO);
  EXPECT_EQ(listing(dir), std::vector<std::string>{"fifo"});
}

// A device node made here (root only): the same test as /dev/null's, on a node no one else uses.
TEST_F(ReportPath, ACharacterDeviceIsWrittenInPlace) {
  const std::string node = dir + "/null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod: " << std::strerror(errno);
  ASSERT_EQ(tracepool_write_report(tp, node.c_str(), "json"), TRACEPOOL_OK) << error();
  struct stat st {};
  ASSERT_EQ(::lstat(node.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  EXPECT_EQ(listing(dir), std::vector<std::string>{"null"});
}

TEST_F(ReportPath, DevNullIsWrittenAndStaysACharacterDevice) {
  struct stat before {
  }, after{};
  ASSERT_EQ(::lstat("/dev/null", &before), 0);
  const std::vector<std::string> dev_before = listing("/dev");
  ASSERT_EQ(tracepool_write_report(tp, "/dev/null", nullptr), TRACEPOOL_OK) << error();
  ASSERT_EQ(::lstat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(listing("/dev"), dev_before) << "no temporary file in /dev";
}

TEST_F(ReportPath, ADirectoryASocketAndASymlinkAreRefusedAndLeftAlone) {
  const std::string sub = dir + "/sub", sock = dir + "/sock", link = dir + "/r.json", victim = dir + "/victim";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  put(sub + "/inside", "inside");
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  put(victim, "keep me");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);

  const struct {
    std::string path;
    std::string said;
  } cases[] = {
      {sub, sub + " is a directory"},
      {sock, sock + " is a socket"},
      {link, link + " is a symbolic link (to " + victim +
                 "); tracepool writes reports only to regular files, "
                 "new paths, character devices, FIFOs, /dev/stdout, /dev/stderr and /dev/fd/N: remove the "
                 "link or give its target"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(tracepool_write_report(tp, c.path.c_str(), "json"), TRACEPOOL_ERR_INVALID_ARGUMENT) << c.path;
    EXPECT_EQ(error().rfind(c.said, 0), 0u) << error();  // the path first: no internal names
    EXPECT_EQ(error().find('\n'), std::string::npos) << "one line: " << error();
  }
  ::close(s);
  EXPECT_EQ(file_type(sub), S_IFDIR);
  EXPECT_EQ(listing(sub), std::vector<std::string>{"inside"});
  EXPECT_EQ(file_type(sock), S_IFSOCK);
  EXPECT_EQ(file_type(link), S_IFLNK);
  EXPECT_EQ(read_file(victim), "keep me");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"r.json", "sock", "sub", "victim"})) << "no temporary file";

  const std::string block = dir + "/block";
  if (::mknod(block.c_str(), S_IFBLK | 0600, makedev(7, 0)) == 0) {
    EXPECT_EQ(tracepool_write_report(tp, block.c_str(), "json"), TRACEPOOL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(error().find(block + " is a block device"), std::string::npos) << error();
    EXPECT_EQ(file_type(block), S_IFBLK);
  }
}

TEST_F(ReportPath, ARegularFileIsReplacedWithTheNewContent) {
  const std::string path = dir + "/r.json", other_name = dir + "/hard-link";
  put(path, "old report");
  ASSERT_EQ(::link(path.c_str(), other_name.c_str()), 0);
  ASSERT_EQ(tracepool_write_report(tp, path.c_str(), nullptr), TRACEPOOL_OK) << error();
  EXPECT_EQ(tracepool::testing::parse_report(path)["schema"], "tracepool.report/1");
  EXPECT_EQ(read_file(other_name), "old report") << "replaced by a new file, not rewritten in place";
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"hard-link", "r.json"}));

  const mode_t mask = ::umask(027);  // this test's thread is the only one making files now
  const std::string fresh = dir + "/new.txt";
  ASSERT_EQ(tracepool_write_report(tp, fresh.c_str(), nullptr), TRACEPOOL_OK) << error();
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::lstat(fresh.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "0666 less the umask";
}

// tracepool_write_file: any bytes, the same rules, no instance needed.
TEST(WriteFile, WritesBytesWhereReportsMayGoAndRefusesTheRest) {
  const std::string dir = scratch_dir(), path = dir + "/data.bin", link = dir + "/link", victim = dir + "/victim";
  const std::string bytes("a\0b\xff\n", 5);
  ASSERT_EQ(tracepool_write_file(path.c_str(), bytes.data(), bytes.size()), TRACEPOOL_OK) << tracepool_last_error();
  EXPECT_EQ(read_file(path), bytes);
  ASSERT_EQ(tracepool_write_file(path.c_str(), nullptr, 0), TRACEPOOL_OK) << tracepool_last_error();
  EXPECT_EQ(read_file(path), "") << "replaced by an empty file";
  EXPECT_EQ(tracepool_write_file(path.c_str(), nullptr, 3), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("data is NULL"), std::string::npos) << tracepool_last_error();
  EXPECT_EQ(tracepool_write_file(nullptr, "x", 1), TRACEPOOL_ERR_INVALID_ARGUMENT);

  put(victim, "keep me");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  EXPECT_EQ(tracepool_write_file(link.c_str(), "x", 1), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error())
                .rfind(link + " is a symbolic link (to " + victim +
                      "); tracepool writes files only to regular files"),
            std::string::npos)
      << tracepool_last_error();
  EXPECT_EQ(read_file(victim), "keep me");

  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(tracepool_write_file(("/dev/fd/" + std::to_string(p[1])).c_str(), bytes.data(), bytes.size()), TRACEPOOL_OK)
      << tracepool_last_error();
  ::close(p[1]);
  EXPECT_EQ(read_fd(p[0]), bytes);
  ::close(p[0]);
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"data.bin", "link", "victim"}));
}

// A reader that goes away makes the write fail; it does not kill the process with SIGPIPE.
TEST(WriteFile, AReaderThatLeftIsAnErrorNotASignal) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[0]);
  struct sigaction old {
  }, dfl{};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);  // as in a C program: SIGPIPE would end it
  const int rc = tracepool_write_file(("/dev/fd/" + std::to_string(p[1])).c_str(), "x", 1);
  const std::string message = tracepool_last_error();
  ::sigaction(SIGPIPE, &old, nullptr);
  ::close(p[1]);
  EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("Broken pipe"), std::string::npos) << message;
  sigset_t pending;
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_EQ(::sigismember(&pending, SIGPIPE), 0) << "the signal of that write was consumed";
}

// ---- A process killed while it writes its exit report ----------------------------------------------

// A sanitized Debug child takes ~100x as long to build the report (48 s for 6000 sites): fewer
// sites and fewer kill moments keep the suite's time in bounds, and the invariants are the same.
constexpr bool sanitized = tracepool::testing::sanitized_build;
constexpr long big_report_sites = sanitized ? 600 : 6000;
const std::vector<int> kill_moments = sanitized ? std::vector<int>{-1, 0, 5} : std::vector<int>{-1, 0, -1, 1, 5, 20, 80};

// The exit-report child leaking big_report_sites sites, stdout to a pipe (*out_fd).
pid_t spawn_big_child(const std::string& report, int* out_fd) {
  return tracepool::testing::spawn_exit_child({"TRACEPOOL_CONF=backend:host", "TRACEPOOL_REPORT=" + report,
                                               "TRACEPOOL_CHILD_SITES=" + std::to_string(big_report_sites)},
                                              out_fd);
}

// Whether `pid` has a file under `dir` open (the report being written, named or not).
bool has_file_open_in(pid_t pid, const std::string& dir) {
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  for (const std::string& name : listing(fds)) {
    char target[4096];
    const ssize_t n = ::readlink((fds + "/" + name).c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)).rfind(dir + "/", 0) == 0) return true;
  }
  return false;
}

// Kill moments: -1 as soon as the child has a file open in the report's directory (mid-write),
// otherwise that many milliseconds after it said it was exiting. Where each kill lands varies from run
// to run; what the test asserts holds wherever it lands.
TEST(ExitReport, AKillDuringTheWriteLeavesNoTemporaryFileAndNoHalfReport) {
  const std::string root = scratch_dir();
  {
    const std::string whole = root + "/whole.json";
    int out = -1;
    const pid_t pid = spawn_big_child(whole, &out);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(read_fd(out), "exiting\n");
    ::close(out);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    ASSERT_EQ(tracepool::testing::parse_report(whole)["leaks"].size(), size_t{big_report_sites + 1});
  }
  int round = 0;
  for (const int sig : {SIGKILL, SIGTERM})
    for (const int moment : kill_moments) {
      const std::string dir = root + "/" + std::to_string(round++);
      ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
      const std::string path = dir + "/report.json";
      int out = -1;
      const pid_t pid = spawn_big_child(path, &out);
      ASSERT_GT(pid, 0);
      char said[8];
      ASSERT_EQ(::read(out, said, sizeof said), 8);
      if (moment < 0) {
        int wstatus = 0;
        while (!has_file_open_in(pid, dir) && ::waitpid(pid, &wstatus, WNOHANG) == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(moment));
      }
      ::kill(pid, sig);
      ::waitpid(pid, nullptr, 0);
      ::close(out);
      const std::vector<std::string> left = listing(dir);
      const std::string where = "signal " + std::to_string(sig) + ", moment " + std::to_string(moment);
      EXPECT_TRUE(left.empty() || left == std::vector<std::string>{"report.json"})
          << where << ": left " << ::testing::PrintToString(left);
      if (!left.empty() && left[0] == "report.json") {
        const json r = json::parse(read_file(path), nullptr, false);
        ASSERT_FALSE(r.is_discarded()) << where << ": half a report at the path";
        EXPECT_EQ(r["leaks"].size(), size_t{big_report_sites + 1}) << where;
      }
    }
}

}  // namespace
