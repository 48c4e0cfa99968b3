// tracer.h: what the allocator records about who asks for memory: the call site of each request
// (stack capture + interning, or a sample of them), its tags, and marks in time.
//
// Capture before lock: capture() runs before the allocator takes any lock and calls nothing that
// could re-enter tracepool. The rest hears the allocator as an observer (Note [Observers] in
// observer.h): each allocation and free updates its site's counters, and marks are kept here.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "block_tag.h"
#include "call_site_table.h"
#include "mark_window.h"
#include "observer.h"
#include "sampler.h"
#include "unwinder.h"

namespace tracepool::core {

// Note [Growth without marks]
// Most programs never call tracepool_mark, yet "which line grows every epoch" is what their users ask.
// So the tracer keeps automatic marks too, in a window of their own: they never change the program's
// marks, the births of blocks or what reports call retained. Two kinds:
//   - boundaries a host framework reports (tracepool_auto_mark): tracepool.torch marks after an
//     optimizer step, at the end of a DataLoader's epoch and at a Module.train()/eval() switch, points
//     at the same phase of every step, where the step's temporaries are gone;
//   - samples, taken as allocations go by (every 64th allocation of a thread reads a coarse clock)
//     once nothing has marked for twice the interval: hosts without a framework hook (C, CuPy, Numba)
//     and phases without boundaries (a long evaluation).
// How often: a mark reads every site's counters (~0.1 us a site), so automatic marks are at least
// auto_mark_ms apart (20 ms by default), and further apart where a mark costs more: their spacing is
// at least auto_mark_time_share times what one costs (the least of the latest eight), so that taking them costs at
// most 1/500 of the run's time (1/1000 for samples) whatever the number of sites: a program of 200
// live sites marks every 20 ms, one of 2000 every 100 ms. Each time their window (max_kept_auto_marks,
// 64) is thinned the least spacing doubles: the window stays evenly spread over the run, a long run
// costs less per second than a short one, and a run of T seconds makes about 64 + 32 log2(T / 1.28 s)
// marks: 85 in 3 s, 200 in 24 s. The spacing was a fixed 100 ms first, which gave a 3-second run 15 samples
// and a 12-second one 31 marks: too few to tell (issue 35). Marks at phase points (when live bytes
// return to a low after a burst of frees, the end of a step) were weighed and left: finding them costs
// work at every free, and the window floors of growth.h already read each window at its lowest phase
// when the window holds a mark there; more marks make that likelier. Which sites grow is judged from
// the window when a report is made (growth.h: from 16 marks on, Note [Growth in short runs]), and only
// when the program made no marks of its own: those take precedence.
inline constexpr uint64_t auto_mark_time_share = 500;  // spacing / mean cost of an automatic mark, at least
inline constexpr uint64_t auto_sample_every = 64;      // allocations of a thread between two clock reads

// Note [Thread origins]
// Libraries start threads that never run an interpreter frame: NCCL's proxy threads, which allocate a
// process group's buffers; XLA's, which compile, autotune and grow JAX's arena; PyTorch's NCCL watchdog.
// What they allocate has native frames only, inside the library, and no line of the program. A host
// that sees threads start (the interposer, plugins/intercept, wraps pthread_create) takes the starting
// thread's site then (thread_origin), and the new thread adopts it before its start routine runs
// (adopt_thread_origin). A capture on that thread that finds no script frames of its own borrows the
// origin's, flagged borrowed, as the thread's outermost callers. Threads with frames of their own
// (Python's) never use it, and a thread without passes its origin on to the threads it starts.
//
// Such threads mostly work on behalf of a later call, not of the line that started them: JAX's first
// call of a jitted function compiles and autotunes on XLA's threads while the calling thread waits, and
// NCCL's proxies set up what the first collective asked for. So the starting thread keeps its lent
// sites (up to max_lent_origins, the oldest replaced) and, whenever it reaches the driver itself
// (memory seen outside the pool, code loaded: capture_observed, never the pool's own allocations, which
// come and go with every tensor), records that site as each one's `latest`. A borrowing thread takes
// the frames of its origin's latest site, else of the origin itself: the line that started it work at
// the driver most recently. That is a line of the right thread, at a moment when it handed work over,
// but not a proof: a thread working from a queue while its starter runs ahead is charged to the
// starter's last trip to the driver. Other limits, for simplicity's sake: `latest` belongs to the lent
// site, not to the lending thread, so two threads that start threads from the same site share it, and
// a site lent again keeps the latest from before; a thread that has lent from more than
// max_lent_origins sites no longer updates the oldest, whose threads keep its last latest; and under
// capture:python (no native frames to tell them apart) a borrowed capture whose frames and tags equal
// a site of the lending thread's own is that site, shown without the borrowed flag. The borrowed
// description is copied from the lent site's, made while its thread ran those frames: the provider is
// never asked to describe frames on a thread that does not run them.
inline constexpr size_t max_lent_origins = 16;

class tracer final : public observer {
 public:
  static status create(const config& cfg, std::unique_ptr<tracer>* out);

  block_tag capture(size_t size);
  // The calling thread's call site, never sampled out (0 when capture is off): names things other
  // than blocks, such as a private pool's creator.
  uint32_t capture_site();
  // Where the calling thread stands, for a thread it is starting (Note [Thread origins]): this
  // tracer's serial and a site, or 0 when there are no script frames to lend.
  uint64_t thread_origin();
  // The calling thread reached the driver at `site` (observed memory): the threads it started borrow
  // that site's frames from now on (Note [Thread origins]).
  void reached_driver(uint32_t site);
  // Captures on the calling thread that find no script frames of their own borrow those of
  // `origin` (from thread_origin of any tracer: another tracer's is ignored; 0 forgets it).
  static void adopt_thread_origin(uint64_t origin);
  // Marks always; allocations and frees only when sites are captured (else every site is 0).
  unsigned events() const override {
    return mode_ == capture_mode::off ? mark_events : alloc_events | free_events | freed_events | mark_events;
  }
  void on_alloc(const block_event& e) override;
  // A free fetches its site's counters (Note [Site counters]); freed, once the pool has the block,
  // counts it.
  void on_free(const block_event& e) override;
  void on_freed(const block_event& e) override;
  void on_unfree(const block_event&) override {}  // nothing was counted
  status on_mark(const mark_event& e) override;
  // Estimated bytes and blocks (x block_unit) one block of `requested` bytes stands for.
  int64_t weighted_bytes(size_t requested) const;
  int64_t weighted_blocks(size_t requested) const;
  double weight(size_t requested) const { return sampler_.weight(requested); }

  // The kept marks, oldest first, and how many marks were made in all.
  std::vector<mark_record> marks(uint64_t* made = nullptr);

  // Automatic marks (Note [Growth without marks]). Whether one now would be taken: a boundary once
  // the interval has passed since the last, a sample (`sample`) once twice the interval has.
  bool auto_mark_due(uint64_t now_ns, bool sample) const {
    const uint64_t interval = auto_interval_ns_.load(std::memory_order_relaxed);
    const uint64_t last = last_auto_ns_.load(std::memory_order_relaxed);  // 0: none yet
    return interval != 0 && (last == 0 || now_ns - last >= (sample ? 2 * interval : interval));
  }
  // Takes the mark if it is still due; false if not, or while another thread takes one.
  bool auto_mark(const mark_event& e, uint64_t now_ns, bool sample);
  std::vector<mark_record> auto_marks(uint64_t* made = nullptr);
  // The spacing of automatic marks now, in ns (0: off); it doubles as their window thins, and follows
  // what they cost (Note [Growth without marks]).
  uint64_t auto_mark_interval_ns() const { return auto_interval_ns_.load(std::memory_order_relaxed); }
  // Time spent taking automatic marks, in all (what following growth without marks has cost).
  uint64_t auto_mark_cost_ns() const { return auto_cost_ns_.load(std::memory_order_relaxed); }
  // Trends of `sites` (ids), in the same order.
  std::vector<site_trend> trends(const std::vector<uint32_t>& sites);

  // The call-site table's locks, then the marks' (Note [Fork]).
  void lock_for_fork() override;
  void unlock_after_fork() override;

  call_site_table& sites() { return sites_; }
  capture_mode mode() const { return mode_; }
  int depth() const { return depth_; }
  int script_depth() const { return script_depth_; }
  const unwinder& stack_unwinder() const { return unwinder_; }
  size_t sample_bytes() const { return sampler_.mean_bytes(); }

 private:
  tracer(const config& cfg, const unwinder& u);
  size_t strip_own_frames(const uintptr_t* frames, size_t n) const;
  // The calling thread's origin's script frames, copied into `words`; *described, their description.
  size_t borrow_origin(uintptr_t* words, const script_frame** described);

  const capture_mode mode_;
  const int depth_;
  const int script_depth_;
  const code_range own_;
  const uint64_t serial_;  // this tracer's, never reused: names it in per-thread caches
  unwinder unwinder_;
  sampler sampler_;
  call_site_table sites_;

  // Every site's live bytes now (those with any); with `trends`, each site's trend steps too.
  std::vector<std::pair<uint32_t, int64_t>> live_by_site(bool trends);

  std::atomic<uint32_t> epoch_{0};          // marks made, as blocks record it (saturates)
  std::mutex marks_mutex_;                  // guards both windows and the sites' trends
  mark_window marks_;                       // the program's (Note [Marks without end])
  mark_window auto_marks_{max_kept_auto_marks};  // automatic ones (Note [Growth without marks])
  uint64_t auto_base_ns_;                   // the least spacing: auto_mark_ms, doubled at each thinning (marks lock)
  std::atomic<uint64_t> auto_interval_ns_;  // the spacing now: the least, or more where marks cost more
  std::atomic<uint64_t> last_auto_ns_{0};   // monotonic_coarse_ns of the latest automatic mark
  std::atomic<uint64_t> auto_cost_ns_{0};
  std::array<uint64_t, 8> recent_costs_{};  // the latest automatic marks' durations, a ring (marks lock)
};

}  // namespace tracepool::core
