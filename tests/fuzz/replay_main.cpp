// replay_main.cpp: runs LLVMFuzzerTestOneInput over files without libFuzzer, so that ordinary and
// sanitizer builds (g++, ASan+UBSan, TSan) replay the seed corpus and the regressions.
//   tracepool_fuzz_replay [--repeat N] FILE_OR_DIR...
// Files of a directory run in name order; names ending in .md are documentation and skipped. Inputs
// with several threads are timing-dependent: --repeat runs every input N times.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void add_inputs(const std::string& path, std::vector<std::string>* out) {
  if (!is_directory(path)) {
    out->push_back(path);
    return;
  }
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || (name.size() > 3 && name.compare(name.size() - 3, 3, ".md") == 0)) continue;
    names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) out->push_back(path + "/" + n);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 1;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
      continue;
    }
    add_inputs(argv[i], &inputs);
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s [--repeat N] FILE_OR_DIR...: no input found\n", argv[0]);
    return 2;
  }
  for (const std::string& path : inputs) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay %s (%zu bytes)\n", path.c_str(), bytes.size());
    for (int r = 0; r < repeat; ++r)
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs, %d time(s) each: every check held\n", inputs.size(), repeat);
  return 0;
}
