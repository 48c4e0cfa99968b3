#include "base/fork_guard.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace tracepool::core {

namespace {

// Leaked: a fork (or an allocator made by an atexit handler) may come after static destructors.
// Both mutexes are held from prepare to after. Leaf locks are registered when the library loads
// (static initialisers of the files that own them), so a registration never waits on a fork while
// holding a lock that prepare needs.
struct fork_registry {
  std::mutex leaf_mutex;  // guards `leaves`
  std::vector<std::mutex*> leaves;
  std::mutex mutex;  // guards `participants`
  std::vector<fork_participant*> participants;
};

fork_registry& registry() {
  static fork_registry* r = new fork_registry();
  return *r;
}

std::atomic<unsigned long> forks{0};
std::atomic<bool> forked_child{false};

void prepare() {
  fork_registry& r = registry();
  r.leaf_mutex.lock();
  for (std::mutex* m : r.leaves) m->lock();
  r.mutex.lock();
  for (fork_participant* p : r.participants) p->lock_for_fork();
}

void after(bool child) {
  fork_registry& r = registry();
  for (auto it = r.participants.rbegin(); it != r.participants.rend(); ++it) (*it)->unlock_after_fork(child);
  r.mutex.unlock();
  for (auto it = r.leaves.rbegin(); it != r.leaves.rend(); ++it) (*it)->unlock();
  r.leaf_mutex.unlock();
}

void in_parent() {
  forks.fetch_add(1, std::memory_order_relaxed);
  after(false);
}

void in_child() {
  forks.fetch_add(1, std::memory_order_relaxed);
  forked_child.store(true, std::memory_order_relaxed);
  after(true);
}

// Installed when libtracepool loads, before any lock of it can be taken.
const int installed = [] {
  registry();
  return pthread_atfork(prepare, in_parent, in_child);
}();

}  // namespace

void register_fork_lock(std::mutex* m) {
  fork_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.leaf_mutex);
  if (std::find(r.leaves.begin(), r.leaves.end(), m) != r.leaves.end()) return;
  r.leaves.push_back(m);
}

void register_fork_participant(fork_participant* p) {
  fork_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.participants.push_back(p);
}

void unregister_fork_participant(fork_participant* p) {
  fork_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.participants.erase(std::remove(r.participants.begin(), r.participants.end(), p), r.participants.end());
}

unsigned long forks_seen() { return forks.load(std::memory_order_relaxed); }
bool is_forked_child() { return forked_child.load(std::memory_order_relaxed); }

}  // namespace tracepool::core
