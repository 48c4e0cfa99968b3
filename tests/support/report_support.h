// report_support.h: reports written through the C API and read back as JSON or rendered, for the report tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tracepool/tracepool.h"

// Keeps the compiler from turning a call into a tail jump, which would drop its frame from the stacks
// that reports show.
#define KEEP_FRAME() asm volatile("" ::: "memory")

namespace tracepool::testing {

using json = nlohmann::json;

// The scratch directories of the running test: removed unless it fails (then kept for a look).
inline std::vector<std::string>& scratch_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

class scratch_cleaner : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result() != nullptr && !info.result()->Failed())  // passed or skipped
      for (const std::string& dir : scratch_dirs()) (void)std::system(("rm -rf '" + dir + "'").c_str());
    scratch_dirs().clear();
  }
};

// Registered once per test binary, before main runs the tests.
inline const bool scratch_cleaner_registered =
    (::testing::UnitTest::GetInstance()->listeners().Append(new scratch_cleaner), true);

// A fresh directory under the test temp dir, named after the running test; removed unless the test fails.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  const std::string dir = ::testing::TempDir() + "tracepool_" + name + "_" + std::to_string(getpid());
  const std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  scratch_dirs().push_back(dir);
  return dir;
}

// A host-backend instance (every invariant checked) and a scratch directory, for the file tests.
struct HostInstanceTest : ::testing::Test {
  tracepool_t* tp = nullptr;
  std::string dir;
  void SetUp() override {
    ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK);
    dir = scratch_dir();
  }
  void TearDown() override { tracepool_destroy(tp); }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline json parse_report(const std::string& path) {
  const std::string text = read_file(path);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << text.substr(0, 400);
  return j;
}

inline json report_of(tracepool_t* tp) {
  const std::string path = scratch_dir() + "/report.json";
  EXPECT_EQ(tracepool_write_report(tp, path.c_str(), "json"), TRACEPOOL_OK) << tracepool_last_error();
  return parse_report(path);
}

inline tracepool_report_options_t report_options(const char* format, int top, const char* reason, const char* name) {
  tracepool_report_options_t o{};
  o.size = sizeof o;
  o.format = format;
  o.top = top;
  o.reason = reason;
  o.name = name;
  return o;
}

// The report now as a string (tracepool_report_string_with), "" if it fails.
inline std::string report_string(tracepool_t* tp, const char* format, const char* reason = nullptr, int top = 0) {
  const tracepool_report_options_t o = report_options(format, top, reason, nullptr);
  char* out = nullptr;
  EXPECT_EQ(tracepool_report_string_with(tp, &o, &out), TRACEPOOL_OK) << tracepool_last_error();
  std::string text = out != nullptr ? out : "";
  tracepool_string_free(out);
  return text;
}

// A saved report rendered by tracepool_render_report; its message when refused (status in *rc).
inline std::string render(const std::string& json_text, const char* format = nullptr, int top = 0, int* rc = nullptr,
                          const char* name = nullptr) {
  const tracepool_report_options_t o = report_options(format, top, nullptr, name);
  char* out = nullptr;
  const int status = tracepool_render_report(json_text.data(), json_text.size(), &o, &out);
  if (rc != nullptr) *rc = status;
  std::string text = out != nullptr ? out : tracepool_last_error();
  tracepool_string_free(out);
  return text;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The entry of `section` ("leaks", "cached") whose innermost frame is `function` (and has `tags`).
inline json entry_for(const json& report, const char* section, const std::string& function,
                      const json& tags = json::array()) {
  for (const json& e : report[section]) {
    if (e["frames"].empty() || e["tags"] != tags) continue;
    if (e["frames"][0]["function"].get<std::string>().find(function) != std::string::npos) return e;
  }
  return json();
}

inline bool mentions(const json& entries, const std::string& function) {
  for (const json& e : entries)
    for (const json& f : e["frames"])
      if (f["function"].get<std::string>().find(function) != std::string::npos) return true;
  return false;
}

#ifdef TRACEPOOL_EXIT_CHILD
// Starts the exit-report child (tests/support/exit_report_child.c) with `env` as its whole environment and
// its stdout to a new pipe, whose reading end goes to *out_fd. Returns its pid, or -1.
inline pid_t spawn_exit_child(std::vector<std::string> env, int* out_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, p[1], 1);
  char* argv[] = {const_cast<char*>(TRACEPOOL_EXIT_CHILD), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, TRACEPOOL_EXIT_CHILD, &actions, nullptr, argv, envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  ::close(p[1]);
  *out_fd = p[0];
  return pid;
}
#endif

}  // namespace tracepool::testing
