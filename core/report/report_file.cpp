// report_file.cpp: where a report, or any file tracepool writes for its user, goes.
//
// Note [Report paths]
// Atomic replacement (a new file renamed over the path) is right for regular files only: renamed
// over /dev/stderr it replaces the link and nothing reaches stderr, over a FIFO it replaces the FIFO,
// and over /dev/null, as root, it replaces the system's /dev/null with a regular file. So the path
// is classified first:
//   - "stderr", /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: written straight into that
//     descriptor, never opened (opening the link would reach a different file position, and nothing
//     at all for a socket);
//   - no such path, or a regular file: replaced atomically (Note [Atomic write]);
//   - a character device or a FIFO: opened without following a link, checked again on the open
//     descriptor, and written in place; a FIFO is opened non-blocking so that one without a reader is
//     an error, not a hang;
//   - anything else (directory, socket, block device, symbolic link) is refused and left alone. A
//     link planted at the path is neither followed nor replaced: the user is told to name its target.
//
// Note [Atomic write]
// The content goes to an unnamed file (O_TMPFILE) in the target's directory, is flushed to disk, and
// only then gets a name: the target itself if there is none there yet (linkat never replaces), else
// a random temporary name (linkat fails rather than reuse one: the guarantee of O_EXCL) renamed over
// the target. A process killed while writing leaves nothing, and a reader never sees half a report;
// only a kill between the linkat and the rename of an existing target leaves the temporary name.
// Where the file system has no O_TMPFILE, mkstemp makes the named temporary file, written at once
// from memory and renamed.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "report/report.h"

namespace tracepool::core {

namespace {

// How messages name the caller and what it writes.
struct writer {
  const char* function;  // "write_report"
  const char* things;    // "reports"
};
constexpr writer report_writer{"write_report", "reports"};
constexpr writer file_writer{"write_file", "files"};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Blocks SIGPIPE on this thread while it writes, so that a reader that goes away makes write() fail
// with EPIPE instead of killing the host. A SIGPIPE our write raised is consumed before the mask is
// restored; one that was pending before is left for the host.
class sigpipe_blocked {
 public:
  sigpipe_blocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~sigpipe_blocked() {
    if (!blocked_) return;
    const int saved = errno;
    if (broke_ && !was_pending_) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }
  void broke() { broke_ = true; }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false, blocked_ = false, broke_ = false;
};

// Writes everything, waiting on a descriptor the host made non-blocking. False with errno set.
bool write_all(int fd, const void* data, size_t size) {
  sigpipe_blocked quiet;
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, p + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd out{fd, POLLOUT, 0};
      if (::poll(&out, 1, -1) >= 0 || errno == EINTR) continue;
      return false;
    }
    if (n < 0 && errno == EPIPE) quiet.broke();
    if (n == 0) errno = EIO;
    return false;
  }
  return true;
}

// The process umask, read without changing it (umask() would, for every thread, for a moment).
mode_t current_umask() {
  mode_t mask = 022;
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned value = 0;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "Umask: %o", &value) == 1) mask = static_cast<mode_t>(value);
    std::fclose(f);
  }
  return mask;
}

// ---- Descriptors ------------------------------------------------------------------------------------

constexpr int not_a_descriptor = -2;
constexpr int bad_descriptor_number = -1;

// The descriptor a path names (Note [Report paths]), or not_a_descriptor.
int descriptor_of(const std::string& path) {
  if (path == "stderr" || path == "/dev/stderr") return 2;
  if (path == "/dev/stdout") return 1;
  size_t digits;
  if (starts_with(path, "/dev/fd/"))
    digits = std::strlen("/dev/fd/");
  else if (starts_with(path, "/proc/self/fd/"))
    digits = std::strlen("/proc/self/fd/");
  else
    return not_a_descriptor;
  if (digits == path.size()) return not_a_descriptor;
  long long fd = 0;
  for (size_t i = digits; i < path.size(); ++i) {
    if (path[i] < '0' || path[i] > '9') return not_a_descriptor;
    fd = fd * 10 + (path[i] - '0');
    if (fd > INT_MAX) return bad_descriptor_number;
  }
  return static_cast<int>(fd);
}

status write_descriptor(int fd, const std::string& path, const void* data, size_t size, const writer& w) {
  if (fd == bad_descriptor_number)
    return fail(status::invalid_argument, "%s: %s: not a file descriptor number", w.function, path.c_str());
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0)
    return fail(status::invalid_argument, "%s: %s: file descriptor %d is not open", w.function, path.c_str(), fd);
  if ((flags & O_ACCMODE) == O_RDONLY)
    return fail(status::invalid_argument, "%s: %s: file descriptor %d is not open for writing", w.function,
                path.c_str(), fd);
  // What the program printed through stdio comes first, as it would at any other moment.
  if (fd == 1) std::fflush(stdout);
  if (fd == 2) std::fflush(stderr);
  if (!write_all(fd, data, size))
    return fail(status::invalid_argument, "%s: cannot write to %s (file descriptor %d): %s", w.function, path.c_str(),
                fd, std::strerror(errno));
  return status::ok;
}

// ---- Devices and FIFOs ------------------------------------------------------------------------------

const char* kind_of(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFLNK:
      return "a symbolic link";
    case S_IFSOCK:
      return "a socket";
    case S_IFBLK:
      return "a block device";
    case S_IFCHR:
      return "a character device";
    case S_IFIFO:
      return "a FIFO";
    default:
      return "not a file tracepool knows";
  }
}

bool is_device_or_fifo(mode_t mode) { return S_ISCHR(mode) || S_ISFIFO(mode); }

status write_in_place(const std::string& path, mode_t mode, const void* data, size_t size, const writer& w) {
  const bool fifo = S_ISFIFO(mode);
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
  if (fd < 0) {
    if (fifo && errno == ENXIO)
      return fail(status::invalid_argument, "%s: cannot write %s: no process is reading the FIFO", w.function,
                  path.c_str());
    return fail(status::invalid_argument, "%s: cannot open %s: %s", w.function, path.c_str(), std::strerror(errno));
  }
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || !is_device_or_fifo(st.st_mode)) {
    ::close(fd);
    return fail(status::invalid_argument, "%s: %s changed while it was being opened (now %s); nothing written",
                w.function, path.c_str(), kind_of(st.st_mode));
  }
  // Non-blocking only to open: the write waits for the reader like any other writer's.
  if (fifo) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const bool ok = write_all(fd, data, size);
  const int saved = errno;
  ::close(fd);
  if (!ok)
    return fail(status::invalid_argument, "%s: cannot write %s: %s", w.function, path.c_str(), std::strerror(saved));
  return status::ok;
}

status refuse(const std::string& path, mode_t mode, const writer& w) {
  std::string what = kind_of(mode);
  const char* advice = "";
  if (S_ISLNK(mode)) {
    char target[PATH_MAX];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n >= 0) what += " (to " + std::string(target, static_cast<size_t>(n)) + ")";
    advice = ": remove the link or give its target";
  } else if (S_ISDIR(mode)) {
    advice = ": give a file name inside it";
  }
  return fail(status::invalid_argument,
              "%s: %s is %s; tracepool writes %s only to regular files, new paths, character devices, FIFOs, "
              "/dev/stdout, /dev/stderr and /dev/fd/N%s",
              w.function, path.c_str(), what.c_str(), w.things, advice);
}

// ---- Regular files: Note [Atomic write] -------------------------------------------------------------

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// `path` plus ".tmp." and 12 random hex digits: never a name someone could have prepared.
std::string temporary_name(const std::string& path) {
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof bits, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof bits)) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    static std::atomic<uint64_t> counter{0};
    bits = (static_cast<uint64_t>(now.tv_nsec) << 20) ^ static_cast<uint64_t>(now.tv_sec) ^
           (static_cast<uint64_t>(getpid()) << 40) ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL);
  }
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".tmp.%012llx", static_cast<unsigned long long>(bits & 0xffffffffffffULL));
  return path + suffix;
}

// Gives the unnamed file at `fd` the name `name`. False with errno set (EEXIST: the name is taken).
bool link_unnamed(int fd, const std::string& name) {
  char proc[48];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (::linkat(AT_FDCWD, proc, AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
  if (errno != ENOENT) return false;
  // No /proc: AT_EMPTY_PATH does the same, for a process with CAP_DAC_READ_SEARCH.
  return ::linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0;
}

status replace_through_mkstemp(const std::string& path, const void* data, size_t size, const writer& w) {
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(temp.data());  // O_CREAT | O_EXCL: never opens an existing file or link
  if (fd < 0)
    return fail(status::invalid_argument, "%s: cannot create %s: %s", w.function, temp.c_str(), std::strerror(errno));
  const bool ok = ::fchmod(fd, 0666 & ~current_umask()) == 0 && write_all(fd, data, size) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "%s: cannot write %s: %s", w.function, temp.c_str(), std::strerror(saved));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "%s: cannot rename %s to %s: %s", w.function, temp.c_str(), path.c_str(),
                std::strerror(e));
  }
  return status::ok;
}

// Names the complete unnamed file at `fd` `path`, replacing what is there.
status name_unnamed(int fd, const std::string& path, bool path_exists, const void* data, size_t size, const writer& w) {
  if (!path_exists) {
    if (link_unnamed(fd, path)) return status::ok;
    if (errno != EEXIST) return replace_through_mkstemp(path, data, size, w);
    // Someone made the path meanwhile: it is replaced like any existing one (rename follows no link).
  }
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::string temp = temporary_name(path);
    if (!link_unnamed(fd, temp)) {
      if (errno == EEXIST) continue;
      return replace_through_mkstemp(path, data, size, w);  // linkat refused (no /proc, no capability)
    }
    if (::rename(temp.c_str(), path.c_str()) == 0) return status::ok;
    const int e = errno;
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "%s: cannot rename %s to %s: %s", w.function, temp.c_str(), path.c_str(),
                std::strerror(e));
  }
  return fail(status::invalid_argument, "%s: no free temporary name next to %s", w.function, path.c_str());
}

status replace_atomically(const std::string& path, bool path_exists, const void* data, size_t size, const writer& w) {
  const std::string dir = directory_of(path);
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);  // less the umask, as O_CREAT
  if (fd < 0) {
    // EISDIR: a kernel without O_TMPFILE opened the directory itself; the others: a file system without it.
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) return replace_through_mkstemp(path, data, size, w);
    return fail(status::invalid_argument, "%s: cannot create %s: %s", w.function, path.c_str(), std::strerror(errno));
  }
  if (!write_all(fd, data, size) || ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return fail(status::invalid_argument, "%s: cannot write %s: %s", w.function, path.c_str(), std::strerror(e));
  }
  const status s = name_unnamed(fd, path, path_exists, data, size, w);
  ::close(fd);
  return s;
}

status write_to(const char* path, const void* data, size_t size, const writer& w) {
  if (path == nullptr) return fail(status::invalid_argument, "%s: path is NULL", w.function);
  const std::string where = path;
  if (where.empty()) return fail(status::invalid_argument, "%s: path is empty", w.function);
  if (const int fd = descriptor_of(where); fd != not_a_descriptor) return write_descriptor(fd, where, data, size, w);
  struct ::stat st {};
  if (::lstat(where.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return fail(status::invalid_argument, "%s: cannot write %s: %s", w.function, where.c_str(), std::strerror(errno));
    if (ends_with(where, "/"))
      return fail(status::invalid_argument, "%s: %s ends in '/': give a file name", w.function, where.c_str());
    return replace_atomically(where, false, data, size, w);
  }
  if (S_ISREG(st.st_mode)) return replace_atomically(where, true, data, size, w);
  if (is_device_or_fifo(st.st_mode)) return write_in_place(where, st.st_mode, data, size, w);
  return refuse(where, st.st_mode, w);
}

}  // namespace

status write_file_to(const char* path, const void* data, size_t size) {
  if (data == nullptr && size != 0)
    return fail(status::invalid_argument, "write_file: data is NULL and size is %zu", size);
  return write_to(path, data, size, file_writer);
}

status report_format_of(const char* format, const char* path, const char* function, report_format* out) {
  const std::string fmt = format == nullptr ? "" : format;
  if (fmt == "json") {
    *out = report_format::json;
  } else if (fmt == "text") {
    *out = report_format::text;
  } else if (fmt == "html") {
    *out = report_format::html;
  } else if (!fmt.empty()) {
    return fail(status::invalid_argument, "%s: format '%.32s' is not json, text or html", function, fmt.c_str());
  } else {
    const std::string p = path == nullptr ? "" : path;
    *out = ends_with(p, ".json") ? report_format::json
           : ends_with(p, ".html") || ends_with(p, ".htm") ? report_format::html
                                                            : report_format::text;
  }
  return status::ok;
}

std::string render(const report& r, report_format format, size_t top_sites) {
  switch (format) {
    case report_format::json:
      return to_json(r);
    case report_format::html:
      return to_html(r);
    case report_format::text:
      break;
  }
  return to_text(r, top_sites);
}

status write_report_to(const report& r, const char* path, const char* format, size_t top_sites) {
  if (path == nullptr) return fail(status::invalid_argument, "write_report: path is NULL");
  report_format f;
  if (status s = report_format_of(format, path, "write_report", &f); s != status::ok) return s;
  const std::string content = render(r, f, top_sites);
  const std::string where = expand_report_path(path, this_process());  // Note [Ranks]
  return write_to(where.c_str(), content.data(), content.size(), report_writer);
}

}  // namespace tracepool::core
