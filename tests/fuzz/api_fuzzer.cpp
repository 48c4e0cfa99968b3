// api_fuzzer.cpp: random operation sequences through the C API, from one thread or several, checked
// against a reference model (api_model.h) after every step. libFuzzer's entry point; replay_main.cpp
// runs the same function over files without libFuzzer. The input format is in byte_code.h.
//
// Each input runs on its own instance, destroyed at the end after every block is freed and the cache
// emptied (then nothing may be left reserved). TRACEPOOL_FUZZ_THREADS=one or many makes the other
// kind of input a no-op (return -1: not added to the corpus), so that run.sh fuzzes each kind alone.
// TRACEPOOL_FUZZ_TRACE=1 prints every op as it runs.
#include <dirent.h>
#include <sys/stat.h>
#include <tracepool/tracepool.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api_model.h"
#include "byte_code.h"
#include "json_check.h"

namespace fuzz {
namespace {

bool good_device(int d) { return d >= 0 && d < device_count; }

int g_global;  // a global's address is never a block

struct instance {
  tracepool_t* tp = nullptr;
  model m;
  bool capture = false;
  std::string dir;  // where reports are written
};

// What one thread owns: its live blocks, the pointers it freed, its tag depth.
struct thread_state {
  int id = 0;
  std::vector<uintptr_t> blocks;
  std::array<uintptr_t, 16> stale{};
  size_t stale_count = 0;
  int tags = 0;
  uint64_t serial = 0;
  char where[96] = "";
};

// Blocks larger than this never fit in a device, whatever the limit.
bool cannot_fit(size_t size, size_t capacity) { return size > capacity; }

// PyTorch's segment policy: a request needs at most a 20 MiB segment or itself rounded to 2 MiB.
size_t worst_segment(size_t size) {
  const size_t rounded = (size + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
  return rounded < 20 * MiB ? 20 * MiB : rounded;
}

// Small blocks are filled with the canary's low byte; larger ones get it at their start and end.
void write_canary(uintptr_t p, size_t size, uint64_t canary) {
  auto* bytes = reinterpret_cast<unsigned char*>(p);
  if (size < 16) return (void)std::memset(bytes, static_cast<unsigned char>(canary), size);
  std::memcpy(bytes, &canary, 8);
  bytes[size - 1] = static_cast<unsigned char>(canary >> 56);
}

void check_canary(uintptr_t p, const live_block& b, const char* where) {
  auto* bytes = reinterpret_cast<unsigned char*>(p);
  bool intact = true;
  if (b.size < 16) {
    for (size_t k = 0; k < b.size; ++k) intact &= bytes[k] == static_cast<unsigned char>(b.canary);
  } else {
    uint64_t seen = 0;
    std::memcpy(&seen, bytes, 8);
    intact = seen == b.canary && bytes[b.size - 1] == static_cast<unsigned char>(b.canary >> 56);
  }
  FUZZ_EXPECT(intact, "block %#zx (%zu bytes, device %d) was overwritten while live", static_cast<size_t>(p), b.size,
              b.device);
}

// TRACEPOOL_FUZZ_TRACE=1 prints every op as it runs (for writing seeds and reading a crash).
bool tracing() {
  static const bool on = std::getenv("TRACEPOOL_FUZZ_TRACE") != nullptr;
  return on;
}

// Operations run in this process (each checked against the model), and the bad inputs among them
// refused with exactly the status the model predicted, by status; printed at exit for run.sh.
std::atomic<uint64_t> operations_run{0};
std::atomic<uint64_t> refused_as_predicted[10];  // index -status
const int print_operations_at_exit = std::atexit([] {
  std::fprintf(stderr, "api_fuzzer: %llu operations run\n",
               static_cast<unsigned long long>(operations_run.load()));
  std::fprintf(stderr, "api_fuzzer: bad inputs refused as predicted:");
  for (int s = 1; s < 10; ++s)
    if (const uint64_t n = refused_as_predicted[s].load(); n != 0) {
      const char* name = tracepool_status_string(-s);  // "TRACEPOOL_ERR_X: words": the name only
      std::fprintf(stderr, " %.*s %llu", static_cast<int>(std::strcspn(name, ":")), name,
                   static_cast<unsigned long long>(n));
    }
  std::fprintf(stderr, "\n");
});

class runner {
 public:
  runner(instance& in, thread_state& t) : in_(in), m_(in.m), t_(t), where(t.where) {}

  void run(const op& o) {
    operations_run.fetch_add(1, std::memory_order_relaxed);
    std::snprintf(t_.where, sizeof t_.where, "op #%zu %s, thread %d", o.index, op_names[o.code], t_.id);
    if (tracing()) {
      std::fprintf(stderr, "api_fuzzer: %s:", where);
      for (int k = 0; k < arg_count[o.code]; ++k) std::fprintf(stderr, " %u", o.a[k]);
      std::fprintf(stderr, "\n");
    }
    switch (o.code) {
      case op_malloc:
        malloc_op(size_of(o.a[2], o.v(3), m_.capacity), device_of(o.a[0]), stream_of(o.a[1]));
        break;
      case op_free_live:
        free_live(o.a[0]);
        break;
      case op_free_stale:
        free_stale(o.a[0]);
        break;
      case op_free_inner:
        free_inner(o.a[0], o.v(1));
        break;
      case op_free_bogus:
        free_bogus(o.a[0]);
        break;
      case op_record:
        record(o.a[0], o.a[1], stream_of(o.a[2]));
        break;
      case op_empty:
        empty(device_of(o.a[0]));
        break;
      case op_limit:
        limit(device_of(o.a[0]), size_of(o.a[1], o.v(2), m_.capacity));
        break;
      case op_stats:
        stats(device_of(o.a[0]), o.a[1]);
        break;
      case op_reset:
        reset(device_of(o.a[0]), o.a[1] & 1);
        break;
      case op_mark:
        mark(o.a[0]);
        break;
      case op_tag_push:
        tag_push(o.a[0]);
        break;
      case op_tag_pop:
        tag_pop();
        break;
      case op_report:
        report(o.a[0]);
        break;
      case op_info:
        info(device_of(o.a[0]), o.a[1] & 1);
        break;
      case op_validate:
        expect(tracepool_validate(in_.tp), TRACEPOOL_OK, "validate");
        break;
      case op_misc:
        misc(o.a[0]);
        break;
      case op_churn:
        churn(o.a[0] % 8 + 1, o.a[1] % 2);
        break;
    }
    // After every step: the invariants, and with one thread, everything the model knows.
    if (m_.one_thread)
      check_exact(in_.tp, m_, true, true, where);
    else
      expect(tracepool_validate(in_.tp), TRACEPOOL_OK, "validate");
  }

  // Frees what the thread still holds and pops its tags.
  void finish() {
    std::snprintf(t_.where, sizeof t_.where, "end of input, thread %d", t_.id);
    while (!t_.blocks.empty()) free_own(t_.blocks.size() - 1);
    while (t_.tags > 0) tag_pop();
  }

 private:
  void expect(int rc, int want, const char* call) {
    FUZZ_EXPECT(rc == want, "%s returned %d (%s), expected %d", call, rc, tracepool_status_string(rc), want);
    if (want < 0 && want > -10) refused_as_predicted[-want].fetch_add(1, std::memory_order_relaxed);
  }

  void malloc_op(size_t size, int device, void* stream) {
    std::shared_lock<std::shared_mutex> handout(m_.handout);
    bool must_succeed = false;
    if (m_.one_thread && good_device(device) && size != 0 && !cannot_fit(size, m_.capacity)) {
      std::lock_guard<std::mutex> lock(m_.mutex);
      const size_t limit = m_.limit[device];
      must_succeed =
          m_.count[device] == 0 && worst_segment(size) <= m_.capacity && (limit == 0 || worst_segment(size) <= limit);
    }
    void* p = reinterpret_cast<void*>(1);
    const int rc = tracepool_malloc(in_.tp, size, device, stream, &p);
    if (!good_device(device)) return expect(rc, TRACEPOOL_ERR_INVALID_DEVICE, "malloc on a bad device");
    if (size == 0) {
      expect(rc, TRACEPOOL_OK, "malloc(0)");
      FUZZ_EXPECT(p == nullptr, "malloc(0) gave %p, expected NULL", p);
      return;
    }
    if (cannot_fit(size, m_.capacity)) {
      FUZZ_EXPECT(rc == TRACEPOOL_ERR_OOM || rc == TRACEPOOL_ERR_INVALID_ARGUMENT,
                  "malloc(%zu) larger than the device returned %d", size, rc);
      if (rc == TRACEPOOL_ERR_OOM) count_oom(device);
      return;
    }
    if (rc == TRACEPOOL_ERR_OOM && !must_succeed) return count_oom(device);
    FUZZ_EXPECT(rc == TRACEPOOL_OK, "malloc(%zu, device %d) returned %d (%s)%s", size, device, rc,
                tracepool_status_string(rc), must_succeed ? " on a device holding no block" : "");
    const auto a = reinterpret_cast<uintptr_t>(p);
    FUZZ_EXPECT(p != nullptr && a % 256 == 0, "malloc(%zu) gave %p: NULL or not 256-byte aligned", size, p);
    const uint64_t canary = (a * 0x9E3779B97F4A7C15ull) ^ (++t_.serial << 8) ^ static_cast<uint64_t>(t_.id);
    m_.insert(where, a, size, device, canary);  // fails on overlap
    write_canary(a, size, canary);              // the memory is host memory: it must be writable
    t_.blocks.push_back(a);
  }

  void count_oom(int device) {
    std::lock_guard<std::mutex> lock(m_.mutex);
    ++m_.ooms[device];
    m_.oom_seen = true;
  }

  void free_live(uint8_t i) {
    if (t_.blocks.empty()) return expect(tracepool_free(in_.tp, nullptr, nullptr), TRACEPOOL_OK, "free(NULL)");
    free_own(i % t_.blocks.size());
  }

  void free_own(size_t k) {
    std::shared_lock<std::shared_mutex> handout(m_.handout);
    const uintptr_t a = t_.blocks[k];
    t_.blocks[k] = t_.blocks.back();
    t_.blocks.pop_back();
    const live_block b = m_.erase(a);
    check_canary(a, b, where);
    const int rc = tracepool_free(in_.tp, reinterpret_cast<void*>(a), nullptr);
    FUZZ_EXPECT(rc == TRACEPOOL_OK, "free of live block %#zx (%zu bytes, device %d) returned %d (%s)",
                static_cast<size_t>(a), b.size, b.device, rc, tracepool_status_string(rc));
    t_.stale[t_.stale_count++ % t_.stale.size()] = a;
  }

  // A pointer this thread freed; if it is live again (tracepool handed it out anew), only the
  // thread that owns it may free it.
  void free_stale(uint8_t i) {
    if (t_.stale_count == 0) return;
    const uintptr_t a = t_.stale[i % std::min(t_.stale_count, t_.stale.size())];
    if (m_.one_thread) {
      for (size_t k = 0; k < t_.blocks.size(); ++k)
        if (t_.blocks[k] == a) return free_own(k);
    }
    std::unique_lock<std::shared_mutex> handout(m_.handout);
    if (m_.is_live(a)) return;
    const int rc = tracepool_free(in_.tp, reinterpret_cast<void*>(a), nullptr);
    FUZZ_EXPECT(rc == TRACEPOOL_ERR_DOUBLE_FREE || rc == TRACEPOOL_ERR_UNKNOWN_POINTER,
                "free of stale pointer %#zx returned %d (%s)", static_cast<size_t>(a), rc, tracepool_status_string(rc));
    ++m_.invalid_frees;
  }

  // An address inside one of the thread's live blocks: its segment is held, so it is tracepool's.
  bool interior(uint8_t i, uint16_t offset, uintptr_t* out) {
    if (t_.blocks.empty()) return false;
    const uintptr_t a = t_.blocks[i % t_.blocks.size()];
    std::lock_guard<std::mutex> lock(m_.mutex);
    const size_t size = m_.live.at(a).size;
    if (size < 2) return false;
    *out = a + 1 + offset % (size - 1);
    return true;
  }

  void free_inner(uint8_t i, uint16_t offset) {
    uintptr_t p = 0;
    if (!interior(i, offset, &p)) return;
    const int rc = tracepool_free(in_.tp, reinterpret_cast<void*>(p), nullptr);
    FUZZ_EXPECT(rc == TRACEPOOL_ERR_DOUBLE_FREE, "free of interior pointer %#zx of a live block returned %d (%s)",
                static_cast<size_t>(p), rc, tracepool_status_string(rc));
    ++m_.invalid_frees;
  }

  void free_bogus(uint8_t b) {
    int on_stack = 0;
    void* heap = std::malloc(64);
    void* const bogus[] = {&on_stack, reinterpret_cast<void*>(0x1000),           heap,
                           &g_global, reinterpret_cast<void*>(~uintptr_t{0xff}), nullptr};
    void* p = bogus[b % 6];
    const int rc = tracepool_free(in_.tp, p, nullptr);
    std::free(heap);
    if (p == nullptr) return expect(rc, TRACEPOOL_OK, "free(NULL)");
    FUZZ_EXPECT(rc == TRACEPOOL_ERR_UNKNOWN_POINTER, "free of bogus pointer %p returned %d (%s)", p, rc,
                tracepool_status_string(rc));
    ++m_.invalid_frees;
  }

  void record(uint8_t i, uint8_t which, void* stream) {
    uintptr_t p = 0;
    switch (which % 4) {
      case 0:
        if (t_.blocks.empty()) return;
        return expect(tracepool_record_stream(in_.tp, reinterpret_cast<void*>(t_.blocks[i % t_.blocks.size()]), stream),
                      TRACEPOOL_OK, "record_stream of a live block");
      case 1: {
        if (t_.stale_count == 0) return;
        p = t_.stale[i % std::min(t_.stale_count, t_.stale.size())];
        std::unique_lock<std::shared_mutex> handout(m_.handout);
        const int want = m_.is_live(p) ? TRACEPOOL_OK : TRACEPOOL_ERR_UNKNOWN_POINTER;
        return expect(tracepool_record_stream(in_.tp, reinterpret_cast<void*>(p), stream), want,
                      "record_stream of a stale pointer");
      }
      case 2:
        if (!interior(i, i * 977u, &p)) return;
        return expect(tracepool_record_stream(in_.tp, reinterpret_cast<void*>(p), stream),
                      TRACEPOOL_ERR_UNKNOWN_POINTER, "record_stream of an interior pointer");
      default:
        return expect(tracepool_record_stream(in_.tp, nullptr, stream), TRACEPOOL_ERR_INVALID_ARGUMENT,
                      "record_stream(NULL)");
    }
  }

  void empty(int device) {
    const int rc = tracepool_empty_cache(in_.tp, device);
    if (!good_device(device) && device != -1) return expect(rc, TRACEPOOL_ERR_INVALID_DEVICE, "empty_cache(bad)");
    expect(rc, TRACEPOOL_OK, "empty_cache");
    if (!m_.one_thread) return;
    for (int d = 0; d < device_count; ++d) {
      if ((device != -1 && d != device) || m_.count[d] != 0) continue;
      const tracepool_stats_t s = stats_of(in_.tp, d, where);
      FUZZ_EXPECT(s.reserved_bytes.current == 0 && s.segment.current == 0,
                  "device %d holds no block, yet keeps %llu bytes in %llu segments after empty_cache", d,
                  (unsigned long long)s.reserved_bytes.current, (unsigned long long)s.segment.current);
    }
  }

  void limit(int device, size_t bytes) {
    const int rc = tracepool_set_limit(in_.tp, device, bytes);
    // Reports carry byte counts as int64: a larger limit is refused before the device is looked at.
    if (bytes > size_t{INT64_MAX}) return expect(rc, TRACEPOOL_ERR_INVALID_ARGUMENT, "set_limit(past INT64_MAX)");
    if (!good_device(device) && device != -1) return expect(rc, TRACEPOOL_ERR_INVALID_DEVICE, "set_limit(bad)");
    expect(rc, TRACEPOOL_OK, "set_limit");
    std::lock_guard<std::mutex> lock(m_.mutex);
    for (int d = 0; d < device_count; ++d)
      if (device == -1 || d == device) m_.limit[d] = bytes;
  }

  void stats(int device, uint8_t shape) {
    tracepool_stats_t s;
    std::memset(&s, 0xab, sizeof s);
    const size_t older = offsetof(tracepool_stats_t, small_pool);  // a caller built before the pools
    static constexpr size_t sizes[] = {sizeof(tracepool_stats_t), offsetof(tracepool_stats_t, small_pool), 8, 0};
    s.size = sizes[shape % 4];
    const int rc = tracepool_get_stats(in_.tp, device, shape % 4 == 3 ? nullptr : &s);
    if (shape % 4 >= 2) return expect(rc, TRACEPOOL_ERR_INVALID_ARGUMENT, "get_stats with a bad struct");
    if (!good_device(device)) return expect(rc, TRACEPOOL_ERR_INVALID_DEVICE, "get_stats(bad)");
    expect(rc, TRACEPOOL_OK, "get_stats");
    if (shape % 4 == 1) {
      FUZZ_EXPECT(s.size == older, "get_stats changed size %zu to %zu", older, s.size);
      const auto* tail = reinterpret_cast<const unsigned char*>(&s) + older;
      for (size_t k = 0; k < sizeof s - older; ++k)
        FUZZ_EXPECT(tail[k] == 0xab, "get_stats wrote byte %zu past the caller's struct of %zu", older + k, older);
      return;
    }
    FUZZ_EXPECT(s.size == sizeof s, "get_stats set size %zu", s.size);
    check_stats_shape(s, device, m_.one_thread, where);
  }

  void reset(int device, bool peak) {
    const int rc =
        peak ? tracepool_reset_peak_stats(in_.tp, device) : tracepool_reset_accumulated_stats(in_.tp, device);
    if (!good_device(device) && device != -1) return expect(rc, TRACEPOOL_ERR_INVALID_DEVICE, "reset(bad)");
    expect(rc, TRACEPOOL_OK, peak ? "reset_peak_stats" : "reset_accumulated_stats");
    std::lock_guard<std::mutex> lock(m_.mutex);
    for (int d = 0; d < device_count; ++d) {
      if (device != -1 && d != device) continue;
      if (peak) {
        if (!m_.one_thread) continue;
        const tracepool_stats_t s = stats_of(in_.tp, d, where);
        const tracepool_stat_t* all = &s.allocation;
        for (int k = 0; k < 9; ++k)
          FUZZ_EXPECT(all[k].peak == all[k].current, "device %d stat %d: peak %llu after reset_peak, current %llu", d,
                      k, (unsigned long long)all[k].peak, (unsigned long long)all[k].current);
      } else {
        m_.count_base[d] = m_.count[d];
        m_.requested_base[d] = m_.requested[d];
        m_.ooms[d] = 0;
        m_.accumulated_reset = true;
      }
    }
  }

  void mark(uint8_t l) {
    const int rc = tracepool_mark(in_.tp, label_of(l));
    if (doubtful_label(l) && rc == TRACEPOOL_ERR_INVALID_ARGUMENT) return;
    expect(rc, good_label(l) || doubtful_label(l) ? TRACEPOOL_OK : TRACEPOOL_ERR_INVALID_ARGUMENT, "mark");
  }

  void tag_push(uint8_t l) {
    const int rc = tracepool_tag_push(label_of(l));
    const bool room = t_.tags < 64;
    if (doubtful_label(l) && rc == TRACEPOOL_ERR_INVALID_ARGUMENT) return;
    const bool ok = (good_label(l) || doubtful_label(l)) && room;
    expect(rc, ok ? TRACEPOOL_OK : TRACEPOOL_ERR_INVALID_ARGUMENT, "tag_push");
    t_.tags += ok;
  }

  void tag_pop() {
    expect(tracepool_tag_pop(), t_.tags > 0 ? TRACEPOOL_OK : TRACEPOOL_ERR_INVALID_ARGUMENT, "tag_pop");
    t_.tags -= t_.tags > 0;
  }

  // Reports symbolize call sites: a few per input (fewer with capture on).
  void report(uint8_t f) {
    if (f % 8 == 6) {
      char* s = reinterpret_cast<char*>(1);
      expect(tracepool_report_string(in_.tp, "xml", &s), TRACEPOOL_ERR_INVALID_ARGUMENT, "report_string(xml)");
      return;
    }
    if (m_.reports.fetch_add(1) >= (in_.capture ? 2 : 6)) return;
    const std::string file = in_.dir + "/t" + std::to_string(t_.id);
    char* s = nullptr;
    switch (f % 8) {
      case 0:
      case 1:
        expect(tracepool_report_string(in_.tp, f % 8 == 0 ? "json" : "text", &s), TRACEPOOL_OK, "report_string");
        FUZZ_EXPECT(s != nullptr && *s != '\0', "report_string gave an empty report");
        if (f % 8 == 0) check_json(s, "report_string(json)");
        tracepool_string_free(s);
        break;
      case 2:
      case 3: {
        // Into a file of this process's directory, or into /dev/null, which must stay a device.
        const bool text = f % 8 == 3, null_device = f / 8 % 2 == 1;
        const std::string path = null_device ? "/dev/null" : file + (text ? ".txt" : ".json");
        expect(tracepool_write_report(in_.tp, path.c_str(), text ? "text" : nullptr), TRACEPOOL_OK, "write_report");
        struct stat st {};
        FUZZ_EXPECT(!null_device || (stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)),
                    "write_report(\"/dev/null\") left /dev/null something other than a character device");
        break;
      }
      case 4:
        expect(tracepool_torch_snapshot_string(in_.tp, &s), TRACEPOOL_OK, "torch_snapshot_string");
        FUZZ_EXPECT(s != nullptr, "snapshot_string gave NULL");
        check_json(s, "snapshot_string");
        if (m_.one_thread) check_snapshot_blocks(s);
        tracepool_string_free(s);
        break;
      case 5: {
        const bool seen = m_.oom_seen;
        const int rc = tracepool_write_oom_report(in_.tp, (file + ".oom.json").c_str(), "json");
        if (seen || m_.one_thread)
          expect(rc, seen ? TRACEPOOL_OK : TRACEPOOL_ERR_INVALID_ARGUMENT, "write_oom_report");
        else
          FUZZ_EXPECT(rc == TRACEPOOL_OK || rc == TRACEPOOL_ERR_INVALID_ARGUMENT, "write_oom_report returned %d", rc);
        break;
      }
      default:
        if (f / 8 % 2 == 1) {
          static constexpr char bytes[] = "tracepool fuzz\n";
          expect(tracepool_write_file((file + ".bin").c_str(), bytes, sizeof bytes - 1), TRACEPOOL_OK, "write_file");
          break;
        }
        expect(tracepool_write_report(in_.tp, (in_.dir + "/missing/r.json").c_str(), nullptr),
               TRACEPOOL_ERR_INVALID_ARGUMENT, "write_report into a missing directory");
    }
  }

  void check_json(const char* text, const char* call) {
    json_check j(text);
    FUZZ_EXPECT(j.valid() && *text == '{', "%s is not a JSON object: %s", call, j.error().c_str());
  }

  // One active_allocated block and one "alloc" trace entry per live block (docs/report-schema.md).
  void check_snapshot_blocks(const char* text) {
    auto count = [text](const char* needle) {
      size_t n = 0;
      for (const char* p = std::strstr(text, needle); p != nullptr; p = std::strstr(p + 1, needle)) ++n;
      return n;
    };
    const size_t live = m_.live.size();
    const size_t blocks = count("\"state\":\"active_allocated\""), traces = count("\"action\":\"alloc\"");
    FUZZ_EXPECT(blocks == live && traces == live,
                "snapshot_string: %zu allocated blocks and %zu alloc entries, model %zu", blocks, traces, live);
  }

  void info(int device, bool null_out) {
    size_t free_bytes = 0, total_bytes = 0;
    const int rc = null_out ? tracepool_mem_get_info(in_.tp, device, nullptr, nullptr)
                            : tracepool_mem_get_info(in_.tp, device, &free_bytes, &total_bytes);
    if (null_out) return expect(rc, TRACEPOOL_ERR_INVALID_ARGUMENT, "mem_get_info(NULL)");
    if (!good_device(device)) return expect(rc, TRACEPOOL_ERR_INVALID_DEVICE, "mem_get_info(bad)");
    expect(rc, TRACEPOOL_OK, "mem_get_info");
    FUZZ_EXPECT(total_bytes == m_.capacity && free_bytes <= total_bytes, "mem_get_info: free %zu of %zu", free_bytes,
                total_bytes);
  }

  void misc(uint8_t x) {
    void* p = nullptr;
    tracepool_t* other = reinterpret_cast<tracepool_t*>(1);
    int n = 0;
    switch (x % 10) {
      case 0:
        expect(tracepool_device_count(in_.tp, &n), TRACEPOOL_OK, "device_count");
        FUZZ_EXPECT(n == device_count, "device_count %d", n);
        break;
      case 1:
        FUZZ_EXPECT(std::strcmp(tracepool_backend_name(in_.tp), "host") == 0, "backend is not host");
        break;
      case 2: {
        const char* s = tracepool_status_string(static_cast<int>(x) / 8 - 12);
        FUZZ_EXPECT(s != nullptr && *s != '\0', "status_string(%d) is empty", static_cast<int>(x) / 8 - 12);
        break;
      }
      case 3:
        expect(tracepool_malloc(nullptr, 512, 0, nullptr, &p), TRACEPOOL_ERR_INVALID_ARGUMENT, "malloc(NULL tp)");
        break;
      case 4:
        expect(tracepool_create("backend:host,bogus:1", &other), TRACEPOOL_ERR_BAD_CONFIG, "create(bad conf)");
        FUZZ_EXPECT(other == nullptr, "create(bad conf) left a handle");
        break;
      case 5:
        expect(tracepool_malloc(in_.tp, 512, 0, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT, "malloc(out NULL)");
        break;
      case 6:
        tracepool_destroy(nullptr);
        break;
      case 7: {  // memory got outside the pool (Note [Observed memory]): recorded, then released, once
        const void* outside = reinterpret_cast<const void*>(0x7d0000000000u + (static_cast<uintptr_t>(t_.id) << 32) +
                                                            (static_cast<uintptr_t>(x) << 12));
        expect(tracepool_observe_alloc(in_.tp, outside, 4096u * (x + 1u), 0, x % 3, "fuzz"), TRACEPOOL_OK, "observe_alloc");
        expect(tracepool_observe_alloc(in_.tp, outside, 4096, 0, 0, "fuzz"), TRACEPOOL_ERR_INVALID_ARGUMENT,
               "observe_alloc(observed already)");
        expect(tracepool_observe_free(in_.tp, outside), TRACEPOOL_OK, "observe_free");
        expect(tracepool_observe_free(in_.tp, outside), TRACEPOOL_ERR_INVALID_ARGUMENT, "observe_free(twice)");
        break;
      }
      case 8:
        expect(tracepool_observe_alloc(in_.tp, nullptr, 4096, 0, 0, "fuzz"), TRACEPOOL_ERR_INVALID_ARGUMENT,
               "observe_alloc(NULL)");
        expect(tracepool_observe_alloc(in_.tp, &n, 4096, 0, 3 + x % 5, "fuzz"), TRACEPOOL_ERR_INVALID_ARGUMENT,
               "observe_alloc(bad kind)");
        expect(tracepool_observe_alloc(in_.tp, &n, 4096, 0, 0, ""), TRACEPOOL_ERR_INVALID_ARGUMENT, "observe_alloc(no source)");
        break;
      default:
        FUZZ_EXPECT(tracepool_last_error() != nullptr, "last_error is NULL");
    }
  }

  // Segments come and go quickly: what a training step's temporaries do.
  void churn(int n, int device) {
    const size_t before = t_.blocks.size();
    for (int k = 0; k < n; ++k) malloc_op(512 * static_cast<size_t>(k + 1) * 37, device, nullptr);
    while (t_.blocks.size() > before) free_own(t_.blocks.size() - 1);
  }

  instance& in_;
  model& m_;
  thread_state& t_;
  const char* where;  // FUZZ_EXPECT's name for the current step
};

const std::string& report_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string t = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tracepool-fuzz-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) failed("setup", "mkdtemp(%s) failed", t.c_str());
    static std::string made;
    made = t;
    std::atexit([] {  // the reports written into it, then the directory
      if (DIR* d = opendir(made.c_str())) {
        while (dirent* e = readdir(d))
          if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            unlink((made + "/" + e->d_name).c_str());
        closedir(d);
      }
      rmdir(made.c_str());
    });
    return t;
  }();
  return dir;
}

// Which inputs this process runs (TRACEPOOL_FUZZ_THREADS): 0 all, 1 one thread only, 2 several only.
int forced_kind() {
  static const int kind = [] {
    const char* v = std::getenv("TRACEPOOL_FUZZ_THREADS");
    if (v == nullptr || *v == '\0') return 0;
    if (std::strcmp(v, "one") == 0) return 1;
    if (std::strcmp(v, "many") == 0) return 2;
    failed("setup", "TRACEPOOL_FUZZ_THREADS=%s: expected one or many", v);
  }();
  return kind;
}

}  // namespace
}  // namespace fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fuzz;
  const uint8_t mode = size > 0 ? data[0] : 0;
  const int threads = (mode & 3) + 1;
  if ((forced_kind() == 1 && threads > 1) || (forced_kind() == 2 && threads == 1)) return -1;
  instance in;
  in.capture = (mode & 4) != 0;
  in.dir = report_dir();
  in.m.capacity = (mode & 8) != 0 ? 24 * MiB : 64 * MiB;
  in.m.one_thread = threads == 1;
  if ((mode & 16) != 0) in.m.limit[0] = in.m.limit[1] = 40 * MiB;
  const std::string conf = std::string("backend:host,host_devices:2,validate:on,oom_report:off,host_capacity:") +
                           std::to_string(in.m.capacity) +
                           (in.capture ? ",capture:native,capture_depth:4" : ",capture:off") +
                           ((mode & 16) != 0 ? ",limit:40MiB" : "");
  if (int rc = tracepool_create(conf.c_str(), &in.tp); rc != TRACEPOOL_OK)
    failed("setup", "tracepool_create(%s) = %d", conf.c_str(), rc);

  const std::vector<op> ops = decode(data, size);
  std::vector<thread_state> states(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) states[static_cast<size_t>(t)].id = t;
  if (threads == 1) {
    runner r(in, states[0]);
    for (const op& o : ops) r.run(o);
    r.finish();
  } else {
    std::atomic<int> ready{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        runner r(in, states[static_cast<size_t>(t)]);
        ready.fetch_add(1);
        while (ready.load() < threads) std::this_thread::yield();  // start together
        for (size_t i = static_cast<size_t>(t); i < ops.size(); i += static_cast<size_t>(threads)) r.run(ops[i]);
        r.finish();
      });
    }
    for (std::thread& th : pool) th.join();
  }
  // Everything is freed. What the threads did is now exact, and after empty_cache nothing is left.
  const char* where = "end of input";
  check_exact(in.tp, in.m, threads == 1 || !in.m.accumulated_reset, threads == 1, where);
  if (int rc = tracepool_empty_cache(in.tp, -1); rc != TRACEPOOL_OK) failed(where, "empty_cache(-1) = %d", rc);
  for (int d = 0; d < device_count; ++d) {
    const tracepool_stats_t s = stats_of(in.tp, d, where);
    FUZZ_EXPECT(s.reserved_bytes.current == 0 && s.segment.current == 0 && s.allocation.current == 0,
                "device %d keeps %llu bytes in %llu segments (%llu blocks) with every block freed and the cache "
                "emptied",
                d, (unsigned long long)s.reserved_bytes.current, (unsigned long long)s.segment.current,
                (unsigned long long)s.allocation.current);
  }
  tracepool_destroy(in.tp);
  return 0;
}
