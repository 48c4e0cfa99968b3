// The observer seam (Note [Observers]), the allocation history it feeds (history:N), the PyTorch
// export's device_traces drawn from it, and a failed validation that reports instead of aborting.
#include "history.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "device_cache.h"
#include "observer.h"
#include "report_support.h"
#include "test_support.h"
#include "tracepool/tracepool.h"

namespace tracepool::core {
namespace {

using testing::current;
using testing::host_allocator;
using testing::stats_of;
using tracepool::testing::json;

std::vector<history_action> actions(const std::vector<history_entry>& entries) {
  std::vector<history_action> out;
  for (const history_entry& e : entries) out.push_back(e.action);
  return out;
}

TEST(History, IsOffUnlessConfigured) {
  auto a = host_allocator();
  EXPECT_EQ(a->allocation_history(), nullptr);
}

// PyTorch's _record_memory_history turns the history on and off at run time (tracepool_record_history).
TEST(History, TurnedOnAtRunTimeRecordsFromThenOn) {
  auto a = host_allocator();
  void *before = nullptr, *after = nullptr;
  ASSERT_EQ(a->malloc(1000, 0, nullptr, &before), status::ok);
  ASSERT_EQ(a->record_history(16, false), status::ok) << last_error();
  ASSERT_NE(a->allocation_history(), nullptr);
  ASSERT_EQ(a->malloc(2000, 0, nullptr, &after), status::ok);
  ASSERT_EQ(a->free(before), status::ok);
  const std::vector<history_entry> e = a->allocation_history()->entries();
  EXPECT_EQ(actions(e), (std::vector<history_action>{history_action::alloc, history_action::free}));
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].address, reinterpret_cast<uintptr_t>(after));
  EXPECT_EQ(e[1].address, reinterpret_cast<uintptr_t>(before));
  ASSERT_EQ(a->free(after), status::ok);
}

TEST(History, ResizingKeepsTheNewestAndOffForgetsEverything) {
  auto a = host_allocator();
  ASSERT_EQ(a->record_history(8, false), status::ok);
  std::vector<void*> blocks(3);
  for (void*& p : blocks) ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok);
  for (void* p : blocks) ASSERT_EQ(a->free(p), status::ok);  // 6 events, and a segment_alloc first
  ASSERT_EQ(a->allocation_history()->entries().size(), 7u);
  ASSERT_EQ(a->record_history(2, false), status::ok) << last_error();
  std::vector<history_entry> e = a->allocation_history()->entries();
  ASSERT_EQ(e.size(), 2u) << "the newest two";
  EXPECT_EQ(e[0].address, reinterpret_cast<uintptr_t>(blocks[1]));
  EXPECT_EQ(e[1].address, reinterpret_cast<uintptr_t>(blocks[2]));
  EXPECT_EQ(e[1].action, history_action::free);
  void* p = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok);
  e = a->allocation_history()->entries();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].action, history_action::alloc) << "the ring goes on from where it was cut";
  EXPECT_EQ(e[0].address, reinterpret_cast<uintptr_t>(blocks[2]));

  ASSERT_EQ(a->record_history(0, false), status::ok);
  EXPECT_TRUE(a->allocation_history()->entries().empty()) << "off forgets";
  ASSERT_EQ(a->free(p), status::ok);
  EXPECT_TRUE(a->allocation_history()->entries().empty()) << "and records nothing while off";

  ASSERT_EQ(a->record_history(4, false), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->record_history(4, true), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  e = a->allocation_history()->entries();
  EXPECT_EQ(actions(e), std::vector<history_action>{history_action::free}) << "clear forgets what came before";
  EXPECT_EQ(a->record_history(max_history_entries + 1, false), status::invalid_argument);
}

namespace {
__attribute__((noinline)) void* allocate_here(allocator& a) {
  void* p = nullptr;
  EXPECT_EQ(a.malloc(4096, 0, nullptr, &p), status::ok);
  return p;
}
__attribute__((noinline)) void free_here(allocator& a, void* p) { EXPECT_EQ(a.free(p), status::ok); }

// The sites of one alloc and its free, recorded under the history's current choice.
std::pair<uint32_t, uint32_t> sites_of_a_pair(allocator& a) {
  free_here(a, allocate_here(a));
  const std::vector<history_entry> e = a.allocation_history()->entries();
  EXPECT_GE(e.size(), 2u);
  return {e[e.size() - 2].site, e.back().site};
}
}  // namespace

// Which events carry a call site is chosen as they are recorded (PyTorch's `context`).
TEST(History, EachEventCarriesTheSiteItsRecordingAskedFor) {
  auto a = host_allocator("capture:native");
  using frees = history::free_sites;
  ASSERT_EQ(a->record_history(16, false), status::ok);
  auto [alloc_site, free_site] = sites_of_a_pair(*a);
  EXPECT_NE(alloc_site, 0u);
  EXPECT_EQ(free_site, alloc_site) << "by default a free carries its allocation's site";
  ASSERT_EQ(a->record_history(16, false, true, frees::freeing), status::ok);
  std::tie(alloc_site, free_site) = sites_of_a_pair(*a);
  EXPECT_NE(free_site, 0u);
  EXPECT_NE(free_site, alloc_site) << "the free's own call site";
  ASSERT_EQ(a->record_history(16, false, true, frees::none), status::ok);
  std::tie(alloc_site, free_site) = sites_of_a_pair(*a);
  EXPECT_NE(alloc_site, 0u);
  EXPECT_EQ(free_site, 0u);
  ASSERT_EQ(a->record_history(16, false, false, frees::none), status::ok);
  std::tie(alloc_site, free_site) = sites_of_a_pair(*a);
  EXPECT_EQ(alloc_site, 0u);
  EXPECT_EQ(free_site, 0u);
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_record_history(tp, 16, TRACEPOOL_HISTORY_NO_FREE_SITES | TRACEPOOL_HISTORY_FREEING_SITES),
            TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_record_history(tp, 16, 64), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_record_history(tp, 16, TRACEPOOL_HISTORY_FREEING_SITES | TRACEPOOL_HISTORY_CLEAR), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

TEST(History, RecordsEveryEventWithItsBlockStreamDeviceAndSite) {
  auto a = host_allocator("history:64,capture:native");
  const uint64_t before = realtime_ns();
  void* stream = nullptr;
  ASSERT_EQ(a->device_backend().create_stream(0, &stream), status::ok);
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(a->malloc(1000, 0, stream, &p), status::ok);  // grows a 2 MiB segment, then the block
  ASSERT_EQ(a->malloc(3000, 0, stream, &q), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->free(q), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok);  // the segment goes back
  uint64_t recorded = 0;
  const std::vector<history_entry> h = a->allocation_history()->entries(&recorded);
  const uint64_t after = realtime_ns();
  using A = history_action;
  ASSERT_EQ(actions(h), (std::vector<A>{A::segment_alloc, A::alloc, A::alloc, A::free, A::free, A::segment_free}));
  EXPECT_EQ(recorded, 6u);
  EXPECT_EQ(h[0].size, size_t{2} << 20);
  EXPECT_EQ(h[0].address, h[5].address);
  EXPECT_EQ(h[1].address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(h[1].size, 1024u);  // rounded to 512
  EXPECT_EQ(h[1].requested, 1000u);
  EXPECT_EQ(h[3].address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(h[3].requested, 1000u);
  EXPECT_EQ(h[4].address, reinterpret_cast<uintptr_t>(q));
  for (const history_entry& e : h) {
    EXPECT_EQ(e.stream, reinterpret_cast<uintptr_t>(stream));
    EXPECT_EQ(e.device, 0);
    EXPECT_NE(e.site, 0u) << "every event names the call site that caused it";
    // Clock ticks turned into CLOCK_REALTIME: within the test's own span (1 ms of slack for the rate).
    EXPECT_GE(e.time_ns + 1000000, before);
    EXPECT_LE(e.time_ns, after + 1000000);
  }
  for (size_t i = 1; i < h.size(); ++i) EXPECT_GE(h[i].time_ns, h[i - 1].time_ns);
  EXPECT_NE(h[1].site, h[2].site) << "two call sites";
  EXPECT_EQ(h[1].site, h[3].site) << "a free names the site that allocated";
}

TEST(History, KeepsTheLastNEventsOldestFirst) {
  auto a = host_allocator("history:5,capture:off");
  std::vector<void*> ptrs;
  for (size_t i = 1; i <= 10; ++i) {
    void* p = nullptr;
    ASSERT_EQ(a->malloc(i * 512, 0, nullptr, &p), status::ok);
    ptrs.push_back(p);
  }
  uint64_t recorded = 0;
  const std::vector<history_entry> h = a->allocation_history()->entries(&recorded);
  EXPECT_EQ(recorded, 11u);  // one segment, ten blocks
  ASSERT_EQ(h.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(h[i].action, history_action::alloc);
    EXPECT_EQ(h[i].requested, (6 + i) * 512) << "the newest five, oldest first";
  }
  const std::vector<history_entry> newest = a->allocation_history()->entries(&recorded, 2);
  ASSERT_EQ(newest.size(), 2u) << "no more than asked for";
  EXPECT_EQ(newest[0].requested, 9u * 512);
  EXPECT_EQ(newest[1].requested, 10u * 512);
  EXPECT_EQ(recorded, 11u);
  for (void* p : ptrs) ASSERT_EQ(a->free(p), status::ok);
}

// A segment leaves the history before the backend has it (so that a grow getting the same address
// cannot come first), and a release the backend refuses puts it back in the history too.
TEST(History, ARefusedReleaseIsToldAsTheSegmentComingBack) {
  size_t release_call = 0;  // which backend call the release is: every call before it, plus one
  {
    auto probe = host_allocator("capture:off");
    void* p = nullptr;
    ASSERT_EQ(probe->malloc(4096, 0, nullptr, &p), status::ok);
    ASSERT_EQ(probe->free(p), status::ok);
    backend::host_ledger ledger;
    ASSERT_TRUE(backend::read_host_ledger(probe->device_backend(), &ledger));
    release_call = ledger.calls + 1;
  }
  auto a = host_allocator("history:16,capture:off,fail_call:" + std::to_string(release_call));
  void* p = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  EXPECT_EQ(a->empty_cache(0), status::backend_error);
  ASSERT_EQ(a->empty_cache(0), status::ok) << last_error();
  using A = history_action;
  const std::vector<history_entry> h = a->allocation_history()->entries();
  EXPECT_EQ(actions(h), (std::vector<A>{A::segment_alloc, A::alloc, A::free, A::segment_free, A::segment_alloc,
                                        A::segment_free}));
  for (const history_entry& e : h) EXPECT_EQ(e.address, h[0].address);
}

TEST(History, RecordsAnOutOfMemoryWithWhatWasAskedAndWhatWasFree) {
  auto a = host_allocator("history:16,host_capacity:64MiB,oom_report:off");
  void* p = nullptr;
  EXPECT_EQ(a->malloc(size_t{100} << 20, 0, nullptr, &p), status::out_of_memory);
  const std::vector<history_entry> h = a->allocation_history()->entries();
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h.back().action, history_action::oom);
  EXPECT_EQ(h.back().size, size_t{100} << 20);
  EXPECT_EQ(h.back().address, size_t{64} << 20) << "the device's free bytes";
}

TEST(History, BadSizesAreConfigurationErrors) {
  for (const char* text : {"history:-1", "history:lots", "history:67108865", "history:"}) {
    config cfg;
    EXPECT_EQ(parse_config(text, &cfg), status::bad_config) << text;
    EXPECT_NE(std::string(last_error()).find("history"), std::string::npos) << last_error();
  }
  config cfg;
  ASSERT_EQ(parse_config("history:67108864", &cfg), status::ok);
  EXPECT_EQ(cfg.history, size_t{1} << 26);
}

// Counts what it hears, and checks that a free is heard while the block is not yet anyone else's.
class counting_observer final : public observer {
 public:
  void on_alloc(const block_event& e) override {
    ++allocs;
    bytes += static_cast<int64_t>(e.requested);
  }
  void on_free(const block_event& e) override {
    ++frees;
    bytes -= static_cast<int64_t>(e.requested);
  }
  void on_segment_alloc(const segment_event& e) override { segment_bytes += static_cast<int64_t>(e.size); }
  void on_segment_free(const segment_event& e) override { segment_bytes -= static_cast<int64_t>(e.size); }
  void on_oom(const oom_event& e) override {
    ++ooms;
    *e.detail += "the observer was here";
  }
  status on_mark(const mark_event& e) override {
    marks.push_back(e.label);
    return status::ok;
  }
  int allocs = 0, frees = 0, ooms = 0;
  int64_t bytes = 0, segment_bytes = 0;
  std::vector<std::string> marks;
};

TEST(Observers, HearEveryEventAndMayAddToTheOutOfMemoryMessage) {
  counting_observer seen;
  auto a = host_allocator("host_capacity:64MiB,oom_report:off");
  ASSERT_EQ(a->subscribe(&seen), status::ok);
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(a->malloc(5000, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->malloc(size_t{30} << 20, 0, nullptr, &q), status::ok);
  EXPECT_EQ(seen.bytes, 5000 + (int64_t{30} << 20));
  EXPECT_EQ(seen.segment_bytes, current(stats_of(*a), stat_kind::reserved_bytes)) << "every byte obtained was heard";
  EXPECT_GE(seen.segment_bytes, (int64_t{2} << 20) + (int64_t{30} << 20));
  ASSERT_EQ(a->mark("epoch 1"), status::ok);
  EXPECT_EQ(seen.marks, std::vector<std::string>{"epoch 1"});
  void* big = nullptr;
  EXPECT_EQ(a->malloc(size_t{60} << 20, 0, nullptr, &big), status::out_of_memory);
  EXPECT_EQ(seen.ooms, 1);
  EXPECT_NE(std::string(last_error()).find("the observer was here"), std::string::npos) << last_error();
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->free(q), status::ok);
  EXPECT_EQ(seen.allocs, 2);
  EXPECT_EQ(seen.frees, 2);
  EXPECT_EQ(seen.bytes, 0);
  ASSERT_EQ(a->empty_cache(-1), status::ok);
  EXPECT_EQ(seen.segment_bytes, 0) << "every segment obtained was heard returned";
}

TEST(Observers, AFullListIsAnErrorNotACrash) {
  auto a = host_allocator();  // the tracer is subscribed already
  std::vector<counting_observer> many(observer_list::capacity);
  int accepted = 0;
  for (auto& o : many) accepted += a->subscribe(&o) == status::ok;
  EXPECT_EQ(accepted, observer_list::capacity - 1);
  counting_observer one_more;
  EXPECT_EQ(a->subscribe(&one_more), status::internal);
  void* p = nullptr;
  ASSERT_EQ(a->malloc(512, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  for (int i = 0; i < accepted; ++i) EXPECT_EQ(many[static_cast<size_t>(i)].frees, 1);
  EXPECT_EQ(one_more.allocs, 0);
}

// A broken invariant (a bug in tracepool, simulated here by corrupting a block) fails the operation
// with status::internal naming it; nothing aborts, and once the damage is undone the pool works on.
TEST(Validation, ABrokenInvariantIsAnErrorAndThePoolStaysUsable) {
  auto be = backend::make_host_backend(host_options{});
  observer_list none;
  capture_gate gate;
  device_cache dev(*be, gate, 0, 0, /*validate=*/true, none);
  stream_pool* pool = dev.pool_for(nullptr);
  block* b = nullptr;
  ASSERT_EQ(dev.malloc(pool, 4096, block_tag{}, &b), status::ok);
  block* c = nullptr;
  ASSERT_EQ(dev.malloc(pool, 4096, block_tag{}, &c), status::ok);
  b->size += 512;  // the blocks of its segment no longer add up
  block* d = nullptr;
  EXPECT_EQ(dev.malloc(pool, 4096, block_tag{}, &d), status::internal);
  EXPECT_NE(std::string(last_error()).find("invariant broken on device 0 after an allocation"), std::string::npos)
      << last_error();
  EXPECT_EQ(d, nullptr) << "nothing handed out with a broken pool";
  bool taken = false;
  EXPECT_EQ(dev.free(c, &taken), status::internal);
  EXPECT_TRUE(taken) << "the free itself was done";
  b->size -= 512;
  EXPECT_EQ(dev.validate(), status::ok) << last_error();
  ASSERT_EQ(dev.free(b, &taken), status::ok);
  ASSERT_EQ(dev.malloc(pool, 8192, block_tag{}, &d), status::ok);
  ASSERT_EQ(dev.free(d, &taken), status::ok);
  EXPECT_EQ(dev.validate(), status::ok) << last_error();
}

// The PyTorch export's device_traces is the history, in PyTorch's actions, when history:N is on.
TEST(TorchSnapshot, DeviceTracesIsTheHistoryWhenItIsOn) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,history:100,capture:native", &tp), TRACEPOOL_OK);
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 1 << 20, 0, nullptr, &p), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &q), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  char* text = nullptr;
  ASSERT_EQ(tracepool_torch_snapshot_string(tp, &text), TRACEPOOL_OK) << tracepool_last_error();
  const json snap = json::parse(text);
  tracepool_string_free(text);
  const json& trace = snap["device_traces"][0];
  std::vector<std::string> seen;
  for (const json& e : trace) seen.push_back(e["action"]);
  EXPECT_EQ(seen, (std::vector<std::string>{"segment_alloc", "alloc", "alloc", "free_requested", "free_completed"}));
  EXPECT_EQ(trace[1]["addr"].get<uintptr_t>(), reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(trace[1]["size"].get<size_t>(), size_t{1} << 20);
  EXPECT_EQ(trace[4]["addr"].get<uintptr_t>(), reinterpret_cast<uintptr_t>(p));
  EXPECT_GT(trace[1]["time_us"].get<int64_t>(), 0);
  EXPECT_FALSE(trace[1]["frames"].empty()) << "the alloc names its call site";
  EXPECT_EQ(snap["allocator_settings"]["history"], 100);
  ASSERT_EQ(tracepool_free(tp, q, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

TEST(TorchSnapshot, WithoutHistoryDeviceTracesHoldsOneAllocPerLiveBlock) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &q), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  char* text = nullptr;
  ASSERT_EQ(tracepool_snapshot_string(tp, &text), TRACEPOOL_OK) << "the former name still answers";
  const json snap = json::parse(text);
  tracepool_string_free(text);
  const json& trace = snap["device_traces"][0];
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0]["action"], "alloc");
  EXPECT_EQ(trace[0]["addr"].get<uintptr_t>(), reinterpret_cast<uintptr_t>(q));
  ASSERT_EQ(tracepool_free(tp, q, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

// A free block shows what the last allocation freed into it asked, as PyTorch's snapshot does (its
// memory plots look for that size after filtering freed allocations out); the segment's requested_size
// counts only what is allocated.
TEST(TorchSnapshot, AFreeBlockKeepsTheRequestOfTheLastAllocationFreedIntoIt) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,segments:classic", &tp), TRACEPOOL_OK);
  void *first = nullptr, *second = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 65536, 0, nullptr, &first), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 1000, 0, nullptr, &second), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, second, nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, first, nullptr), TRACEPOOL_OK);  // merged with the rest: one free block
  char* text = nullptr;
  ASSERT_EQ(tracepool_torch_snapshot_string(tp, &text), TRACEPOOL_OK);
  const json snap = json::parse(text);
  tracepool_string_free(text);
  ASSERT_EQ(snap["segments"].size(), 1u);
  const json& segment = snap["segments"][0];
  ASSERT_EQ(segment["blocks"].size(), 1u);
  EXPECT_EQ(segment["blocks"][0]["state"], "inactive");
  EXPECT_EQ(segment["blocks"][0]["requested_size"], 65536) << "the last freed into it";
  EXPECT_EQ(segment["requested_size"], 0) << "nothing allocated";
  tracepool_stats_t st{};
  st.size = sizeof st;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &st), TRACEPOOL_OK);
  EXPECT_EQ(st.requested_bytes.current, 0);
  ASSERT_EQ(tracepool_validate(tp), TRACEPOOL_OK) << tracepool_last_error();
  tracepool_destroy(tp);
}

// PyTorch's readers (its memory-stat consistency check, MemPool tests) tell growable segments, whose
// segment count they do not take, from classic ones by is_expandable.
TEST(TorchSnapshot, GrowableSegmentsAreExpandableAndClassicOnesAreNot) {
  for (const char* conf : {"backend:host,segments:growable", "backend:host,segments:classic"}) {
    tracepool_t* tp = nullptr;
    ASSERT_EQ(tracepool_create(conf, &tp), TRACEPOOL_OK) << tracepool_last_error();
    void* p = nullptr;
    ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK);
    char* text = nullptr;
    ASSERT_EQ(tracepool_torch_snapshot_string(tp, &text), TRACEPOOL_OK);
    const json snap = json::parse(text);
    tracepool_string_free(text);
    ASSERT_EQ(snap["segments"].size(), 1u) << conf;
    EXPECT_EQ(snap["segments"][0]["is_expandable"].get<bool>(), std::string(conf).find("growable") != std::string::npos)
        << conf;
    ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
    tracepool_destroy(tp);
  }
}

// Note [Site counters]: a site's counters hear a free once the pool has the block (`freed`); a free
// the pool refuses is undone for its `free` listeners (the history) and never reaches the counters.
TEST(History, ARefusedFreeLeavesTheSiteCountersAsTheyWere) {
  auto stream = [](int i) { return reinterpret_cast<tracepool::backend::stream_handle>(4096 * (1 + i)); };
  size_t record_call = 0;  // the free's event creation: every backend call before it, plus one
  {
    auto probe = host_allocator("capture:native");
    void* p = nullptr;
    ASSERT_EQ(probe->malloc(4096, 0, stream(0), &p), status::ok);
    ASSERT_EQ(probe->record_stream(p, stream(1)), status::ok);
    backend::host_ledger ledger;
    ASSERT_TRUE(backend::read_host_ledger(probe->device_backend(), &ledger));
    record_call = ledger.calls + 1;
    ASSERT_EQ(probe->free(p), status::ok);
  }
  auto a = host_allocator("history:16,capture:native,fail_call:" + std::to_string(record_call));
  void* p = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(0), &p), status::ok);
  ASSERT_EQ(a->record_stream(p, stream(1)), status::ok);
  call_site_table& sites = a->call_sites().sites();
  ASSERT_EQ(sites.end(), 2u) << "one site";
  ASSERT_EQ(a->free(p), status::backend_error) << "the injected failure";
  EXPECT_EQ(sites.at(1).live_bytes(), 4096);
  EXPECT_EQ(sites.at(1).total_bytes.load(), 4096);
  using A = history_action;
  EXPECT_EQ(actions(a->allocation_history()->entries()), (std::vector<A>{A::segment_alloc, A::alloc, A::free, A::alloc}));
  ASSERT_EQ(a->free(p), status::ok) << last_error();
  EXPECT_EQ(sites.at(1).live_bytes(), 0);
  EXPECT_EQ(sites.at(1).total_bytes.load(), 4096);
  EXPECT_EQ(sites.at(1).peak_bytes.load(), 4096);
}

}  // namespace
}  // namespace tracepool::core
