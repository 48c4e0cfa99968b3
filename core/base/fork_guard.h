// fork_guard.h: tracepool across fork().
//
// Note [Fork]
// A program forks while other threads use tracepool (PyTorch's DataLoader workers, multiprocessing,
// subprocess without vfork). The child has only the forking thread, and every lock another thread
// held at that moment stays held there forever: the child hangs at its first allocation, report or
// tag. So one pthread_atfork handler, installed when the library loads, takes every tracepool lock
// before fork() and releases them all after it, in the parent and in the child; the child then
// starts from a consistent state: no half-done operation, every lock free.
//   Order of taking (the order in which they nest everywhere else, so prepare cannot deadlock with
//   a thread that holds some of them): first the leaf locks (register_fork_lock: process-wide locks
//   never held while another tracepool lock is taken, and capi's default-instance lock, which is
//   held while an instance is made, so before the registry), then the registry of instances, then
//   each instance (allocator::lock_for_fork writes its own order down). Release is the reverse.
//   In the child, state that belongs to the parent is given up (allocator::unlock_after_fork): the
//   CUDA backend refuses every further call with status::unavailable (the driver's context is the
//   parent's), and the blocks the child inherited are no longer waiting for device work, which the
//   child cannot see; its reports and the host backend go on working.
#pragma once

#include <mutex>

namespace tracepool::core {

// An object with locks of its own (an allocator instance).
class fork_participant {
 public:
  // Takes every lock of the object, in its fixed order.
  virtual void lock_for_fork() = 0;
  // Releases them; in the child, first gives up what the child cannot use.
  virtual void unlock_after_fork(bool child) = 0;

 protected:
  ~fork_participant() = default;
};

// A process-wide leaf lock (see Note [Fork]); the mutex must live as long as the process, and is
// registered while the library loads (a static initialiser of the file that owns it).
void register_fork_lock(std::mutex* m);
void register_fork_participant(fork_participant* p);
void unregister_fork_participant(fork_participant* p);

// How many times this process has forked since tracepool loaded, and whether it is a child of a
// fork that happened after tracepool loaded.
unsigned long forks_seen();
bool is_forked_child();

}  // namespace tracepool::core
