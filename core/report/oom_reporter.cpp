#include "report/oom_reporter.h"

#include <cstdio>
#include <string>

#include "allocator.h"

namespace tracepool::core {

void oom_reporter::on_oom(const oom_event& e) {
  auto r = std::make_shared<report>();
  if (build_report(allocator_, "oom", r.get()) != status::ok) return;  // the device's words alone
  r->oom_device = e.device;
  r->oom_requested = e.requested;
  r->oom_message = e.message;
  *e.detail += oom_summary(*r, e.device);
  if (print_) {
    const uint64_t seen = seen_.fetch_add(1, std::memory_order_relaxed);
    const std::string text =
        seen == 0 ? to_text(*r)
                  : "tracepool: out of memory again on device " + std::to_string(e.device) + " (" +
                        human_bytes(static_cast<int64_t>(e.requested)) + " requested; " + std::to_string(seen + 1) +
                        " so far): the report of the first is above; tracepool_write_oom_report writes this one's\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = std::move(r);
}

status oom_reporter::write_last(const char* path, const char* format) {
  std::shared_ptr<const report> r;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    r = last_;
  }
  if (r == nullptr)
    return fail(status::invalid_argument, "write_oom_report: no allocation has failed with out of memory");
  return write_report_to(*r, path, format);
}

}  // namespace tracepool::core
