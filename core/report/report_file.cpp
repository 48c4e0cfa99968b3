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
//     an error, not a hang, and a reader that stops reading is waited for with a bound, as any
//     descriptor's (Note [Bounded writes] in base/bounded_write.h);
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
// from memory and renamed. A file that replaces another takes its mode, and its group where allowed: a
// report its owner made private (0600) stays private. The temporary name is the target's, shortened
// where need be, plus a suffix: whatever name the file system takes, its temporary name fits too.
//
// Note [When a report cannot be written]
// A report is made once, at the end of what may have been hours of work: a path that cannot be written
// must not lose it. Where tracepool can, the path is checked before the program starts
// (check_report_path: `run`'s options, and TRACEPOOL_REPORT when the default instance is made). Where
// writing still fails at the end (write_file_or_fallback), the report goes to a new file in the
// temporary folder ($TMPDIR, else /tmp), tracepool-report-<pid>-<random> with the path's extension,
// readable by its owner alone, and the caller says where; only where that fails too does the caller
// print the text report on stderr.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/bounded_write.h"
#include "base/excerpt.h"
#include "report/report.h"

namespace tracepool::core {

namespace {

// What messages call the things written ("reports" / "files"), and how long a write waits for a reader
// that takes nothing (Note [Bounded writes] in base/bounded_write.h).
struct writer {
  const char* things;
  int stall_ms = default_write_stall_ms;
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Everything to `fd`, which `path` names: ok, or a message naming `path` and what went wrong.
status write_all(int fd, const std::string& path, const void* data, size_t size, const writer& w) {
  size_t written = 0;
  switch (write_bounded(fd, data, size, w.stall_ms, &written)) {
    case write_outcome::written:
      return status::ok;
    case write_outcome::stalled:
      return fail(status::invalid_argument, "cannot write %s: its reader took nothing for %d s (%zu of %zu bytes "
                  "written); gave up", path.c_str(), (w.stall_ms + 999) / 1000, written, size);
    case write_outcome::interrupted:
      return fail(status::invalid_argument, "cannot write %s: interrupted by SIGINT while waiting for its reader (%zu "
                  "of %zu bytes written)", path.c_str(), written, size);
    case write_outcome::failed:
      break;
  }
  return fail(status::invalid_argument, "cannot write %s: %s", path.c_str(), std::strerror(errno));
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

// Whether `fd` (named by `path`) is open for writing.
status check_descriptor(int fd, const std::string& path) {
  if (fd == bad_descriptor_number)
    return fail(status::invalid_argument, "cannot write %s: not a file descriptor number", path.c_str());
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0)
    return fail(status::invalid_argument, "cannot write %s: file descriptor %d is not open", path.c_str(), fd);
  if ((flags & O_ACCMODE) == O_RDONLY)
    return fail(status::invalid_argument, "cannot write %s: file descriptor %d is not open for writing", path.c_str(),
                fd);
  return status::ok;
}

status write_descriptor(int fd, const std::string& path, const void* data, size_t size, const writer& w) {
  if (status s = check_descriptor(fd, path); s != status::ok) return s;
  // What the program printed through stdio comes first, as it would at any other moment.
  if (fd == 1) std::fflush(stdout);
  if (fd == 2) std::fflush(stderr);
  return write_all(fd, path, data, size, w);
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

// A FIFO is opened non-blocking, so that one without a reader is an error rather than a wait, and
// stays so: write_all waits for its reader with a bound (Note [Bounded writes]).
status write_in_place(const std::string& path, mode_t mode, const void* data, size_t size, const writer& w) {
  const bool fifo = S_ISFIFO(mode);
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
  if (fd < 0) {
    if (fifo && errno == ENXIO)
      return fail(status::invalid_argument, "cannot write %s: no process is reading the FIFO", path.c_str());
    return fail(status::invalid_argument, "cannot open %s: %s", path.c_str(), std::strerror(errno));
  }
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || !is_device_or_fifo(st.st_mode)) {
    ::close(fd);
    return fail(status::invalid_argument, "%s changed while it was being opened (now %s); nothing written",
                path.c_str(), kind_of(st.st_mode));
  }
  const status s = write_all(fd, path, data, size, w);
  ::close(fd);
  return s;
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
              "%s is %s; tracepool writes %s only to regular files, new paths, character devices, FIFOs, "
              "/dev/stdout, /dev/stderr and /dev/fd/N%s",
              path.c_str(), what.c_str(), w.things, advice);
}

// ---- Regular files: Note [Atomic write] -------------------------------------------------------------

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The longest file name `dir`'s file system takes.
size_t longest_name(const std::string& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : NAME_MAX;
}

// `path` with `suffix` added to its name, the name first shortened so that the whole fits the file
// system: whatever name fits, its temporary name fits too.
std::string beside(const std::string& path, const std::string& suffix) {
  const std::string dir = directory_of(path), name = name_of(path);
  const size_t room = longest_name(dir) > suffix.size() ? longest_name(dir) - suffix.size() : 1;
  return path.substr(0, path.size() - name.size()) + name.substr(0, std::min(name.size(), room)) + suffix;
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
  return beside(path, suffix);
}

// write_all, then flushed to disk: the content of a file about to be named.
status write_and_sync(int fd, const std::string& path, const void* data, size_t size, const writer& w) {
  if (status s = write_all(fd, path, data, size, w); s != status::ok) return s;
  if (::fsync(fd) != 0) return fail(status::invalid_argument, "cannot write %s: %s", path.c_str(), std::strerror(errno));
  return status::ok;
}

// A replaced report keeps the mode of the one it replaces (a 0600 report stays 0600) and its group where
// the process may set it (root keeps its owner too); a new file gets 0666 less the umask, as open() gives.
void take_mode(int fd, const struct ::stat* replaced) {
  if (replaced == nullptr) {
    (void)::fchmod(fd, 0666 & ~current_umask());
    return;
  }
  if (::fchown(fd, ::geteuid() == 0 ? replaced->st_uid : static_cast<uid_t>(-1), replaced->st_gid) != 0) {
    // not allowed (a group this process is not in): the file keeps the process's own group
  }
  (void)::fchmod(fd, replaced->st_mode & 0777);
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

status replace_through_mkstemp(const std::string& path, const struct ::stat* replaced, const void* data, size_t size,
                               const writer& w) {
  std::string temp = beside(path, ".tmp.XXXXXX");
  const int fd = mkstemp(temp.data());  // O_CREAT | O_EXCL: never opens an existing file or link
  if (fd < 0) return fail(status::invalid_argument, "cannot create %s: %s", temp.c_str(), std::strerror(errno));
  take_mode(fd, replaced);
  status s = write_and_sync(fd, temp, data, size, w);
  ::close(fd);
  if (s != status::ok) {
    ::unlink(temp.c_str());
    return s;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "cannot rename %s to %s: %s", temp.c_str(), path.c_str(), std::strerror(e));
  }
  return status::ok;
}

// Names the complete unnamed file at `fd` `path`, replacing what is there (`replaced`, if anything).
status name_unnamed(int fd, const std::string& path, const struct ::stat* replaced, const void* data, size_t size,
                    const writer& w) {
  if (replaced == nullptr) {
    if (link_unnamed(fd, path)) return status::ok;
    if (errno != EEXIST) return replace_through_mkstemp(path, replaced, data, size, w);
    // Someone made the path meanwhile: it is replaced like any existing one (rename follows no link).
  }
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::string temp = temporary_name(path);
    if (!link_unnamed(fd, temp)) {
      if (errno == EEXIST) continue;
      return replace_through_mkstemp(path, replaced, data, size, w);  // linkat refused (no /proc, no capability)
    }
    if (::rename(temp.c_str(), path.c_str()) == 0) return status::ok;
    const int e = errno;
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "cannot rename %s to %s: %s", temp.c_str(), path.c_str(), std::strerror(e));
  }
  return fail(status::invalid_argument, "cannot write %s: no free temporary name next to it", path.c_str());
}

// Whether `dir` takes new files from this process (its effective ids, as open() checks).
status check_folder(const std::string& path, const std::string& dir) {
  struct ::stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return fail(status::invalid_argument, "cannot write %s: %s: %s", path.c_str(), dir.c_str(),
                errno == ENOENT ? "no such folder" : std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return fail(status::invalid_argument, "cannot write %s: %s is not a folder", path.c_str(), dir.c_str());
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    return fail(status::invalid_argument, "cannot write %s: no permission to create files in %s", path.c_str(),
                dir.c_str());
  return status::ok;
}

status replace_atomically(const std::string& path, const struct ::stat* replaced, const void* data, size_t size,
                          const writer& w) {
  const std::string dir = directory_of(path);
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);  // less the umask, as O_CREAT
  if (fd < 0) {
    // EISDIR: a kernel without O_TMPFILE opened the directory itself; the others: a file system without it.
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)
      return replace_through_mkstemp(path, replaced, data, size, w);
    const int e = errno;
    if (status s = check_folder(path, dir); s != status::ok) return s;  // the folder's fault, said plainly
    return fail(status::invalid_argument, "cannot create %s: %s", path.c_str(), std::strerror(e));
  }
  if (replaced != nullptr) take_mode(fd, replaced);
  status s = write_and_sync(fd, path, data, size, w);
  if (s == status::ok) s = name_unnamed(fd, path, replaced, data, size, w);
  ::close(fd);
  return s;
}

// ---- Every path ---------------------------------------------------------------------------------------

status write_to(const std::string& where, const void* data, size_t size, const writer& w) {
  if (where.empty()) return fail(status::invalid_argument, "the path to write is empty");
  if (const int fd = descriptor_of(where); fd != not_a_descriptor) return write_descriptor(fd, where, data, size, w);
  struct ::stat st {};
  if (::lstat(where.c_str(), &st) != 0) {
    if (errno != ENOENT) return fail(status::invalid_argument, "cannot write %s: %s", where.c_str(), std::strerror(errno));
    if (ends_with(where, "/"))
      return fail(status::invalid_argument, "cannot write %s: it ends in '/': give a file name", where.c_str());
    return replace_atomically(where, nullptr, data, size, w);
  }
  if (S_ISREG(st.st_mode)) return replace_atomically(where, &st, data, size, w);
  if (is_device_or_fifo(st.st_mode)) return write_in_place(where, st.st_mode, data, size, w);
  return refuse(where, st.st_mode, w);
}

// write_to's checks, with nothing written: what would refuse or fail the write now.
status check_writable(const std::string& where, const writer& w) {
  if (where.empty()) return fail(status::invalid_argument, "the path to write is empty");
  if (const int fd = descriptor_of(where); fd != not_a_descriptor) return check_descriptor(fd, where);
  struct ::stat st {};
  if (::lstat(where.c_str(), &st) != 0) {
    if (errno != ENOENT) return fail(status::invalid_argument, "cannot write %s: %s", where.c_str(), std::strerror(errno));
    if (ends_with(where, "/"))
      return fail(status::invalid_argument, "cannot write %s: it ends in '/': give a file name", where.c_str());
    return check_folder(where, directory_of(where));  // a name too long failed lstat already
  }
  if (S_ISREG(st.st_mode)) return check_folder(where, directory_of(where));  // replaced: a new file there
  if (!is_device_or_fifo(st.st_mode)) return refuse(where, st.st_mode, w);
  if (::faccessat(AT_FDCWD, where.c_str(), W_OK, AT_EACCESS) != 0)
    return fail(status::invalid_argument, "cannot write %s: %s", where.c_str(), std::strerror(errno));
  return status::ok;  // a FIFO's reader may come later
}

// ---- Note [When a report cannot be written] -----------------------------------------------------------

// The extension of `path`'s name (".json"), where it has a short one of letters and digits; else ".txt".
std::string extension_of(const std::string& path) {
  const std::string name = name_of(path);
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || name.size() - dot > 9) return ".txt";
  for (size_t i = dot + 1; i < name.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return ".txt";
  return dot + 1 == name.size() ? ".txt" : name.substr(dot);
}

// A new file, its owner's alone, in the temporary folder: tracepool-report-<pid>-<random><extension>.
status write_to_temporary_folder(const std::string& path, const void* data, size_t size, std::string* where) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp";
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint32_t bits = 0;
    if (getrandom(&bits, sizeof bits, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof bits))
      bits = static_cast<uint32_t>(attempt) * 2654435761u ^ static_cast<uint32_t>(::time(nullptr));
    char name[64];
    std::snprintf(name, sizeof name, "/tracepool-report-%d-%06x", static_cast<int>(::getpid()), bits & 0xffffffu);
    const std::string candidate = dir + name + extension_of(path);
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return fail(status::invalid_argument, "cannot create %s: %s", candidate.c_str(), std::strerror(errno));
    status s = write_and_sync(fd, candidate, data, size, writer{"reports"});
    ::close(fd);
    if (s != status::ok) {
      ::unlink(candidate.c_str());
      return s;
    }
    *where = candidate;
    return status::ok;
  }
  return fail(status::invalid_argument, "cannot create a file in %s: every name tried was taken", dir.c_str());
}

}  // namespace

status write_file_to(const char* path, const void* data, size_t size, int stall_ms) {
  if (path == nullptr) return fail(status::invalid_argument, "the path to write is NULL");
  if (data == nullptr && size != 0)
    return fail(status::invalid_argument, "cannot write %s: data is NULL and size is %zu", path, size);
  return write_to(path, data, size, writer{"files", stall_ms});
}

status check_report_path(const char* path) {
  if (path == nullptr) return fail(status::invalid_argument, "the report path is NULL");
  return check_writable(expand_report_path(path, this_process()), writer{"reports"});  // Note [Ranks]
}

status write_file_or_fallback(const char* path, const void* data, size_t size, std::string* written_to,
                              std::string* why_not_path) {
  if (write_file_to(path, data, size) == status::ok) {
    *written_to = path;
    why_not_path->clear();
    return status::ok;
  }
  *why_not_path = last_error();
  return write_to_temporary_folder(path, data, size, written_to);
}

status report_format_of(const char* format, const char* path, report_format* out) {
  const std::string fmt = format == nullptr ? "" : format;
  if (fmt == "json") {
    *out = report_format::json;
  } else if (fmt == "text") {
    *out = report_format::text;
  } else if (fmt == "html") {
    *out = report_format::html;
  } else if (!fmt.empty()) {
    return fail(status::invalid_argument, "unknown report format '%s': expected one of json, text, html",
                excerpt(fmt).c_str());
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
  if (status s = report_format_of(format, path, &f); s != status::ok) return s;
  const std::string content = render(r, f, top_sites);
  const std::string where = expand_report_path(path, this_process());  // Note [Ranks]
  return write_to(where, content.data(), content.size(), writer{"reports"});
}

}  // namespace tracepool::core
