#include "tracer.h"

#include <cmath>
#include <ctime>
#include <new>

#include "script_frames.h"
#include "tags.h"

namespace tracepool::core {

namespace {
// Room for tracepool's own frames (capture, allocator, C API, plugin) above the caller's.
constexpr size_t own_frames_room = 10;
}  // namespace

status tracer::create(const config& cfg, std::unique_ptr<tracer>* out) {
  unwinder u;
  if (captures_native(cfg.capture)) {
    if (status s = unwinder::make(cfg.unwinder, &u); s != status::ok) return s;
  }
  out->reset(new tracer(cfg, u));
  return status::ok;
}

tracer::tracer(const config& cfg, const unwinder& u)
    : mode_(cfg.capture),
      depth_(cfg.capture_depth),
      script_depth_(cfg.python_depth),
      own_(cfg.own_code != nullptr ? module_range_of(cfg.own_code) : code_range{}),
      unwinder_(u),
      sampler_(cfg.sample_bytes, cfg.sample_seed) {}

// Frames before the first one in tracepool's module belong to the unwinder; frames from there on
// that stay inside the module are tracepool's own. What follows is the caller's stack.
size_t tracer::strip_own_frames(const uintptr_t* frames, size_t n) const {
  size_t i = 0;
  while (i < n && i < own_frames_room && !own_.contains(frames[i])) ++i;
  if (i == n || i == own_frames_room) return 0;  // our module not seen: keep everything
  while (i < n && own_.contains(frames[i])) ++i;
  // Then the bindings' frames (tracepool's Python extension), up to the interpreter that ran them.
  while (i < n && in_bindings_module(frames[i]) && !in_interpreter_loop(frames[i])) ++i;
  return i;
}

block_tag tracer::capture(size_t size) {
  block_tag tag{0, epoch_.load(std::memory_order_relaxed)};
  if (mode_ == capture_mode::off) return tag;
  if (sampler_.enabled() && !sampler_.sample(size)) return tag;
  uintptr_t raw[max_capture_depth + own_frames_room + max_capture_depth * words_per_script_frame];
  size_t first = 0, kept = 0;
  if (captures_native(mode_)) {
    const size_t n = unwinder_.capture(raw, static_cast<size_t>(depth_) + own_frames_room);
    first = strip_own_frames(raw, n);
    kept = n - first;
    if (kept > static_cast<size_t>(depth_)) kept = static_cast<size_t>(depth_);
  }
  uintptr_t* script_words = raw + first + kept;
  const size_t script = captures_script(mode_) ? capture_script_frames(script_words, script_depth_) : 0;
  tag.site = sites_.intern(raw + first, static_cast<uint32_t>(kept), static_cast<uint32_t>(script), current_tags());
  // A new site's interpreter frames are described now, while this thread still runs them.
  if (script != 0 && tag.site != 0 && sites_.at(tag.site).script.load(std::memory_order_acquire) == nullptr) {
    try {
      if (script_frame* described = describe_script_frames(script_words, script); described != nullptr)
        sites_.describe(tag.site, described);
    } catch (const std::bad_alloc&) {
      // The site keeps its raw frames; reports show them as unknown.
    }
  }
  return tag;
}

int64_t tracer::weighted_bytes(size_t requested) const {
  if (!sampler_.enabled()) return static_cast<int64_t>(requested);
  return std::llround(static_cast<double>(requested) * sampler_.weight(requested));
}

int64_t tracer::weighted_blocks(size_t requested) const {
  if (!sampler_.enabled()) return block_unit;
  return std::llround(static_cast<double>(block_unit) * sampler_.weight(requested));
}

void tracer::on_alloc(uint32_t site, size_t requested) {
  if (site != 0) sites_.on_alloc(site, weighted_bytes(requested), weighted_blocks(requested));
}

void tracer::on_free(uint32_t site, size_t requested) {
  if (site != 0) sites_.on_free(site, weighted_bytes(requested), weighted_blocks(requested));
}

status tracer::mark(const char* label, int64_t live_bytes) {
  mark_record m;
  m.label = label;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  m.time_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
  m.live_bytes = live_bytes;
  for (uint32_t id = 1, end = sites_.end(); id < end; ++id) {
    if (!sites_.ready(id)) continue;
    const int64_t live = sites_.at(id).live_bytes.load(std::memory_order_relaxed);
    if (live > 0) m.site_live.emplace_back(id, live);
  }
  std::lock_guard<std::mutex> lock(marks_mutex_);
  if (marks_.size() >= max_marks)
    return fail(status::invalid_argument, "mark('%s'): %zu marks already made, the most one instance keeps", label,
                max_marks);
  marks_.push_back(std::move(m));
  epoch_.store(static_cast<uint32_t>(marks_.size()), std::memory_order_relaxed);
  return status::ok;
}

std::vector<mark_record> tracer::marks() {
  std::lock_guard<std::mutex> lock(marks_mutex_);
  return marks_;
}

}  // namespace tracepool::core
