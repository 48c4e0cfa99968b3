// mark_window.h: the marks a tracer keeps, each with every site's live bytes then, bounded however
// many are made (Note [Marks without end]). Two windows exist: the marks the program made
// (tracepool_mark) and the automatic ones (Note [Growth without marks]).
//
// Invariants: at most its capacity kept (max_kept_marks, or max_kept_auto_marks for automatic marks), oldest first, indices ascending; the first mark made is
// kept, and the latest; made() counts every mark ever added. The owner locks (the tracer's marks lock).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tracepool::core {

struct mark_record {
  std::string label;
  uint64_t index = 0;                                   // marks made before this one (in its window)
  uint64_t time_ns = 0;                                 // CLOCK_REALTIME
  int64_t live_bytes = 0;                               // requested bytes live on all devices (exact)
  int64_t reserved_bytes = 0;                           // reserved on all devices
  std::vector<std::pair<uint32_t, int64_t>> site_live;  // estimated live bytes per site, ids ascending
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
// Automatic marks keep fewer: each thinning doubles their spacing (Note [Growth without marks]), so the
// window's size sets how many are made. 64 is twice what the growth test wants (min_growth_marks);
// 512 made a 24-second training run take 534 marks at a 20 ms spacing, 28 ns of every allocation.
inline constexpr size_t max_kept_auto_marks = 64;

class mark_window {
 public:
  explicit mark_window(size_t capacity = max_kept_marks) : capacity_(capacity) {}
  // Keeps `m` (its index set here); true if older marks were thinned to make room.
  bool add(mark_record&& m) {
    const bool thinned = kept_.size() == capacity_;
    if (thinned) thin();
    m.index = made_++;
    kept_.push_back(std::move(m));
    return thinned;
  }
  const std::vector<mark_record>& kept() const { return kept_; }
  uint64_t made() const { return made_; }

 private:
  // Drops every other mark between the first and the latest.
  void thin() {
    size_t kept = 1;
    for (size_t i = 1; i < kept_.size(); ++i)
      if (i % 2 == 0 || i + 1 == kept_.size()) kept_[kept++] = std::move(kept_[i]);
    kept_.resize(kept);
  }

  size_t capacity_;
  uint64_t made_ = 0;
  std::vector<mark_record> kept_;
};

}  // namespace tracepool::core
