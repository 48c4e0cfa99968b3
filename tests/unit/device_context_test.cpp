// Note [No context as a side effect] (core/backend/backend.h): what tracepool asks of a device it does not
// use (reports, OOM messages, the figures a host asks for) makes no context there. The host backend
// makes a device's context at the first call that uses it, as CUDA's calls do, and its ledger says
// which devices have one; tests/gpu/contexts_check.py checks the same on two GPUs with nvidia-smi.
#include <gtest/gtest.h>

#include <string>

#include "report/oom_reporter.h"
#include "report/report.h"
#include "test_support.h"

namespace tracepool::core {
using tracepool::testing::host_allocator;

namespace {
constexpr size_t MiB = size_t{1} << 20;

uint64_t devices_with_context(allocator& a) {
  backend::host_ledger l;
  EXPECT_TRUE(backend::read_host_ledger(a.device_backend(), &l));
  return l.devices_with_context;
}
}  // namespace

TEST(NoContext, AReportMakesNoneOnADeviceThisProcessNeverUsed) {
  auto a = host_allocator("host_devices:3");
  void* p = nullptr;
  ASSERT_EQ(a->malloc(MiB, 1, nullptr, &p), status::ok) << last_error();
  ASSERT_EQ(devices_with_context(*a), uint64_t{0b010});
  report r;
  ASSERT_EQ(build_report(*a, "exit", &r), status::ok) << last_error();
  EXPECT_EQ(devices_with_context(*a), uint64_t{0b010}) << "the report made a context on a device never used";
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_FALSE(r.devices[0].context);
  EXPECT_TRUE(r.devices[1].context);
  EXPECT_FALSE(r.devices[2].context);
  // A device never used is still described: its size and what others use of it, as NVML says.
  EXPECT_GT(r.devices[0].total_bytes, 0);
  const std::string text = to_text(r, 10);
  EXPECT_NE(text.find("device 0: not used by this process (no context on it)"), std::string::npos) << text;
  EXPECT_NE(text.find("device 1: 1.00 MiB allocated"), std::string::npos) << text;
  ASSERT_EQ(a->free(p), status::ok);
}

TEST(NoContext, AnOutOfMemoryReportAndTheCacheCallsMakeNone) {
  auto a = host_allocator("host_devices:2,limit:8MiB");
  oom_reporter reporter(*a, /*print=*/false);
  ASSERT_EQ(a->subscribe(&reporter), status::ok);
  void* p = nullptr;
  ASSERT_EQ(a->malloc(MiB, 0, nullptr, &p), status::ok) << last_error();
  void* too_big = nullptr;
  ASSERT_EQ(a->malloc(64 * MiB, 0, nullptr, &too_big), status::out_of_memory);
  EXPECT_NE(std::string(last_error()).find("out of memory"), std::string::npos) << last_error();
  ASSERT_EQ(a->empty_cache(-1), status::ok) << last_error();
  ASSERT_EQ(a->reset_peak(-1), status::ok);
  ASSERT_EQ(a->mark("epoch"), status::ok);
  EXPECT_EQ(devices_with_context(*a), uint64_t{0b01});
  ASSERT_EQ(a->free(p), status::ok);
}

TEST(NoContext, TheFiguresAHostAsksForMakeNone) {
  auto a = host_allocator("host_devices:2,host_capacity:1GiB");
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(a->memory_info(1, &free_bytes, &total), status::ok) << last_error();  // torch.cuda.mem_get_info(1)
  EXPECT_EQ(total, size_t{1} << 30);
  EXPECT_EQ(free_bytes, total);
  std::vector<backend::process_usage> listed;
  std::string why;
  EXPECT_TRUE(a->processes(1, &listed, &why)) << why;
  EXPECT_TRUE(listed.empty()) << "a process with no context on a device is not among its processes";
  EXPECT_FALSE(a->device_backend().has_context(1));
  EXPECT_NE(a->device_backend().page_size(1), 0u);
  EXPECT_EQ(devices_with_context(*a), uint64_t{0});
}

}  // namespace tracepool::core
