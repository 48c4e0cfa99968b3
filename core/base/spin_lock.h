// spin_lock.h: a lock for critical sections of a few dozen instructions (a hash-table probe).
// Unlocking is one release store, against std::mutex's atomic exchange: this saves about a quarter
// of a cached alloc+free pair. Waiters spin briefly, then yield, so a preempted holder costs little.
// Never hold one across anything that can block.
//
// Under TSan it tells the sanitizer it is a lock, so that TSan checks its place in Note [Lock order]
// (allocator.h) like a mutex's. lock_for_fork() and unlock_after_fork() take it unannounced: the fork
// handler holds every shard of a table at once (Note [Fork]), more locks than TSan tracks per thread.
#pragma once

#include <atomic>
#include <thread>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TRACEPOOL_TSAN_LOCK(call) call
#else
#define TRACEPOOL_TSAN_LOCK(call) ((void)0)
#endif

namespace tracepool::core {

class spin_lock {
 public:
  void lock() {
    TRACEPOOL_TSAN_LOCK(__tsan_mutex_pre_lock(this, 0));
    lock_for_fork();
    TRACEPOOL_TSAN_LOCK(__tsan_mutex_post_lock(this, 0, 0));
  }
  void unlock() {
    TRACEPOOL_TSAN_LOCK(__tsan_mutex_pre_unlock(this, 0));
    unlock_after_fork();
    TRACEPOOL_TSAN_LOCK(__tsan_mutex_post_unlock(this, 0));
  }
  void lock_for_fork() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64)
          pause();
        else
          std::this_thread::yield();
      }
    }
  }
  void unlock_after_fork() { locked_.store(false, std::memory_order_release); }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  std::atomic<bool> locked_{false};
};

}  // namespace tracepool::core
