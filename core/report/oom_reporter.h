// oom_reporter.h: the report of an allocation that failed with out of memory. An observer of the
// allocator (Note [Observers] in observer.h): when the allocator publishes oom, it builds the report
// (no allocator lock is held then), keeps it for write_last, adds its top sites to the error message,
// and prints it unless oom_report:off: the first whole, later ones as one line each, since a program
// that catches OOM and retries smaller (a batch-size search) meets many.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "observer.h"
#include "report/report.h"

namespace tracepool::core {

class allocator;

class oom_reporter final : public observer {
 public:
  // `a` must outlive the reporter's use: subscribe it to `a`, and destroy `a` first.
  oom_reporter(allocator& a, bool print) : allocator_(a), print_(print) {}

  unsigned events() const override { return oom_events; }
  void on_oom(const oom_event& e) override;
  // Writes the report of the latest out-of-memory failure (write_report_to's rules).
  status write_last(const char* path, const char* format);

  void lock_for_fork() override { mutex_.lock(); }
  void unlock_after_fork() override { mutex_.unlock(); }

 private:
  allocator& allocator_;
  const bool print_;
  std::atomic<uint64_t> seen_{0};
  std::mutex mutex_;                    // taken alone, briefly (Note [Lock order] in allocator.h)
  std::shared_ptr<const report> last_;  // guarded by mutex_
};

}  // namespace tracepool::core
