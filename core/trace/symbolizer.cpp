#include "symbolizer.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <system_error>
#include <thread>

#if defined(TRACEPOOL_HAVE_LIBBACKTRACE)
#define BOOST_STACKTRACE_USE_BACKTRACE  // file and line from DWARF; otherwise Boost's dladdr-only backend
#endif
#include <boost/stacktrace/frame.hpp>

#include "base/fork_guard.h"

namespace tracepool::core {

namespace {

// Changes whenever a library is loaded or unloaded (dl_phdr_info's adds/subs counters).
uint64_t module_generation() {
  uint64_t gen = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
          *static_cast<uint64_t*>(data) = (uint64_t{info->dlpi_adds} << 32) ^ info->dlpi_subs;
        return 1;  // the counters are the same in every entry: the first is enough
      },
      &gen);
  return gen;
}

void resolve(const std::vector<uintptr_t>& addresses, std::vector<frame_info>* out) {
  out->assign(addresses.size(), frame_info{});
  for (size_t i = 0; i < addresses.size(); ++i) {
    frame_info& f = (*out)[i];
    f.address = addresses[i];
    if (f.address == 0) continue;
    // A return address points after the call; the call itself is one byte back.
    const auto* pc = reinterpret_cast<const void*>(f.address - 1);
    const boost::stacktrace::frame frame(pc);
    f.function = frame.name();
    f.file = frame.source_file();
    f.line = static_cast<int>(frame.source_line());
    Dl_info info{};
    if (dladdr(pc, &info) != 0 && info.dli_fname != nullptr) f.module = info.dli_fname;
  }
}

// One thread that resolves addresses, replaced when the loaded libraries change (or after fork).
struct worker {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t generation = 0;
  pid_t pid = 0;
  bool retired = false;
  const std::vector<uintptr_t>* job = nullptr;
  std::vector<frame_info>* result = nullptr;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return job != nullptr || retired; });
      if (job == nullptr) return;  // retired: its libbacktrace state stays behind, unused
      lock.unlock();
      resolve(*job, result);
      lock.lock();
      job = nullptr;
      cv.notify_all();
    }
  }
};

std::mutex& workers_mutex() {
  static std::mutex* m = [] {
    auto* made = new std::mutex();  // leaked: used during exit
    register_fork_lock(made);
    return made;
  }();
  return *m;
}
[[maybe_unused]] const bool registered_at_load = (workers_mutex(), true);  // before fork() (Note [Fork])
worker* current_worker = nullptr;  // guarded by workers_mutex()

}  // namespace

std::vector<frame_info> symbolize(const std::vector<uintptr_t>& addresses) {
  std::vector<frame_info> out;
  std::lock_guard<std::mutex> one_report_at_a_time(workers_mutex());
  const uint64_t gen = module_generation();
  worker* w = current_worker;
  if (w == nullptr || w->generation != gen || w->pid != getpid()) {
    if (w != nullptr && w->pid == getpid()) {
      std::lock_guard<std::mutex> lock(w->mutex);
      w->retired = true;
      w->cv.notify_all();
    }
    w = new worker();  // deleted by its thread once retired; its libbacktrace state cannot be freed
    w->generation = gen;
    w->pid = getpid();
    try {
      std::thread([w] {
        w->run();
        delete w;  // retired: nobody refers to it any more
      }).detach();
    } catch (const std::system_error&) {
      delete w;
      current_worker = nullptr;
      resolve(addresses, &out);  // no thread to be had: resolve here, with this thread's state
      return out;
    }
    current_worker = w;
  }
  std::unique_lock<std::mutex> lock(w->mutex);
  w->job = &addresses;
  w->result = &out;
  w->cv.notify_all();
  w->cv.wait(lock, [&] { return w->job == nullptr; });
  return out;
}

}  // namespace tracepool::core
