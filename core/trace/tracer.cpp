#include "tracer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "base/clock.h"
#include "base/word_hash.h"
#include "recent_sites.h"
#include "script_frames.h"
#include "tags.h"

namespace tracepool::core {

namespace {
// Room for tracepool's own frames (capture, allocator, C API, plugin) above the caller's.
constexpr size_t own_frames_room = 10;
std::atomic<uint64_t> tracers_made{0};
thread_local uint64_t adopted_origin = 0;  // tracer serial << 32 | site (Note [Thread origins])

// The sites this thread lent as origins, of the tracer `serial` (Note [Thread origins]).
struct lent_origins {
  uint64_t serial = 0;
  size_t count = 0;  // lent in all; the latest max_lent_origins are kept, in a ring
  uint32_t sites[max_lent_origins] = {};

  size_t kept() const { return std::min(count, max_lent_origins); }
};
thread_local lent_origins lent;

// A copy of `frames` borrowed frames, flagged so.
script_frame* as_borrowed(const script_frame* frames, size_t n) {
  auto* out = new script_frame[n];
  for (size_t i = 0; i < n; ++i) out[i] = script_frame{frames[i].file, frames[i].function, frames[i].line,
                                                       frames[i].flags | script_frame_borrowed};
  return out;
}
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
      serial_(tracers_made.fetch_add(1, std::memory_order_relaxed) + 1),
      unwinder_(u),
      sampler_(cfg.sample_bytes, cfg.sample_seed),
      auto_base_ns_(cfg.capture == capture_mode::off ? 0 : cfg.auto_mark_ms * 1000000ULL),  // no sites to follow
      auto_interval_ns_(auto_base_ns_) {}

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
  tag.site = capture_site();
  if (tag.site != 0) sites_.prefetch_alloc_side(tag.site);  // counted once the pool has the block
  return tag;
}

// A repeated call site costs the Python walk, a recalled native walk and a lookup in this thread's
// recent sites; a new one, a native walk, a hash and an intern besides (Note [Recent sites]).
uint32_t tracer::capture_site() {
  if (mode_ == capture_mode::off) return 0;
  uintptr_t raw[max_capture_depth + own_frames_room + max_capture_depth * words_per_script_frame];
  // The script frames first, past the room of the native ones, then moved down behind those kept.
  const size_t native_room = static_cast<size_t>(depth_) + own_frames_room;
  const uintptr_t* captured = raw + native_room;
  size_t script = captures_script(mode_) ? capture_script_frames(raw + native_room, script_depth_) : 0;
  const script_frame* borrowed = nullptr;  // the description of an origin's frames, if borrowed
  if (script == 0 && adopted_origin != 0 && captures_script(mode_)) script = borrow_origin(raw + native_room, &borrowed);
  const uint32_t generation = code_ranges_generation();  // the walk's key: what in_interpreter_loop tests
  size_t n = 0;
  uint64_t walk = 0;
  // capture:all ends the native walk at the interpreter loop when there are script frames to stand
  // for what lies beyond it (under CPython most of those native frames are the interpreter's own).
  // Without them (the provider off, or the interpreter finalising) the whole native stack is kept.
  const bool stop = script != 0 && borrowed == nullptr && native_stops_at_script(mode_);
  const unwinder::stop_fn stop_at = stop ? in_interpreter_loop : nullptr;
  if (captures_native(mode_)) n = unwinder_.capture(raw, native_room, stop_at, generation, &walk);
  const recent_sites::key key{walk, word_hash(captured, script * words_per_script_frame), current_tags(),
                              static_cast<uint32_t>(script)};
  // Native frames are known by their walk's serial, or not at all (then no cache).
  recent_sites* recent =
      captures_native(mode_) && walk == 0 ? nullptr : recent_sites::of_this_thread(serial_, generation);
  if (recent != nullptr)
    if (const uint32_t site = recent->find(key); site != 0) return site;
  // A recalled walk wrote no frames: walk again for them (the same stack, so the same frames but
  // this function's own, which are dropped below).
  if (captures_native(mode_) && n == 0 && walk != 0) n = unwinder_.capture(raw, native_room, stop_at, generation);
  const size_t first = strip_own_frames(raw, n);
  const size_t kept = std::min(n - first, static_cast<size_t>(depth_));
  uintptr_t* script_words = raw + first + kept;
  std::memmove(script_words, captured, script * words_per_script_frame * sizeof(uintptr_t));
  const uint32_t site =
      sites_.intern(raw + first, static_cast<uint32_t>(kept), static_cast<uint32_t>(script), key.tags);
  // A new site's script frames are described now, while this thread still runs them (or copied
  // from the origin that lent them).
  if (script != 0 && site != 0 && sites_.at(site).script.load(std::memory_order_acquire) == nullptr) {
    try {
      script_frame* described =
          borrowed != nullptr ? as_borrowed(borrowed, script) : describe_script_frames(script_words, script);
      if (described != nullptr) sites_.describe(site, described);
    } catch (const std::bad_alloc&) {
      // The site keeps its raw frames; reports show them as unknown.
    }
  }
  if (recent != nullptr && site != 0) recent->add(key, site);
  return site;
}

uint64_t tracer::thread_origin() {
  const uint32_t site = capture_site();
  if (site == 0 || sites_.at(site).script_depth == 0) return 0;
  const script_frame* described = sites_.at(site).script.load(std::memory_order_acquire);
  if (described == nullptr) return 0;
  // A thread that borrows its frames passes its own origin on, whose `latest` follows its starter.
  if ((described[0].flags & script_frame_borrowed) != 0 && adopted_origin >> 32 == serial_) return adopted_origin;
  if (lent.serial != serial_) lent = lent_origins{serial_, 0, {}};
  if (std::find(lent.sites, lent.sites + lent.kept(), site) == lent.sites + lent.kept())
    lent.sites[lent.count++ % max_lent_origins] = site;
  return serial_ << 32 | site;
}

void tracer::reached_driver(uint32_t site) {
  if (site == 0 || lent.serial != serial_ || lent.kept() == 0) return;
  const site_record& r = sites_.at(site);
  const script_frame* described = r.script.load(std::memory_order_acquire);
  if (r.script_depth == 0 || described == nullptr || (described[0].flags & script_frame_borrowed) != 0) return;
  for (size_t i = 0; i < lent.kept(); ++i) {
    std::atomic<uint32_t>& latest = sites_.at(lent.sites[i]).latest;
    if (latest.load(std::memory_order_relaxed) != site) latest.store(site, std::memory_order_release);
  }
}

void tracer::adopt_thread_origin(uint64_t origin) { adopted_origin = origin; }

size_t tracer::borrow_origin(uintptr_t* words, const script_frame** described) {
  if (adopted_origin >> 32 != serial_) return 0;
  const site_record& origin = sites_.at(static_cast<uint32_t>(adopted_origin));
  const uint32_t latest = origin.latest.load(std::memory_order_acquire);
  const site_record& lender = latest != 0 ? sites_.at(latest) : origin;
  *described = lender.script.load(std::memory_order_acquire);
  if (*described == nullptr) return 0;  // never: only described sites are lent or recorded as latest
  const size_t n = std::min<size_t>(lender.script_depth, static_cast<size_t>(script_depth_));
  std::memcpy(words, lender.frames.get() + lender.depth, n * words_per_script_frame * sizeof(uintptr_t));
  return n;
}

int64_t tracer::weighted_bytes(size_t requested) const {
  if (!sampler_.enabled()) return static_cast<int64_t>(requested);
  return std::llround(static_cast<double>(requested) * sampler_.weight(requested));
}

int64_t tracer::weighted_blocks(size_t requested) const {
  if (!sampler_.enabled()) return block_unit;
  return std::llround(static_cast<double>(block_unit) * sampler_.weight(requested));
}

void tracer::on_alloc(const block_event& e) {
  if (e.site != 0) sites_.on_alloc(e.site, weighted_bytes(e.requested), weighted_blocks(e.requested));
}

void tracer::on_free(const block_event& e) {
  if (e.site != 0) sites_.prefetch_free_side(e.site);
}

void tracer::on_freed(const block_event& e) {
  if (e.site != 0) sites_.on_free(e.site, weighted_bytes(e.requested));
}

std::vector<std::pair<uint32_t, int64_t>> tracer::live_by_site(bool trends) {
  std::vector<std::pair<uint32_t, int64_t>> out;
  const bool first = marks_.made() == 0;
  for (uint32_t id = 1, end = sites_.end(); id < end; ++id) {
    if (!sites_.ready(id)) continue;
    site_record& rec = sites_.at(id);
    const int64_t live = rec.live_bytes();
    if (live > 0) out.emplace_back(id, live);
    if (!trends) continue;
    if (!first) {  // a step from the mark before (0 for a site born since)
      site_trend& t = rec.trend;
      t.fell = t.fell || live < rec.live_at_last_mark;
      t.rose_last = live > rec.live_at_last_mark;
      if (t.rose_last && t.rises < 2) ++t.rises;
    }
    rec.live_at_last_mark = live;
  }
  return out;
}

status tracer::on_mark(const mark_event& e) {
  mark_record m;
  m.label = e.label;
  m.time_ns = realtime_ns();
  m.live_bytes = e.live_bytes;
  m.reserved_bytes = e.reserved_bytes;
  std::lock_guard<std::mutex> lock(marks_mutex_);
  m.site_live = live_by_site(true);
  marks_.add(std::move(m));
  if (epoch_.load(std::memory_order_relaxed) != UINT32_MAX) epoch_.fetch_add(1, std::memory_order_relaxed);
  return status::ok;
}

bool tracer::auto_mark(const mark_event& e, uint64_t now_ns, bool sample) {
  std::unique_lock<std::mutex> lock(marks_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !auto_mark_due(now_ns, sample)) return false;
  last_auto_ns_.store(now_ns, std::memory_order_relaxed);
  const uint64_t began = monotonic_ns();
  mark_record m;
  m.label = e.label;
  m.time_ns = realtime_ns();
  m.live_bytes = e.live_bytes;
  m.reserved_bytes = e.reserved_bytes;
  m.site_live = live_by_site(false);
  if (auto_marks_.add(std::move(m))) auto_base_ns_ *= 2;  // thinned: half as many marks a second from now on
  const uint64_t took = monotonic_ns() - began;
  auto_cost_ns_.fetch_add(took, std::memory_order_relaxed);
  // What a mark costs, for the spacing: the least of the latest few, so that one mark preempted mid-way
  // (milliseconds of wall time) does not space out every later one.
  recent_costs_[auto_marks_.made() % recent_costs_.size()] = took;
  const size_t known = std::min<size_t>(auto_marks_.made(), recent_costs_.size());
  const uint64_t cost = *std::min_element(recent_costs_.begin(), recent_costs_.begin() + known);
  auto_interval_ns_.store(std::max(auto_base_ns_, auto_mark_time_share * cost), std::memory_order_relaxed);
  return true;
}

std::vector<site_trend> tracer::trends(const std::vector<uint32_t>& sites) {
  std::vector<site_trend> out;
  out.reserve(sites.size());
  std::lock_guard<std::mutex> lock(marks_mutex_);
  for (uint32_t id : sites)
    out.push_back(id != 0 && id < sites_.end() && sites_.ready(id) ? sites_.at(id).trend : site_trend{});
  return out;
}

void tracer::lock_for_fork() {
  sites_.lock_all();
  marks_mutex_.lock();
}

void tracer::unlock_after_fork() {
  marks_mutex_.unlock();
  sites_.unlock_all();
}

std::vector<mark_record> tracer::marks(uint64_t* made) {
  std::lock_guard<std::mutex> lock(marks_mutex_);
  if (made != nullptr) *made = marks_.made();
  return marks_.kept();
}

std::vector<mark_record> tracer::auto_marks(uint64_t* made) {
  std::lock_guard<std::mutex> lock(marks_mutex_);
  if (made != nullptr) *made = auto_marks_.made();
  return auto_marks_.kept();
}

}  // namespace tracepool::core
