// The C ABI: bad input gets a clear status and a message, and nothing is lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tracepool/tracepool.h"

namespace {

struct CApi : ::testing::Test {
  tracepool_t* tp = nullptr;
  void SetUp() override { ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK); }
  void TearDown() override { tracepool_destroy(tp); }

  tracepool_stats_t stats(int device = 0) {
    tracepool_stats_t s{};
    s.size = sizeof s;
    EXPECT_EQ(tracepool_get_stats(tp, device, &s), TRACEPOOL_OK);
    return s;
  }
  std::string error() const { return tracepool_last_error(); }
};

TEST_F(CApi, MallocFreeRoundTripIsAlignedAndCounted) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 1000, 0, nullptr, &p), TRACEPOOL_OK);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  std::memset(p, 1, 1000);  // host backend memory is real memory
  EXPECT_EQ(stats().allocation.current, 1u);
  EXPECT_EQ(stats().requested_bytes.current, 1000u);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  EXPECT_EQ(stats().allocation.current, 0u);
}

TEST_F(CApi, SizeZeroGivesNullAndFreeNullIsNoOp) {
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(tracepool_malloc(tp, 0, 0, nullptr, &p), TRACEPOOL_OK);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(tracepool_free(tp, nullptr, nullptr), TRACEPOOL_OK);
  EXPECT_EQ(stats().allocation.allocated, 0u);
}

TEST_F(CApi, AbsurdSizeIsInvalidArgumentAndChangesNothing) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, SIZE_MAX, 0, nullptr, &p), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("largest supported request"), std::string::npos) << error();
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(stats().reserved_bytes.current, 0u);
  EXPECT_EQ(stats().num_ooms, 0u);
}

TEST_F(CApi, SizeBeyondTheDeviceIsOutOfMemory) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, size_t{1} << 40, 0, nullptr, &p), TRACEPOOL_ERR_OOM);
  EXPECT_NE(error().find("out of memory on device 0"), std::string::npos) << error();
  EXPECT_EQ(stats().num_ooms, 1u);
  EXPECT_EQ(tracepool_validate(tp), TRACEPOOL_OK);
}

TEST_F(CApi, UnknownPointerIsRejectedAndCounted) {
  int on_stack = 0;
  EXPECT_EQ(tracepool_free(tp, &on_stack, nullptr), TRACEPOOL_ERR_UNKNOWN_POINTER);
  EXPECT_NE(error().find("never allocated"), std::string::npos) << error();
  EXPECT_EQ(stats().num_invalid_frees, 1u);
}

TEST_F(CApi, DoubleFreeIsRejectedAndTheCacheSurvives) {
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &q), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_ERR_DOUBLE_FREE);
  EXPECT_NE(error().find("not a live block"), std::string::npos) << error();
  EXPECT_EQ(stats().num_invalid_frees, 1u);
  EXPECT_EQ(stats().allocation.current, 1u) << "q is still live";
  EXPECT_EQ(tracepool_validate(tp), TRACEPOOL_OK) << error();
  ASSERT_EQ(tracepool_free(tp, q, nullptr), TRACEPOOL_OK);
}

TEST_F(CApi, InteriorPointerIsRejected) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_free(tp, static_cast<char*>(p) + 512, nullptr), TRACEPOOL_ERR_DOUBLE_FREE);
  EXPECT_EQ(stats().allocation.current, 1u);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

TEST_F(CApi, InvalidDeviceEverywhere) {
  void* p = nullptr;
  tracepool_stats_t s{};
  s.size = sizeof s;
  EXPECT_EQ(tracepool_malloc(tp, 64, 1, nullptr, &p), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_NE(error().find("device 1 does not exist"), std::string::npos) << error();
  EXPECT_EQ(tracepool_malloc(tp, 64, -1, nullptr, &p), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_get_stats(tp, 3, &s), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_empty_cache(tp, 3), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_empty_cache(tp, -1), TRACEPOOL_OK) << "-1 means every device";
  EXPECT_EQ(tracepool_reset_peak_stats(tp, 9), TRACEPOOL_ERR_INVALID_DEVICE);
}

TEST_F(CApi, NullArgumentsAreInvalid) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(nullptr, 64, 0, nullptr, &p), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_malloc(tp, 64, 0, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_free(nullptr, p, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_get_stats(tp, 0, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_create("", nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_record_stream(tp, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(nullptr);
}

TEST_F(CApi, BadConfigurationSaysWhatWasWrong) {
  tracepool_t* other = reinterpret_cast<tracepool_t*>(0x1);
  EXPECT_EQ(tracepool_create("backend:host,capacity:1GiB", &other), TRACEPOOL_ERR_BAD_CONFIG);
  EXPECT_EQ(other, nullptr);
  EXPECT_NE(error().find("unknown key 'capacity'"), std::string::npos) << error();
  EXPECT_EQ(tracepool_create("backend:host,limit:much", &other), TRACEPOOL_ERR_BAD_CONFIG);
  EXPECT_NE(error().find("bad value 'much' for 'limit'"), std::string::npos) << error();
}

TEST_F(CApi, OlderSmallerStatsStructGetsOnlyWhatItKnows) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK);
  tracepool_stats_t s;
  std::memset(&s, 0xee, sizeof s);
  s.size = offsetof(tracepool_stats_t, segment);  // a caller that knew only `allocation`
  ASSERT_EQ(tracepool_get_stats(tp, 0, &s), TRACEPOOL_OK);
  EXPECT_EQ(s.allocation.current, 1u);
  EXPECT_EQ(s.segment.current, 0xeeeeeeeeeeeeeeeeull) << "beyond the caller's size nothing is written";
  s.size = 3;
  EXPECT_EQ(tracepool_get_stats(tp, 0, &s), TRACEPOOL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

TEST_F(CApi, StatusStringsAreDistinctAndNamed) {
  std::set<std::string> seen;
  for (int code = 0; code >= -9; --code) {
    const std::string s = tracepool_status_string(code);
    EXPECT_EQ(s.rfind("TRACEPOOL_", 0), 0u) << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_NE(std::string(tracepool_status_string(-2)).find("TRACEPOOL_ERR_OOM"), std::string::npos);
  EXPECT_NE(std::string(tracepool_status_string(-1000)).find("unknown"), std::string::npos);
}

TEST_F(CApi, LastErrorIsPerThread) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, 64, 5, nullptr, &p), TRACEPOOL_ERR_INVALID_DEVICE);
  std::string other_thread_sees = "unset";
  std::thread([&] { other_thread_sees = tracepool_last_error(); }).join();
  EXPECT_EQ(other_thread_sees, "");
  EXPECT_NE(error().find("device 5"), std::string::npos);
}

TEST_F(CApi, LimitAndMemInfo) {
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(tracepool_mem_get_info(tp, 0, &free_bytes, &total), TRACEPOOL_OK);
  EXPECT_GT(total, 0u);
  ASSERT_EQ(tracepool_set_limit(tp, 0, 2u << 20), TRACEPOOL_OK);
  EXPECT_EQ(stats().limit_bytes, 2u << 20);
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 1u << 20, 0, nullptr, &p), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_malloc(tp, 4u << 20, 0, nullptr, &q), TRACEPOOL_ERR_OOM);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

// Private pools through the C ABI: a stream route, the blocks it routed, the use count, and every
// bad call answered with a status and a message.
TEST_F(CApi, PrivatePoolRoundTripAndBadCalls) {
  void* const stream = reinterpret_cast<void*>(0x100);
  ASSERT_EQ(tracepool_pool_begin(tp, 0, 5, nullptr, stream, nullptr), TRACEPOOL_OK) << error();
  void *routed = nullptr, *plain = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, stream, &routed), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &plain), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_pool_end(tp, 0, 5), TRACEPOOL_OK);
  size_t count = 0;
  ASSERT_EQ(tracepool_pool_blocks(tp, 0, 5, nullptr, 0, &count), TRACEPOOL_OK);
  EXPECT_EQ(count, 1u);
  void* blocks[4] = {};
  ASSERT_EQ(tracepool_pool_blocks(tp, 0, 5, blocks, 4, &count), TRACEPOOL_OK);
  EXPECT_EQ(blocks[0], routed);
  int uses = 0;
  ASSERT_EQ(tracepool_pool_use_count(tp, 0, 5, &uses), TRACEPOOL_OK);
  EXPECT_EQ(uses, 1);
  ASSERT_EQ(tracepool_pool_retain(tp, 0, 5), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_pool_release(tp, 0, 5), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_pool_release(tp, 0, 5), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_pool_release(tp, 0, 5), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("no private pool"), std::string::npos) << error();
  EXPECT_EQ(tracepool_free(tp, routed, nullptr), TRACEPOOL_OK) << "a block outlives its retired pool";
  EXPECT_EQ(tracepool_free(tp, plain, nullptr), TRACEPOOL_OK);

  EXPECT_EQ(tracepool_pool_begin(nullptr, 0, 5, nullptr, stream, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_pool_begin(tp, 0, 0, nullptr, stream, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_pool_retain(tp, 7, 5), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_pool_blocks(tp, 0, 5, nullptr, 3, &count), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_pool_blocks(tp, 0, 5, blocks, 4, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_pool_use_count(tp, 0, 5, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_pool_empty(tp, -2, 5), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_pool_end(nullptr, 0, 5), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_validate(tp), TRACEPOOL_OK) << error();
}

// Reports carry byte counts as int64: a limit past INT64_MAX would make every report unreadable.
TEST_F(CApi, SetLimitRefusesWhatNoReportCanHold) {
  ASSERT_EQ(tracepool_set_limit(tp, 0, 64u << 20), TRACEPOOL_OK);
  for (size_t bytes : {size_t{1} << 63, SIZE_MAX}) {
    EXPECT_EQ(tracepool_set_limit(tp, 0, bytes), TRACEPOOL_ERR_INVALID_ARGUMENT) << bytes;
    EXPECT_NE(error().find("tracepool_set_limit: " + std::to_string(bytes) + " bytes is more than"), std::string::npos)
        << error();
    EXPECT_EQ(stats().limit_bytes, 64u << 20) << "a refused limit changes nothing";
  }
  ASSERT_EQ(tracepool_set_limit(tp, -1, size_t{INT64_MAX}), TRACEPOOL_OK) << error();
  EXPECT_EQ(stats().limit_bytes, uint64_t{INT64_MAX});
}

// The largest sizes accepted still make reports that read back; one byte more is refused up front.
TEST(CApiSizes, TheLargestConfiguredSizesMakeReadableReports) {
  tracepool_t* tp = nullptr;
  EXPECT_EQ(tracepool_create("backend:host,limit:9223372036854775808", &tp), TRACEPOOL_ERR_BAD_CONFIG);
  EXPECT_EQ(tracepool_create("backend:host,host_capacity:9223372036854775808", &tp), TRACEPOOL_ERR_BAD_CONFIG);
  ASSERT_EQ(tracepool_create("backend:host,limit:9223372036854775807,host_capacity:9223372036854775807", &tp),
            TRACEPOOL_OK)
      << tracepool_last_error();
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
  char* json = nullptr;
  ASSERT_EQ(tracepool_report_string(tp, "json", &json), TRACEPOOL_OK) << tracepool_last_error();
  char* text = nullptr;
  EXPECT_EQ(tracepool_render_report(json, std::strlen(json), nullptr, &text), TRACEPOOL_OK) << tracepool_last_error();
  tracepool_string_free(text);
  tracepool_string_free(json);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

// Errors about report options name what the caller gave (the format, the reason, top) and what was
// expected, not the C struct's fields, and quote it harmlessly.
TEST_F(CApi, ReportOptionErrorsSpeakTheCallersWords) {
  std::vector<std::string> errors;
  char* out = nullptr;
  EXPECT_EQ(tracepool_report_string(tp, "xml", &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  errors.push_back(error());
  EXPECT_NE(error().find("tracepool_report_string: unknown report format 'xml': expected one of json, text, html"),
            std::string::npos)
      << error();
  tracepool_report_options_t o{};
  o.size = sizeof o;
  o.format = "\x1b[2J";
  EXPECT_EQ(tracepool_render_report("{}", 2, &o, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  errors.push_back(error());
  EXPECT_NE(error().find("unknown report format '\\x1b[2J'"), std::string::npos) << error();
  EXPECT_EQ(error().find('\x1b'), std::string::npos) << error();
  o.format = nullptr;
  o.top = -1;
  EXPECT_EQ(tracepool_report_string_with(tp, &o, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  errors.push_back(error());
  EXPECT_NE(error().find("top is -1"), std::string::npos) << error();
  o.top = 0;
  o.reason = "";
  EXPECT_EQ(tracepool_write_report_with(tp, "/dev/null", &o), TRACEPOOL_ERR_INVALID_ARGUMENT);
  errors.push_back(error());
  EXPECT_NE(error().find("a report's reason must be 1 to 64 bytes"), std::string::npos) << error();
  o.reason = "oom";
  EXPECT_EQ(tracepool_write_report_with(tp, "/dev/null", &o), TRACEPOOL_ERR_INVALID_ARGUMENT);
  errors.push_back(error());
  o.reason = nullptr;
  o.size = 3;
  EXPECT_EQ(tracepool_report_string_with(tp, &o, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  errors.push_back(error());
  for (const std::string& e : errors) EXPECT_EQ(e.find("options->"), std::string::npos) << e;
}

// ---- Handles: a destroyed or made-up handle is refused by every function, never followed --------

// Every C API function that takes a handle, called with `tp`; each checks the status and message.
void expect_every_call_refuses(tracepool_t* tp) {
  char address[32];
  std::snprintf(address, sizeof address, "%p", static_cast<void*>(tp));
  auto refused = [&](const char* function, int rc) {
    EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT) << function;
    const std::string e = tracepool_last_error();
    const std::string said = std::string(function) + ": handle " + address + " is not a live tracepool";
    EXPECT_NE(e.find(said + " (destroyed, or never created)"), std::string::npos) << e;
  };
  void* p = nullptr;
  size_t free_bytes = 0, total = 0, count = 0;
  int n = 0;
  char* out = nullptr;
  tracepool_stats_t s{};
  s.size = sizeof s;
  tracepool_report_options_t o{};
  o.size = sizeof o;
  refused("tracepool_malloc", tracepool_malloc(tp, 64, 0, nullptr, &p));
  EXPECT_EQ(p, nullptr);
  refused("tracepool_malloc_rounded", tracepool_malloc_rounded(tp, 64, 1024, 0, nullptr, &p));
  EXPECT_EQ(p, nullptr);
  refused("tracepool_history_set_metadata", tracepool_history_set_metadata(tp, 0, "m"));
  refused("tracepool_history_metadata", tracepool_history_metadata(tp, 0, &out));
  refused("tracepool_history_push_context", tracepool_history_push_context(tp, 0, "c"));
  refused("tracepool_history_pop_context", tracepool_history_pop_context(tp, 0));
  refused("tracepool_free", tracepool_free(tp, &n, nullptr));
  refused("tracepool_record_stream", tracepool_record_stream(tp, &n, nullptr));
  refused("tracepool_empty_cache", tracepool_empty_cache(tp, 0));
  refused("tracepool_mem_get_info", tracepool_mem_get_info(tp, 0, &free_bytes, &total));
  refused("tracepool_set_limit", tracepool_set_limit(tp, 0, 1 << 20));
  refused("tracepool_pool_begin", tracepool_pool_begin(tp, 0, 5, nullptr, nullptr, nullptr));
  refused("tracepool_pool_end", tracepool_pool_end(tp, 0, 5));
  refused("tracepool_pool_retain", tracepool_pool_retain(tp, 0, 5));
  refused("tracepool_pool_release", tracepool_pool_release(tp, 0, 5));
  refused("tracepool_pool_use_count", tracepool_pool_use_count(tp, 0, 5, &n));
  refused("tracepool_pool_empty", tracepool_pool_empty(tp, 0, 5));
  refused("tracepool_pool_blocks", tracepool_pool_blocks(tp, 0, 5, nullptr, 0, &count));
  refused("tracepool_pool_label", tracepool_pool_label(tp, 0, 5, "graph"));
  refused("tracepool_get_stats", tracepool_get_stats(tp, 0, &s));
  refused("tracepool_reset_peak_stats", tracepool_reset_peak_stats(tp, 0));
  refused("tracepool_reset_accumulated_stats", tracepool_reset_accumulated_stats(tp, 0));
  refused("tracepool_device_count", tracepool_device_count(tp, &n));
  refused("tracepool_validate", tracepool_validate(tp));
  refused("tracepool_mark", tracepool_mark(tp, "epoch"));
  refused("tracepool_auto_mark", tracepool_auto_mark(tp, "epoch", &n));
  refused("tracepool_write_report", tracepool_write_report(tp, "/dev/null", "json"));
  refused("tracepool_write_report", tracepool_write_report_with(tp, "/dev/null", &o));
  refused("tracepool_write_oom_report", tracepool_write_oom_report(tp, "/dev/null", "json"));
  refused("tracepool_report_string", tracepool_report_string(tp, "json", &out));
  refused("tracepool_report_string", tracepool_report_string_with(tp, &o, &out));
  EXPECT_EQ(out, nullptr);
  refused("tracepool_torch_snapshot_string", tracepool_torch_snapshot_string(tp, &out));
  refused("tracepool_torch_snapshot_string", tracepool_snapshot_string(tp, &out));
  EXPECT_STREQ(tracepool_backend_name(tp), "");
  refused("tracepool_backend_name", TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(tp);  // nothing harmful: the handle is not followed, and the last error says so
  refused("tracepool_destroy", TRACEPOOL_ERR_INVALID_ARGUMENT);
}

TEST(CApiHandles, ADestroyedHandleIsRefusedEverywhereAndDestroyingItAgainIsHarmless) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK);
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK);
  tracepool_destroy(tp);
  expect_every_call_refuses(tp);
}

TEST(CApiHandles, AHandleNeverCreatedIsRefused) {
  int on_stack = 0;
  expect_every_call_refuses(reinterpret_cast<tracepool_t*>(&on_stack));
  expect_every_call_refuses(reinterpret_cast<tracepool_t*>(uintptr_t{0x1}));
}

// The registry, not the memory behind the pointer, says what is live: a destroyed handle whose
// address malloc hands out again, filled with a copy of a live handle's bytes, is still refused; an
// address a later tracepool_create returns is that new, live instance.
TEST(CApiHandles, AStaleAddressReusedByMallocIsStillRefused) {
  tracepool_t* live = nullptr;
  tracepool_t* stale = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &live), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_create("backend:host", &stale), TRACEPOOL_OK);
  std::vector<void*> taken;
  taken.reserve(4096);  // before the destroy: the vector's own buffer must not take the freed address
  tracepool_destroy(stale);
  void* reused = nullptr;
  for (int i = 0; i < 4096 && reused == nullptr; ++i) {  // sizes around a handle's: the same malloc bin
    void* q = std::malloc(16 + 8 * (i % 8));
    if (q == static_cast<void*>(stale)) reused = q;
    else taken.push_back(q);
  }
  if (reused != nullptr) std::memset(reused, 0xab, 16);  // whatever a new owner writes there
  expect_every_call_refuses(stale);
  for (void* q : taken) std::free(q);
  std::free(reused);
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(live, 64, 0, nullptr, &p), TRACEPOOL_OK) << "other handles are untouched";
  ASSERT_EQ(tracepool_free(live, p, nullptr), TRACEPOOL_OK);
  tracepool_destroy(live);
  if (reused == nullptr) std::printf("note: malloc did not hand the stale address out again in this build\n");
}

TEST(CApiHandles, ManyInstancesComeAndGo) {
  std::vector<tracepool_t*> live;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 64; ++i) {
      tracepool_t* tp = nullptr;
      ASSERT_EQ(tracepool_create("backend:host,capture:off", &tp), TRACEPOOL_OK) << tracepool_last_error();
      live.push_back(tp);
    }
    for (size_t i = 0; i < live.size(); i += 2) tracepool_destroy(std::exchange(live[i], nullptr));
    for (tracepool_t* tp : live) {
      int devices = 0;
      if (tp != nullptr) EXPECT_EQ(tracepool_device_count(tp, &devices), TRACEPOOL_OK) << tracepool_last_error();
    }
    live.erase(std::remove(live.begin(), live.end(), nullptr), live.end());
  }
  for (tracepool_t* tp : live) tracepool_destroy(tp);
  for (tracepool_t* tp : live) EXPECT_EQ(tracepool_validate(tp), TRACEPOOL_ERR_INVALID_ARGUMENT);
}

TEST(CApiDefault, DefaultInstanceIsSharedAndCannotBeDestroyed) {
  tracepool_t* a = tracepool_default();
  ASSERT_NE(a, nullptr) << tracepool_last_error();
  EXPECT_EQ(tracepool_default(), a);
  tracepool_destroy(a);  // refused: still usable afterwards
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(a, 64, 0, nullptr, &p), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(a, p, nullptr), TRACEPOOL_OK);
}

// tracepool_configure_default quotes both configuration texts when it refuses: capped and escaped.
TEST(CApiDefault, ARefusedReconfigurationQuotesBothTextsHarmlessly) {
  ASSERT_NE(tracepool_default(), nullptr) << tracepool_last_error();
  const std::string conf = "backend:host,\t" + std::string(100000, ' ') + "oom_report:off";
  EXPECT_EQ(tracepool_configure_default(conf.c_str()), TRACEPOOL_ERR_INVALID_ARGUMENT);
  const std::string e = tracepool_last_error();
  EXPECT_LT(e.size(), 1024u) << e.substr(0, 300);
  EXPECT_NE(e.find("'backend:host,\\x09     "), std::string::npos) << e.substr(0, 300);
  EXPECT_NE(e.find("... (100028 bytes)'"), std::string::npos) << e.substr(0, 300);
  EXPECT_EQ(e.find('\t'), std::string::npos) << e.substr(0, 300);
}

TEST(CApiTorch, EntryPointsUseTheDefaultInstance) {
  tracepool_t* tp = tracepool_default();
  ASSERT_NE(tp, nullptr);
  tracepool_stats_t before{}, during{};
  before.size = during.size = sizeof before;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &before), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_torch_alloc(0, 0, nullptr), nullptr) << "alloc(0) is handled";
  void* p = tracepool_torch_alloc(1 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(tracepool_get_stats(tp, 0, &during), TRACEPOOL_OK);
  EXPECT_EQ(during.allocation.current, before.allocation.current + 1);
  // The report says which runtime asked: PyTorch's entry point tags its allocations "torch".
  char* json = nullptr;
  ASSERT_EQ(tracepool_report_string(tp, "json", &json), TRACEPOOL_OK);
  EXPECT_NE(std::string(json).find("\"tags\":[\"torch\"]"), std::string::npos) << json;
  tracepool_string_free(json);
  EXPECT_EQ(tracepool_tag_pop(), TRACEPOOL_ERR_INVALID_ARGUMENT) << "the entry point popped its tag";
  tracepool_torch_free(p, 1 << 20, 0, nullptr);
  tracepool_torch_free(p, 1 << 20, 0, nullptr);  // a double free is reported, not fatal
  tracepool_torch_free(nullptr, 0, 0, nullptr);
  EXPECT_EQ(tracepool_torch_alloc(64, 99, nullptr), nullptr) << "bad device: NULL, never a throw";
  tracepool_stats_t after{};
  after.size = sizeof after;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &after), TRACEPOOL_OK);
  EXPECT_EQ(after.allocation.current, before.allocation.current);
  EXPECT_EQ(after.num_invalid_frees, before.num_invalid_frees + 1);
}

// The header's promise: each entry point tells a failure once per status, then stays silent. (The
// told kinds are per process: these are ones no other test here makes.)
TEST(CApiTorch, EachKindOfFailureIsToldOnce) {
  int dummy = 0;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) tracepool_torch_free(&dummy, 4, 0, nullptr);        // unknown pointer
  for (int i = 0; i < 5; ++i) EXPECT_EQ(tracepool_torch_alloc(~size_t{0} / 2, 0, nullptr), nullptr);  // absurd size
  for (int i = 0; i < 5; ++i) tracepool_torch_record_stream(&dummy, nullptr);       // not a live block
  const std::string told = ::testing::internal::GetCapturedStderr();
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = told.find(what); at != std::string::npos; at = told.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("tracepool: tracepool_torch_free failed: TRACEPOOL_ERR_UNKNOWN_POINTER"), 1u) << told;
  EXPECT_EQ(count("tracepool: tracepool_torch_alloc failed: TRACEPOOL_ERR_INVALID_ARGUMENT"), 1u) << told;
  EXPECT_EQ(count("tracepool: Tensor.record_stream failed: TRACEPOOL_ERR_UNKNOWN_POINTER"), 1u) << told;
  EXPECT_EQ(std::count(told.begin(), told.end(), '\n'), 3) << told;
}

}  // namespace
