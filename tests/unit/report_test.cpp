// Reports: written at exit by a separate process, atomically, refusing a planted symlink;
// the out-of-memory report; sampling estimates within their statistical bounds.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "report_support.h"
#include "sanitizers.h"
#include "tracepool/tracepool.h"

extern char** environ;

namespace {

using tracepool::testing::json;
using tracepool::testing::parse_report;
using tracepool::testing::read_file;
using tracepool::testing::report_of;
using tracepool::testing::scratch_dir;

// Runs the exit-report child with TRACEPOOL_REPORT=report; returns its exit status, stderr in *err.
int run_child(const std::string& report, std::string* err, const std::vector<std::string>& more_env = {}) {
  const std::string dir = scratch_dir();
  const std::string err_path = dir + "/child.stderr";
  std::vector<std::string> env = {"TRACEPOOL_CONF=backend:host", "TRACEPOOL_REPORT=" + report};
  env.insert(env.end(), more_env.begin(), more_env.end());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char* argv[] = {const_cast<char*>(TRACEPOOL_EXIT_CHILD), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, TRACEPOOL_EXIT_CHILD, &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  *err = read_file(err_path);
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

TEST(ExitReport, JsonIsWrittenByTheExitingProcess) {
  const std::string path = scratch_dir() + "/exit.json";
  std::string err;
  ASSERT_EQ(run_child(path, &err), 0) << err;
  const json r = parse_report(path);
  EXPECT_EQ(r["reason"], "exit");
  ASSERT_EQ(r["leaks"].size(), 1u) << r.dump(1);
  EXPECT_EQ(r["leaks"][0]["bytes"], 7 * 12345);
  EXPECT_EQ(r["leaks"][0]["blocks"], 7);
  EXPECT_NE(r["leaks"][0]["frames"][0]["function"].get<std::string>().find("child_leak"), std::string::npos);
  EXPECT_TRUE(tracepool::testing::ends_with(r["leaks"][0]["frames"][0]["file"], "exit_report_child.c"));
  EXPECT_EQ(r["marks"][0]["label"], "before exit");
  EXPECT_EQ(r["leaks"][0]["live_at_marks"], json({7 * 12345}));
}

// TRACEPOOL_REPORT under a launcher of two ranks: each rank's exit report goes to its own file
// (Note [Ranks]) and says whose it is.
TEST(ExitReport, EachRankWritesItsOwn) {
  const std::string dir = scratch_dir() + "_ranks";  // run_child empties scratch_dir() each time
  ASSERT_EQ(std::system(("rm -rf '" + dir + "' && mkdir '" + dir + "'").c_str()), 0);
  tracepool::testing::scratch_dirs().push_back(dir);
  for (const char* rank : {"0", "1"}) {
    std::string err;
    ASSERT_EQ(run_child(dir + "/exit.json", &err, {std::string("RANK=") + rank, "WORLD_SIZE=2"}), 0) << err;
  }
  EXPECT_TRUE(read_file(dir + "/exit.json").empty());
  for (int rank : {0, 1}) {
    const json r = parse_report(dir + "/exit-rank" + std::to_string(rank) + ".json");
    EXPECT_EQ(r["process"]["rank"], rank);
    EXPECT_EQ(r["process"]["world_size"], 2);
    ASSERT_EQ(r["leaks"].size(), 1u) << r.dump(1);
  }
}

TEST(ExitReport, TextGoesToAFileOrToStderr) {
  const std::string path = scratch_dir() + "/exit.txt";
  std::string err;
  ASSERT_EQ(run_child(path, &err), 0) << err;
  const std::string text = read_file(path);
  EXPECT_NE(text.find("Leaked: memory still allocated at exit"), std::string::npos) << text;
  EXPECT_NE(text.find("child_leak"), std::string::npos) << text;
  ASSERT_EQ(run_child("stderr", &err), 0) << err;
  EXPECT_NE(err.find("tracepool report (exit)"), std::string::npos) << err;
  EXPECT_NE(err.find("child_leak"), std::string::npos) << err;
}

TEST(ExitReport, AnUnwritablePathIsReportedNotFatal) {
  std::string err;
  EXPECT_EQ(run_child("/nonexistent-dir/x/report.json", &err), 0) << err;
  EXPECT_NE(err.find("TRACEPOOL_REPORT=/nonexistent-dir/x/report.json"), std::string::npos) << err;
}

// tracepool_write_exit_report writes the report when the host asks (CPython's exit skips atexit
// handlers after Ctrl-C); the atexit handler then writes nothing, so what the process did later is
// not in a second report.
// exit() from another thread while three more allocate and free: the report is written whole while
// they run, they go on through the static destructors, and the process exits cleanly.
TEST(ExitReport, ExitFromAnotherThreadWhileOthersAllocateIsClean) {
  constexpr int rounds = tracepool::testing::sanitized_build ? 2 : 6;  // a sanitized child takes ~10 s to exit
  for (int round = 0; round < rounds; ++round) {
    const std::string path = scratch_dir() + "/threads" + std::to_string(round) + ".json";
    std::string err;
    ASSERT_EQ(run_child(path, &err, {"TRACEPOOL_CHILD_THREADS=4"}), 0) << "round " << round << ": " << err;
    EXPECT_EQ(err, "") << "round " << round;
    const json r = parse_report(path);
    EXPECT_EQ(r["reason"], "exit");
    bool found = false;
    for (const json& s : r["leaks"])
      found = found || (s["blocks"] == 7 && s["bytes"] == 7 * 12345);
    EXPECT_TRUE(found) << "round " << round << ": the seven leaked blocks are named";
  }
}

TEST(ExitReport, WrittenEarlyItIsTheOnlyOne) {
  std::string err;
  ASSERT_EQ(run_child("stderr", &err, {"TRACEPOOL_CHILD_EARLY=1"}), 0) << err;
  size_t headers = 0;
  for (size_t at = err.find("tracepool report (exit)"); at != std::string::npos;
       at = err.find("tracepool report (exit)", at + 1))
    ++headers;
  EXPECT_EQ(headers, 1u) << err;
  EXPECT_EQ(err.find("late_leak"), std::string::npos) << "written before late_leak ran: " << err;

  const std::string path = scratch_dir() + "/early.json";
  ASSERT_EQ(run_child(path, &err, {"TRACEPOOL_CHILD_EARLY=1"}), 0) << err;
  const json r = parse_report(path);
  ASSERT_EQ(r["leaks"].size(), 1u) << "the atexit handler wrote it again: " << r["leaks"].dump(1);
  EXPECT_EQ(r["leaks"][0]["bytes"], 7 * 12345);
}

struct ReportFile : tracepool::testing::HostInstanceTest {};

TEST_F(ReportFile, ASymlinkAtThePathIsRefusedAndLeftAlone) {
  const std::string victim = dir + "/victim", path = dir + "/report.json";
  {
    FILE* f = std::fopen(victim.c_str(), "w");
    std::fputs("keep me", f);
    std::fclose(f);
  }
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  ASSERT_EQ(tracepool_write_report(tp, path.c_str(), nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tracepool_last_error()),
            path + " is a symbolic link (to " + victim +
                "); tracepool writes reports only to regular files, new paths, character devices, FIFOs, "
                "/dev/stdout, /dev/stderr and /dev/fd/N: remove the link or give its target");
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link is still there";
  char target[4096] = {};
  ASSERT_GT(readlink(path.c_str(), target, sizeof target - 1), 0);
  EXPECT_EQ(std::string(target), victim);
  EXPECT_EQ(read_file(victim), "keep me");
  const std::string listing = dir + "/listing";
  ASSERT_EQ(std::system(("ls -A '" + dir + "' > '" + listing + "'").c_str()), 0);
  EXPECT_EQ(read_file(listing), "listing\nreport.json\nvictim\n") << "no temporary file left behind";
}

TEST_F(ReportFile, FormatFollowsTheExtensionUnlessGiven) {
  ASSERT_EQ(tracepool_write_report(tp, (dir + "/a.json").c_str(), nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_write_report(tp, (dir + "/a.txt").c_str(), nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_write_report(tp, (dir + "/b.txt").c_str(), "json"), TRACEPOOL_OK);
  EXPECT_EQ(read_file(dir + "/a.json")[0], '{');
  EXPECT_EQ(read_file(dir + "/a.txt").rfind("== tracepool report (demand)", 0), 0u);
  EXPECT_EQ(read_file(dir + "/b.txt")[0], '{');
}

TEST_F(ReportFile, BadPathsAndFormatsAreRefusedWithAReason) {
  EXPECT_EQ(tracepool_write_report(tp, (dir + "/no/such/dir/r.json").c_str(), nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("no/such/dir"), std::string::npos);
  EXPECT_EQ(tracepool_write_report(tp, (dir + "/r").c_str(), "xml"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("'xml'"), std::string::npos);
  EXPECT_EQ(tracepool_write_report(tp, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_write_report(tp, "", nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_write_report(nullptr, "x", nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_write_report(tp, dir.c_str(), "json"), TRACEPOOL_ERR_INVALID_ARGUMENT) << "a directory";
}

std::vector<void*> hogged;

__attribute__((noinline)) void hog(tracepool_t* tp) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, size_t{6} << 20, 0, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
  hogged.push_back(p);
  asm volatile("" ::: "memory");
}

TEST(OomReport, NamesTheSitesHoldingMemoryAndIsKeptForRetrieval) {
  for (const bool print : {false, true}) {
    tracepool_t* tp = nullptr;
    const std::string conf = std::string("backend:host,validate:on,host_capacity:64MiB") + (print ? "" : ",oom_report:off");
    ASSERT_EQ(tracepool_create(conf.c_str(), &tp), TRACEPOOL_OK);
    const std::string dir = scratch_dir();
    EXPECT_EQ(tracepool_write_oom_report(tp, (dir + "/none.json").c_str(), nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 3; ++i) hog(tp);
    ::testing::internal::CaptureStderr();
    void* p = nullptr;
    const int rc = tracepool_malloc(tp, size_t{50} << 20, 0, nullptr, &p);
    const std::string printed = ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(rc, TRACEPOOL_ERR_OOM);
    const std::string message = tracepool_last_error();
    EXPECT_NE(message.find("Top call sites holding memory"), std::string::npos) << message;
    EXPECT_NE(message.find("hog"), std::string::npos) << message;
    EXPECT_NE(message.find("18.00 MiB in 3 blocks"), std::string::npos) << message;
    EXPECT_NE(message.find("Largest free block on device 0: 2.00 MiB"), std::string::npos) << message;
    EXPECT_EQ(printed.find("tracepool report (oom)") != std::string::npos, print) << printed;

    ASSERT_EQ(tracepool_write_oom_report(tp, (dir + "/oom.json").c_str(), nullptr), TRACEPOOL_OK);
    const json r = parse_report(dir + "/oom.json");
    EXPECT_EQ(r["reason"], "oom");
    EXPECT_EQ(r["oom"]["requested_bytes"], size_t{50} << 20);
    EXPECT_EQ(r["oom"]["device"], 0);
    ASSERT_FALSE(r["leaks"].empty());
    EXPECT_NE(r["leaks"][0]["frames"][0]["function"].get<std::string>().find("hog"), std::string::npos);
    EXPECT_EQ(r["leaks"][0]["bytes"], 3 * (size_t{6} << 20));
    EXPECT_EQ(r["devices"][0]["cached_bytes"], size_t{2} << 20);
    // A program that catches the error and tries again (a batch-size search) is told once in full,
    // then one line per failure; the report kept is the latest.
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(tracepool_malloc(tp, size_t{47} << 20, 0, nullptr, &p), TRACEPOOL_ERR_OOM);
    const std::string again = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(again.find("tracepool report (oom)"), std::string::npos) << again;
    EXPECT_EQ(std::count(again.begin(), again.end(), '\n'), print ? 3 : 0) << again;
    if (print) EXPECT_NE(again.find("out of memory again on device 0 (47.00 MiB requested; 4 so far)"), std::string::npos) << again;
    ASSERT_EQ(tracepool_write_oom_report(tp, (dir + "/latest.json").c_str(), nullptr), TRACEPOOL_OK);
    EXPECT_EQ(parse_report(dir + "/latest.json")["oom"]["requested_bytes"], size_t{47} << 20);
    for (void* h : hogged) EXPECT_EQ(tracepool_free(tp, h, nullptr), TRACEPOOL_OK);
    hogged.clear();
    tracepool_destroy(tp);
  }
}

__attribute__((noinline)) void sampled_workload(tracepool_t* tp, const std::vector<size_t>& sizes,
                                                std::vector<void*>* out) {
  for (size_t s : sizes) {
    void* p = nullptr;
    ASSERT_EQ(tracepool_malloc(tp, s, 0, nullptr, &p), TRACEPOOL_OK);
    out->push_back(p);
  }
  asm volatile("" ::: "memory");
}

// Horvitz-Thompson: the estimate of a known workload is within 4 standard deviations of the truth,
// the same seed gives the same samples, and not every block was captured.
TEST(Sampling, EstimatesAreUnbiasedWithinStatisticalBounds) {
  constexpr double mean = 64 * 1024;
  std::vector<size_t> sizes;
  uint64_t x = 12345;
  double truth_bytes = 0, var_bytes = 0, var_blocks = 0;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const size_t s = 512 + (x >> 33) % (128 * 1024);
    sizes.push_back(s);
    const double p = -std::expm1(-static_cast<double>(s) / mean);
    truth_bytes += static_cast<double>(s);
    var_bytes += static_cast<double>(s) * static_cast<double>(s) * (1 - p) / p;
    var_blocks += (1 - p) / p;
  }
  json first;
  for (int run = 0; run < 2; ++run) {
    tracepool_t* tp = nullptr;
    ASSERT_EQ(tracepool_create("backend:host,validate:off,sample_bytes:64KiB,sample_seed:7", &tp), TRACEPOOL_OK);
    std::vector<void*> blocks;
    sampled_workload(tp, sizes, &blocks);
    const json r = report_of(tp);
    EXPECT_TRUE(r["capture"]["estimated"]);
    ASSERT_EQ(r["leaks"].size(), 1u) << r["leaks"].dump(1);
    const double bytes = r["leaks"][0]["bytes"], count = r["leaks"][0]["blocks"];
    EXPECT_LE(std::fabs(bytes - truth_bytes), 4 * std::sqrt(var_bytes)) << bytes << " vs " << truth_bytes;
    EXPECT_LE(std::fabs(count - 20000), 4 * std::sqrt(var_blocks) + 1) << count;
    EXPECT_NE(bytes, truth_bytes) << "an estimate, not a count: some blocks were not sampled";
    if (run == 0) first = r["leaks"][0];
    else EXPECT_EQ(r["leaks"][0]["bytes"], first["bytes"]) << "same seed, same samples";
    // The exact totals come from the statistics, whatever was sampled.
    EXPECT_EQ(r["stats"]["0"]["requested_bytes.all.current"].get<double>(), truth_bytes);
    for (void* p : blocks) ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
    EXPECT_TRUE(report_of(tp)["leaks"].empty());
    tracepool_destroy(tp);
  }
}

// Note [Where the memory went]: a device's section splits what the driver counts used into
// tracepool's reserved bytes and the rest (here 300 MiB that the host backend counts as used by
// others, as a CUDA context or another process would be), and the text says so.
TEST(Report, DriverUsedMemoryIsSplitIntoTracepoolsAndTheRest) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,host_capacity:4GiB,host_outside:300MiB", &tp), TRACEPOOL_OK);
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 5 << 20, 0, nullptr, &p), TRACEPOOL_OK);
  const json r = report_of(tp);
  const json& d = r["devices"][0];
  const int64_t reserved = r["stats"]["0"]["reserved_bytes.all.current"];
  EXPECT_GT(reserved, 5 << 20);
  EXPECT_EQ(d["total_bytes"], int64_t{4} << 30);
  EXPECT_EQ(d["used_bytes"], reserved + (int64_t{300} << 20));
  EXPECT_EQ(d["outside_bytes"], int64_t{300} << 20);
  size_t free_bytes = 0, total_bytes = 0;  // what mem_get_info says adds up to the same
  ASSERT_EQ(tracepool_mem_get_info(tp, 0, &free_bytes, &total_bytes), TRACEPOOL_OK);
  EXPECT_EQ(d["used_bytes"], static_cast<int64_t>(total_bytes - free_bytes));
  char* text = nullptr;
  ASSERT_EQ(tracepool_report_string(tp, "text", &text), TRACEPOOL_OK);
  EXPECT_NE(std::string(text).find("the driver counts 320.00 MiB of 4.00 GiB used (what nvidia-smi shows): 20.00 MiB "
                                   "reserved by tracepool, 300.00 MiB outside it"),
            std::string::npos)
      << text;
  tracepool_string_free(text);
  // A saved report keeps the figures; one that counts more used than there is is refused.
  json saved = r;
  ASSERT_EQ(tracepool_render_report(saved.dump().c_str(), saved.dump().size(), nullptr, &text), TRACEPOOL_OK);
  EXPECT_NE(std::string(text).find("300.00 MiB outside it"), std::string::npos) << text;
  tracepool_string_free(text);
  saved["devices"][0]["used_bytes"] = (int64_t{4} << 30) + 1;
  EXPECT_EQ(tracepool_render_report(saved.dump().c_str(), saved.dump().size(), nullptr, &text),
            TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("devices[0].used_bytes"), std::string::npos)
      << tracepool_last_error();
  // Memory used outside tracepool is not tracepool's to hand out.
  void* big = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, (size_t{4} << 30) - (size_t{310} << 20), 0, nullptr, &big), TRACEPOOL_ERR_OOM);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

// The same used bytes by process: the host backend lists this process with what it allocated, and
// host_outside is in no process, as the driver's own memory is under NVML. The saved-report tests
// below edit that list as NVML could have written it.
std::string rendered(const json& saved) {
  char* text = nullptr;
  if (tracepool_render_report(saved.dump().c_str(), saved.dump().size(), nullptr, &text) != TRACEPOOL_OK)
    return std::string("refused: ") + tracepool_last_error();
  std::string out = text;
  tracepool_string_free(text);
  return out;
}

// A host report holding 5 MiB (20 MiB reserved) with 300 MiB used outside tracepool.
json report_with_outside_memory() {
  tracepool_t* tp = nullptr;
  EXPECT_EQ(tracepool_create("backend:host,host_capacity:4GiB,host_outside:300MiB", &tp), TRACEPOOL_OK);
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, 5 << 20, 0, nullptr, &p), TRACEPOOL_OK);
  json r = report_of(tp);
  tracepool_destroy(tp);
  return r;
}

std::string pid_text(int64_t pid) { return "this process (pid " + std::to_string(pid) + ")"; }

TEST(Report, DriverUsedMemoryIsSplitByProcess) {
  const json r = report_with_outside_memory();
  const json& d = r["devices"][0];
  ASSERT_EQ(d["processes"].size(), 1u) << d;
  EXPECT_EQ(d["processes"][0]["pid"], static_cast<int64_t>(getpid()));
  EXPECT_EQ(d["processes"][0]["used_bytes"], r["stats"]["0"]["reserved_bytes.all.current"]);
  EXPECT_EQ(d["processes_note"], "");
  const std::string text = rendered(r);
  EXPECT_NE(text.find("by process (the host backend's list): " + pid_text(getpid()) +
                      " 20.00 MiB, 0 B of it outside tracepool (its CUDA context, libraries); 0 other processes 0 B; "
                      "300.00 MiB in no process (the driver's own)"),
            std::string::npos)
      << text;
}

TEST(Report, OtherProcessesAreNamedAndThoseWithoutAFigureSaidSo) {
  json saved = report_with_outside_memory();  // two more processes, one of 1 GiB, one NVML gives no figure for
  json& d = saved["devices"][0];
  d["processes"].push_back({{"pid", 4242}, {"used_bytes", int64_t{1} << 30}});
  d["processes"].push_back({{"pid", 4343}, {"used_bytes", nullptr}});
  d["used_bytes"] = d["used_bytes"].get<int64_t>() + (int64_t{1} << 30);
  std::string text = rendered(saved);
  EXPECT_NE(text.find("; 2 other processes 1.00 GiB (pid 4242: 1.00 GiB, pid 4343: not visible); 300.00 MiB in no "
                      "figure NVML gave (the driver's own, and the processes not visible)"),
            std::string::npos)
      << text;
  d["processes"][0]["used_bytes"] = nullptr;  // this process's own figure unknown
  text = rendered(saved);
  EXPECT_NE(text.find(pid_text(saved["process"]["pid"]) + ": its use is not visible; 2 other processes"),
            std::string::npos)
      << text;
  d["processes"][0]["used_bytes"] = 10 << 20;  // two entries of this process: one figure, their sum
  d["processes"].push_back({{"pid", saved["process"]["pid"]}, {"used_bytes", 15 << 20}});
  text = rendered(saved);
  EXPECT_NE(text.find(pid_text(saved["process"]["pid"]) + " 25.00 MiB, 5.00 MiB of it outside tracepool"),
            std::string::npos)
      << text;
}

TEST(Report, AProcessNotInTheListIsSaidToBeMissing) {
  json saved = report_with_outside_memory();
  saved["devices"][0]["processes"].push_back({{"pid", 4242}, {"used_bytes", 1 << 20}});
  saved["process"]["pid"] = 7;  // NVML's pids are not this process's: another PID namespace
  std::string text = rendered(saved);
  EXPECT_NE(text.find(pid_text(7) + " is not listed (in another PID namespace?); 2 other processes 21.00 MiB"),
            std::string::npos)
      << text;
  saved["devices"][0]["processes"] = json::array();
  text = rendered(saved);
  EXPECT_NE(text.find("by process (the host backend's list): no process listed; 320.00 MiB in no process"),
            std::string::npos)
      << text;
}

TEST(Report, WhenProcessesCannotBeListedTheReportSaysWhy) {
  json saved = report_with_outside_memory();
  saved["devices"][0]["processes"] = nullptr;  // NVML could not be asked
  saved["devices"][0]["processes_note"] = "cannot load libnvidia-ml.so.1";
  std::string text = rendered(saved);
  EXPECT_NE(text.find("by process: not listed (cannot load libnvidia-ml.so.1)"), std::string::npos) << text;
  saved["devices"][0].erase("processes");  // a report from before processes were listed: read, no line
  saved["devices"][0].erase("processes_note");
  text = rendered(saved);
  EXPECT_EQ(text.rfind("refused:", 0), std::string::npos) << text;
  EXPECT_NE(text.find("the driver counts"), std::string::npos) << text;
  EXPECT_EQ(text.find("by process"), std::string::npos) << text;
}

TEST(Report, AProcessListWithBadFiguresIsRefused) {
  json saved = report_with_outside_memory();
  saved["devices"][0]["processes"] = json::array({{{"pid", -1}, {"used_bytes", 0}}});
  EXPECT_NE(rendered(saved).find("devices[0].processes[0].pid must be a non-negative integer"), std::string::npos) << rendered(saved);
  saved["devices"][0]["processes"] = json::array({{{"pid", 1}}});
  EXPECT_NE(rendered(saved).find("has no \"used_bytes\" field"), std::string::npos) << rendered(saved);
  // Each figure is at most the device's memory, so that their sum cannot overflow either.
  saved["devices"][0]["processes"] = json::array({{{"pid", 1}, {"used_bytes", INT64_MAX}}});
  EXPECT_NE(rendered(saved).find("processes[0].used_bytes (9223372036854775807) is more than the device's total_bytes"),
            std::string::npos)
      << rendered(saved);
}

}  // namespace
