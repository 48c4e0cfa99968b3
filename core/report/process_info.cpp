#include "report/process_info.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace tracepool::core {

namespace {

// The value of `name` if it is a non-negative decimal integer, else -1.
int64_t env_count(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text < '0' || *text > '9') return -1;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0) return -1;
  return v;
}

struct launcher_variables {
  const char* rank;
  const char* local_rank;
  const char* world_size;
};
constexpr launcher_variables launchers[] = {
    {"RANK", "LOCAL_RANK", "WORLD_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", nullptr, "PMI_SIZE"},
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"},
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Paths written in place (Note [Report paths] in report_file.cpp): descriptors, and character devices
// and FIFOs that exist. Anything else, a file under /dev/shm included, is a file of this rank's own.
bool written_in_place(const std::string& path) {
  if (path == "stderr" || path == "/dev/stdout" || path == "/dev/stderr" || starts_with(path, "/dev/fd/") ||
      starts_with(path, "/proc/self/fd/"))
    return true;
  struct ::stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

// A placeholder's value as one plain file-name component: letters, digits, '.', '-' and '_' (anything
// else becomes '_'), never "", "." or "..", at most 64 bytes.
std::string file_name_component(const std::string& value) {
  std::string out;
  for (char c : value.substr(0, 64))
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  if (out.find_first_not_of('.') == std::string::npos) out = "_" + out;  // "", "." and ".."
  return out;
}

void replace_all(std::string* s, const std::string& what, const std::string& with) {
  for (size_t at = s->find(what); at != std::string::npos; at = s->find(what, at + with.size()))
    s->replace(at, what.size(), with);
}

}  // namespace

process_summary this_process() {
  process_summary p;
  p.pid = static_cast<int64_t>(::getpid());
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) == 0) p.host = host;
  for (const launcher_variables& l : launchers) {
    const int64_t rank = env_count(l.rank);
    if (rank < 0) continue;
    p.rank = rank;
    p.local_rank = l.local_rank != nullptr ? env_count(l.local_rank) : -1;
    p.world_size = std::max<int64_t>(env_count(l.world_size), 0);
    break;
  }
  return p;
}

std::string expand_report_path(const std::string& path, const process_summary& p) {
  std::string out = path;
  const bool placed = out.find("{rank}") != std::string::npos || out.find("{pid}") != std::string::npos;
  replace_all(&out, "{rank}", file_name_component(std::to_string(p.rank < 0 ? 0 : p.rank)));
  replace_all(&out, "{pid}", file_name_component(std::to_string(p.pid)));
  replace_all(&out, "{host}", file_name_component(p.host.empty() ? "unknown-host" : p.host));
  if (placed || p.world_size <= 1 || p.rank < 0 || written_in_place(out)) return out;
  const size_t base = out.rfind('/') == std::string::npos ? 0 : out.rfind('/') + 1;
  size_t dot = out.rfind('.');
  if (dot == std::string::npos || dot <= base) dot = out.size();  // no extension (or a dotfile's name)
  return out.substr(0, dot) + "-rank" + std::to_string(p.rank) + out.substr(dot);
}

}  // namespace tracepool::core
