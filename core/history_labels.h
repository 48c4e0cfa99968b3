// history_labels.h: what the history's events are labelled with besides their call site: a device's
// user metadata (PyTorch's torch.cuda.memory._set_memory_metadata) and the innermost compiled region
// running on it (PyTorch's compile contexts, "Torch-Compiled Region: 0/0"). Each (metadata, context)
// pair in use gets a small id, which every event recorded on that device carries (history_entry::label);
// the strings are kept once, here.
//
// Invariants: ids_ and table_ hold the same pairs (ids_[table_[i]] == i); table_[0] is ("", "");
// current_[d] is the id of (devices_[d].metadata, devices_[d].contexts.back() or "").
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tracepool::core {

class history_labels {
 public:
  struct label {
    std::string metadata;  // "" none
    std::string context;   // "" none
  };
  using id = uint16_t;
  static constexpr id none = 0;
  // Past this many distinct pairs, new pairs share this id, which reads as overflow_label().
  static constexpr id overflow = UINT16_MAX;

  explicit history_labels(int devices);

  // A device out of range is invalid_device; nothing changes then.
  status set_metadata(int device, std::string metadata);
  status metadata(int device, std::string* out) const;
  status push_context(int device, std::string context);
  status pop_context(int device);  // an empty stack stays empty, as in PyTorch

  // The label events recorded on `device` now carry: one relaxed load; none for a device out of range.
  id current(int device) const {
    return device >= 0 && device < devices_count_ ? current_[device].load(std::memory_order_relaxed) : none;
  }
  // Every label by id, for readers of the history (ids past the end read as overflow).
  std::vector<label> table() const;
  static const label& overflow_label();

  // Note [Fork] in base/fork_guard.h: the allocator takes this lock with all of its own.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

 private:
  struct device_state {
    std::string metadata;
    std::vector<std::string> contexts;
  };
  status check_device(int device, const char* what) const;
  void relabel(int device);  // under mutex_

  const int devices_count_;
  std::unique_ptr<std::atomic<id>[]> current_;  // written under mutex_, read without it
  mutable std::mutex mutex_;                    // a leaf; never taken under an allocator or history lock
  std::vector<device_state> devices_;           // guarded by mutex_
  std::vector<label> table_;                    // guarded by mutex_
  std::map<std::pair<std::string, std::string>, id> ids_;  // guarded by mutex_
};

}  // namespace tracepool::core
