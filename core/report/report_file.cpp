// report_file.cpp: where a report goes. Files are replaced atomically and never written through a
// link: the content goes to a new file made with O_EXCL next to the target, then rename() puts it
// in place (rename replaces a symlink at the path instead of following it).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "report/report.h"

namespace tracepool::core {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool write_all(int fd, const std::string& content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
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

}  // namespace

status write_file_atomically(const std::string& path, const std::string& content) {
  if (path.empty()) return fail(status::invalid_argument, "write_report: path is empty");
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(temp.data());  // O_CREAT | O_EXCL: never opens an existing file or link
  if (fd < 0)
    return fail(status::invalid_argument, "write_report: cannot create %s: %s", temp.c_str(), std::strerror(errno));
  const bool ok = fchmod(fd, 0666 & ~current_umask()) == 0 && write_all(fd, content) && fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "write_report: cannot write %s: %s", temp.c_str(), std::strerror(saved));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    return fail(status::invalid_argument, "write_report: cannot rename %s to %s: %s", temp.c_str(), path.c_str(),
                std::strerror(e));
  }
  return status::ok;
}

status write_report_to(const report& r, const char* path, const char* format) {
  if (path == nullptr) return fail(status::invalid_argument, "write_report: path is NULL");
  const std::string where = path;
  const std::string fmt = format == nullptr ? "" : format;
  bool json;
  if (fmt == "json")
    json = true;
  else if (fmt == "text")
    json = false;
  else if (fmt.empty())
    json = ends_with(where, ".json");
  else
    return fail(status::invalid_argument, "write_report: format '%s' is not json or text", fmt.c_str());
  const std::string content = json ? to_json(r) : to_text(r);
  if (where == "stderr") {
    std::fwrite(content.data(), 1, content.size(), stderr);
    std::fflush(stderr);
    return status::ok;
  }
  return write_file_atomically(where, content);
}

}  // namespace tracepool::core
