// spin_lock.h: a lock for critical sections of a few dozen instructions (a hash-table probe).
// Unlocking is one release store, against std::mutex's atomic exchange: this saves about a quarter
// of a cached alloc+free pair. Waiters spin briefly, then yield, so a preempted holder costs little.
// Never hold one across anything that can block.
#pragma once

#include <atomic>
#include <thread>

namespace tracepool::core {

class spin_lock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) pause();
        else std::this_thread::yield();
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

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
