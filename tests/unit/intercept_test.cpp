// The interposer (plugins/intercept, Note [Interposer]) on the stand-in driver (tests/support/stand_in_cuda.c):
// programs that reach the driver at link time, through dlsym and through cuGetProcAddress (both ABIs), from
// threads and across fork, get each allocation recorded at its function, by kind and source, in the report
// TRACEPOOL_REPORT names; what they free is gone from it; a driver that lacks entry points still works.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "child_process.h"
#include "report_support.h"

namespace {

using tracepool::testing::json;
using tracepool::testing::parse_report;
using tracepool::testing::run_child;
using tracepool::testing::scratch_dir;

constexpr uint64_t MiB = 1 << 20;

struct intercepted {
  int status = -1;
  std::string output;  // stdout and stderr
  json report;         // null where none was written
};

// Runs `argv` under the interposer on the full stand-in (or the minimal one), its report to a new folder.
intercepted run_intercepted(const std::vector<std::string>& argv, bool minimal = false) {
  const std::string dir = scratch_dir();
  const std::vector<std::string> env = {
      std::string("LD_LIBRARY_PATH=") + (minimal ? TRACEPOOL_STAND_IN_MINIMAL_DIR : TRACEPOOL_STAND_IN_CUDA_DIR),
      std::string("LD_PRELOAD=") + TRACEPOOL_INTERCEPT_LIBRARY, "TRACEPOOL_REPORT=" + dir + "/report.json"};
  intercepted r;
  r.status = run_child(argv, env, &r.output);
  const std::string path = dir + "/report.json";
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
    r.report = parse_report(path);
  }
  return r;
}

// The live site (a leak) whose stack holds `function` and whose innermost tag is `tag`; null where none.
json site_of(const json& report, const std::string& function, const std::string& tag) {
  for (const json& e : report["leaks"]) {
    if (e["tags"].empty() || e["tags"].back() != tag) continue;
    for (const json& f : e["frames"])
      if (f["function"].get<std::string>().find(function) != std::string::npos) return e;
  }
  return json();
}

// The live bytes of every site whose stack holds `function` and whose innermost tag is `tag`.
uint64_t bytes_at(const json& report, const std::string& function, const std::string& tag) {
  uint64_t bytes = 0;
  for (const json& e : report["leaks"]) {
    if (e["tags"].empty() || e["tags"].back() != tag) continue;
    for (const json& f : e["frames"])
      if (f["function"].get<std::string>().find(function) != std::string::npos) {
        bytes += e["bytes"].get<uint64_t>();
        break;
      }
  }
  return bytes;
}

TEST(Intercept, TheRuntimesWaysToTheDriverAreSeenAtTheirLines) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "runtime"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  // cuGetProcAddress_v2 (got by dlsym), the 11.3 resolver it hands out, and dlsym itself.
  EXPECT_EQ(bytes_at(r.report, "leak_through_runtime", "outside the pool: cuMemAlloc"), 3 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "leak_through_runtime", "outside the pool: cuMemAllocAsync"), 1 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_through_runtime", "pinned host: cuMemHostAlloc"), 2 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_through_legacy_resolver", "outside the pool: cuMemAlloc"), 5 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_through_dlsym", "outside the pool: cuMemAlloc"), 6 * MiB);
  // The 4 MiB freed is gone; the stacks begin at the caller, not in the interposer.
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 15 * MiB);
  EXPECT_EQ(r.report["devices"][0]["observed_host_bytes"].get<uint64_t>(), 2 * MiB);
  const json site = site_of(r.report, "leak_through_dlsym", "outside the pool: cuMemAlloc");
  ASSERT_FALSE(site.is_null());
  EXPECT_NE(site["frames"][0]["function"].get<std::string>().find("leak_through_dlsym"), std::string::npos) << site.dump(1);
}

TEST(Intercept, AProgramLinkedAgainstTheDriverIsSeenForEveryKind) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_LINKED});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "leak_linked", "outside the pool: cuMemAlloc"), 1 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "leak_linked", "outside the pool: cuMemAllocManaged"), 2 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_linked", "outside the pool: cuMemAllocPitch"), 1 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_linked", "pinned host: cuMemHostAlloc"), 3 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_linked", "outside the pool: cuMemCreate"), 4 * MiB);
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 6 * MiB);
  EXPECT_EQ(r.report["devices"][0]["observed_managed_bytes"].get<uint64_t>(), 2 * MiB);
  EXPECT_EQ(bytes_at(r.report, "leak_linked", "pinned host: cuMemAllocHost"), 5 * MiB);
  EXPECT_EQ(r.report["devices"][0]["observed_host_bytes"].get<uint64_t>(), 8 * MiB);
  // Each freed 7 MiB (cuMemFree, cuMemFreeHost, cuMemRelease) is gone.
  for (const json& e : r.report["leaks"]) EXPECT_NE(e["bytes"].get<uint64_t>(), 7 * MiB) << e.dump(1);
}

TEST(Intercept, ThreadsAllocatingAndFreingAtOnceLeaveExactlyWhatTheyKept) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "threads"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "churn", "outside the pool: cuMemAlloc"), 8 * MiB) << r.report.dump(1);
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 8 * MiB);
}

// The child of a process using the driver records on, and its report is not the parent's (Note [Exit report]).
TEST(Intercept, AForkedChildRecordsAndTheParentsReportIsItsOwn) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "fork"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_NE(r.output.find("exited 0"), std::string::npos) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "forked", "outside the pool: cuMemAlloc"), 1 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "leak_in_child", "outside the pool: cuMemAlloc"), 0u) << r.report.dump(1);
}

TEST(Intercept, WithPidInThePathTheForkedChildWritesItsOwnReport) {
  const std::string dir = scratch_dir();
  std::string out;
  const int status = run_child({TRACEPOOL_INTERCEPT_CLIENT, "fork"},
                               {std::string("LD_LIBRARY_PATH=") + TRACEPOOL_STAND_IN_CUDA_DIR,
                                std::string("LD_PRELOAD=") + TRACEPOOL_INTERCEPT_LIBRARY,
                                "TRACEPOOL_REPORT=" + dir + "/report.{pid}.json"},
                               &out);
  ASSERT_EQ(status, 0) << out;
  const size_t at = out.find("child pid ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string child_pid = out.substr(at + 10, out.find(' ', at + 10) - at - 10);
  const json child = parse_report(dir + "/report." + child_pid + ".json");
  EXPECT_EQ(bytes_at(child, "leak_in_child", "outside the pool: cuMemAlloc"), 2 * MiB) << child.dump(1);
}

// The minimal stand-in lacks cuMemHostAlloc, cuCtxGetDevice's peers and nearly everything else: the program
// runs as it would without the interposer, and what it got is recorded.
TEST(Intercept, ADriverThatLacksEntryPointsStillWorks) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "runtime"}, /*minimal=*/true);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cuMemHostAlloc: not offered (status 1)"), std::string::npos) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "leak_through_runtime", "outside the pool: cuMemAlloc"), 3 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "leak_through_legacy_resolver", "outside the pool: cuMemAlloc"), 5 * MiB);
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 15 * MiB);
}

TEST(Intercept, WithoutTheInterposerNothingIsRecorded) {
  const std::string dir = scratch_dir();
  std::string out;
  ASSERT_EQ(run_child({TRACEPOOL_INTERCEPT_CLIENT, "runtime"},
                      {std::string("LD_LIBRARY_PATH=") + TRACEPOOL_STAND_IN_CUDA_DIR, "TRACEPOOL_REPORT=" + dir + "/report.json"},
                      &out),
            0)
      << out;
  EXPECT_EQ(std::fopen((dir + "/report.json").c_str(), "r"), nullptr);
}

// Note [Context memory]: what the primary context and a module take of the device, at the lines that made them.
TEST(Intercept, TheContextAndLoadedModulesAreMeasuredAtTheirLines) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "modules"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(r.output.find("observed already"), std::string::npos) << "the second retain makes nothing\n" << r.output;
  EXPECT_EQ(bytes_at(r.report, "make_context", "outside the pool: CUDA context (primary)"), 96 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "load_kernels", "outside the pool: module (cuModuleLoadData)"), 4 * MiB);  // one unloaded
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 100 * MiB);
}

// Lazy loading: a function's code loads at its first use (a launch, or a question about it), measured there;
// later uses take nothing.
TEST(Intercept, CodeLoadedAtAFunctionsFirstUseIsMeasuredThere) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "launch"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "run_kernels", "outside the pool: module (lazy load)"), 6 * MiB) << r.report.dump(1);
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 6 * MiB);
}

// A stream's memory is measured where it was made, and gone with it.
TEST(Intercept, StreamsAreMeasuredUntilDestroyed) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "streams"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "make_streams", "outside the pool: stream (cuStreamCreate)"), 4 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "make_streams", "outside the pool: stream (with priority)"), 2 * MiB) << r.report.dump(1);
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 6 * MiB);
}

// Peer access maps the peer's memory here, and what that takes is measured until it is disabled.
TEST(Intercept, PeerAccessIsMeasuredUntilDisabled) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "peer"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "enable_peer_access", "outside the pool: peer access"), 2 * MiB) << r.report.dump(1);
  const intercepted off = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "peer", "off"});
  ASSERT_EQ(off.status, 0) << off.output;
  ASSERT_FALSE(off.report.is_null()) << off.output;
  EXPECT_EQ(bytes_at(off.report, "enable_peer_access", "outside the pool: peer access"), 0u) << off.report.dump(1);
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>() - off.report["devices"][0]["observed_bytes"].get<uint64_t>(),
            2 * MiB) << "the context alone is left";
}

TEST(Intercept, AContextReleasedForTheLastTimeIsGone) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "modules", "release"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(bytes_at(r.report, "make_context", "outside the pool: CUDA context (primary)"), 0u) << r.report.dump(1);
}

// The driver refusing memory (CUDA_ERROR_OUT_OF_MEMORY) makes tracepool's out-of-memory report, as the pool's own
// does: who holds the device, and the request that failed at its line; the program gets the driver's answer.
TEST(Intercept, TheDriverRefusingMemoryMakesTheOutOfMemoryReport) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "oom"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("oom: the driver said 2"), std::string::npos) << r.output;
  const size_t at = r.output.find("== tracepool report (oom)");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cuMemAlloc: out of memory: 68719476736 bytes on device 0 refused outside tracepool's pool", at),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("keep_some", at), std::string::npos) << "who holds the device\n" << r.output;
}

// Frees after the report at exit (an atexit handler registered before tracepool's, a destructor) pass through:
// the report holds what was live when it was written, and the program ends as it would.
TEST(Intercept, FreesAfterTheReportAtExitPassThrough) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "atexit"});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  EXPECT_EQ(r.report["devices"][0]["observed_bytes"].get<uint64_t>(), 6 * MiB) << r.report.dump(1);
  EXPECT_EQ(bytes_at(r.report, "allocate_for_exit", "outside the pool: cuMemAlloc"), 6 * MiB);
}

// dlsym(RTLD_NEXT, ...) is relative to its caller: the interposer's dlsym must not make it relative to itself.
TEST(Intercept, RtldNextStillFindsTheNextLibrary) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "next"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("RTLD_NEXT: the next library's"), std::string::npos) << r.output;
}

// dlsym(RTLD_DEFAULT, ...) is resolved in its caller's scope: a library loaded RTLD_LOCAL finds its own
// dependency's entry points, which the process's global scope lacks, with the interposer as without it.
TEST(Intercept, RtldDefaultFromALocalLibraryStillFindsItsOwnDependency) {
  const intercepted r = run_intercepted({TRACEPOOL_INTERCEPT_CLIENT, "local", TRACEPOOL_LOCAL_PROBE});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("RTLD_DEFAULT from a local library: its own dependency's"), std::string::npos) << r.output;
}

}  // namespace
