// bounded_write.cpp: see bounded_write.h, Note [Bounded writes].
//
// Note [SIGINT while waiting]
// Ctrl-C must end a wait for a reader, yet SIGINT belongs to the host: a C program dies of it, CPython
// notes it and raises KeyboardInterrupt between bytecodes (which it cannot do while we wait in C), a
// server may ignore it. So while a write waits (only then: poll() said the reader has no room), SIGINT's
// handler is one that notes the signal and then does what the host's would have: calls it, or ends the
// process as the default action does, or nothing where the host ignores SIGINT (then it is not noted
// either). Noted, the wait gives up and the write returns, so a Python host sees its KeyboardInterrupt.
// The host's handler is put back when the last waiting writer returns, unless someone replaced ours
// meanwhile. Writers waiting in several threads share the one handler.
#include "base/bounded_write.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>

namespace tracepool::core {
namespace {

// Blocks SIGPIPE on this thread while it writes, so that a reader that goes away makes write() fail
// with EPIPE instead of killing the host. A SIGPIPE our write raised is consumed before the mask is
// restored; one that was pending before is left for the host.
class sigpipe_blocked {
 public:
  sigpipe_blocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~sigpipe_blocked() {
    if (!blocked_) return;
    const int saved = errno;
    if (broke_ && !was_pending_) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }
  void broke() { broke_ = true; }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false, blocked_ = false, broke_ = false;
};

// ---- Note [SIGINT while waiting] ---------------------------------------------------------------------

std::mutex watch_mutex;            // guards the two below, and the install and restore of the handler
int waiting_writers = 0;
struct sigaction host_sigint {};   // the host's handler, while ours is installed
std::atomic<bool> sigint_noted{false};

void note_sigint(int signo, siginfo_t* info, void* context) {
  const struct sigaction& host = host_sigint;
  if (host.sa_flags & SA_SIGINFO) {
    sigint_noted.store(true);
    if (host.sa_sigaction != nullptr) host.sa_sigaction(signo, info, context);
  } else if (host.sa_handler == SIG_IGN) {
    // ignored by the host: not a reason to give up
  } else if (host.sa_handler == SIG_DFL) {
    // The default action ends the process: back to it, and the signal again (delivered once we return).
    sigaction(SIGINT, &host, nullptr);
    raise(SIGINT);
  } else {
    sigint_noted.store(true);
    host.sa_handler(signo);
  }
}

class sigint_watch {
 public:
  sigint_watch() {
    std::lock_guard<std::mutex> lock(watch_mutex);
    if (waiting_writers++ > 0) return;
    sigint_noted.store(false);
    struct sigaction ours {};
    ours.sa_sigaction = note_sigint;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(SIGINT, &ours, &host_sigint);
  }
  ~sigint_watch() {
    std::lock_guard<std::mutex> lock(watch_mutex);
    if (--waiting_writers > 0) return;
    struct sigaction now {};
    if (sigaction(SIGINT, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == note_sigint)
      sigaction(SIGINT, &host_sigint, nullptr);
  }
  bool noted() const { return sigint_noted.load(); }
  sigint_watch(const sigint_watch&) = delete;
  sigint_watch& operator=(const sigint_watch&) = delete;
};

int64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1000000;
}

// Waits until `fd` takes more, at most stall_ms; the SIGINT watch goes up only if there is a wait.
write_outcome wait_for_room(int fd, int stall_ms, std::unique_ptr<sigint_watch>* watch) {
  pollfd out{fd, POLLOUT, 0};
  if (::poll(&out, 1, 0) > 0) return write_outcome::written;  // room now: the common case, no wait
  if (!*watch) watch->reset(new sigint_watch());
  const int64_t deadline = now_ms() + stall_ms;
  for (;;) {
    if ((*watch)->noted()) return write_outcome::interrupted;
    const int64_t left = deadline - now_ms();
    if (left <= 0) return write_outcome::stalled;
    out.revents = 0;
    const int r = ::poll(&out, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (r > 0) return write_outcome::written;  // room, or an error that write() will report
    if (r == 0) return write_outcome::stalled;
    if (errno != EINTR) return write_outcome::failed;
  }
}

}  // namespace

write_outcome write_bounded(int fd, const void* data, size_t size, int stall_ms, size_t* written) {
  *written = 0;
  sigpipe_blocked quiet;
  std::unique_ptr<sigint_watch> watch;  // Note [SIGINT while waiting], only once a write must wait
  struct ::stat st {};
  const bool straight = ::fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
  const int flags = ::fcntl(fd, F_GETFL);
  // A blocking pipe is written PIPE_BUF bytes at a time once poll() says there is room: such a write
  // never blocks. A non-blocking one takes what fits, and says EAGAIN when nothing does.
  const bool blocking_pipe = !straight && flags >= 0 && (flags & O_NONBLOCK) == 0;
  const char* p = static_cast<const char*>(data);
  while (*written < size) {
    if (blocking_pipe) {
      if (const write_outcome w = wait_for_room(fd, stall_ms, &watch); w != write_outcome::written) return w;
    }
    const size_t chunk = blocking_pipe ? std::min<size_t>(size - *written, PIPE_BUF) : size - *written;
    const ssize_t n = ::write(fd, p + *written, chunk);
    if (n > 0) {
      *written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (watch && watch->noted()) return write_outcome::interrupted;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (const write_outcome w = wait_for_room(fd, stall_ms, &watch); w != write_outcome::written) return w;
      continue;
    }
    if (n < 0 && errno == EPIPE) quiet.broke();
    if (n == 0) errno = EIO;
    return write_outcome::failed;
  }
  return write_outcome::written;
}

}  // namespace tracepool::core
