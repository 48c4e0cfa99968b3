// tracer.h: what the allocator records about who asks for memory: the call site of each request
// (stack capture + interning, or a sample of them), its tags, and marks in time.
//
// Capture before lock: capture() runs before the allocator takes any lock and calls nothing that
// could re-enter tracepool. The rest hears the allocator as an observer (Note [Observers] in
// observer.h): each allocation and free updates its site's counters, and marks are kept here.
#pragma once

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
#include "observer.h"
#include "sampler.h"
#include "unwinder.h"

namespace tracepool::core {

struct mark_record {
  std::string label;
  uint64_t index = 0;                                   // marks made before this one
  uint64_t time_ns = 0;                                 // CLOCK_REALTIME
  int64_t live_bytes = 0;                               // requested bytes live on all devices (exact)
  std::vector<std::pair<uint32_t, int64_t>> site_live;  // estimated live bytes per site, sites with any
};

// Note [Marks without end]
// A loop may mark every step, for ever. Two things are kept, both bounded:
//   - for every site, its trend over every mark made (site_record::trend: fell, rises, rose into the
//     latest), updated at each mark from the live bytes at the one before; growth is told from it
//     exactly, whatever the number of marks;
//   - a window of at most max_kept_marks marks, with each site's live bytes then, for the series
//     reports show and for naming the mark after which retained blocks were born. When it is full,
//     every other mark between the first and the latest is dropped, so the window always holds the
//     first mark, the latest, and an even spread in between. Reports say how many marks were made
//     (marks_made) besides the ones kept.
inline constexpr size_t max_kept_marks = 512;

class tracer final : public observer {
 public:
  static status create(const config& cfg, std::unique_ptr<tracer>* out);

  block_tag capture(size_t size);
  // The calling thread's call site, never sampled out (0 when capture is off): names things other
  // than blocks, such as a private pool's creator.
  uint32_t capture_site();
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

  const capture_mode mode_;
  const int depth_;
  const int script_depth_;
  const code_range own_;
  const uint64_t serial_;  // this tracer's, never reused: names it in per-thread caches
  unwinder unwinder_;
  sampler sampler_;
  call_site_table sites_;

  void thin_marks();

  std::atomic<uint32_t> epoch_{0};  // marks made, as blocks record it (saturates)
  std::mutex marks_mutex_;
  uint64_t marks_made_ = 0;
  std::vector<mark_record> marks_;  // kept (Note [Marks without end])
};

}  // namespace tracepool::core
