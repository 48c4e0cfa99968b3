#include "report/process_info.h"

#include <unistd.h>

#include <algorithm>
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

bool names_a_descriptor_or_device(const std::string& path) {
  return path == "stderr" || starts_with(path, "/dev/") || starts_with(path, "/proc/self/fd/");
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
  std::string host = p.host.empty() ? "unknown-host" : p.host;
  replace_all(&host, "/", "_");
  replace_all(&out, "{rank}", std::to_string(p.rank < 0 ? 0 : p.rank));
  replace_all(&out, "{pid}", std::to_string(p.pid));
  replace_all(&out, "{host}", host);
  if (placed || p.world_size <= 1 || p.rank < 0 || names_a_descriptor_or_device(out)) return out;
  const size_t base = out.rfind('/') == std::string::npos ? 0 : out.rfind('/') + 1;
  size_t dot = out.rfind('.');
  if (dot == std::string::npos || dot <= base) dot = out.size();  // no extension (or a dotfile's name)
  return out.substr(0, dot) + "-rank" + std::to_string(p.rank) + out.substr(dot);
}

}  // namespace tracepool::core
