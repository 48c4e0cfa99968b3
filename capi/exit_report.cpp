// exit_report.cpp: see exit_report.h.
//
// Note [Exit report]
// TRACEPOOL_REPORT names where the default instance's report goes when the process ends. It is written
// at most once per process, by whichever comes first: the host asking (tracepool_write_exit_report: a
// host whose exit skips C's atexit handlers, as CPython's after Ctrl-C), C's atexit handler, or the
// SIGTERM watcher (Note [SIGTERM]). A second caller while the first is still writing waits for it, so
// that an exit racing a SIGTERM does not end the process under a report half written.
//   - A forked child inherits TRACEPOOL_REPORT, but its report is not the one asked for: a child that
//     exits after its parent would replace the parent's report (a worker's empty one over the 3 MiB its
//     parent leaked). So only the process that made the default instance writes it, unless the path
//     places {pid}: then every process has a file of its own, and a child writes its own too.
//   - Where the path cannot be written, the report goes to the temporary folder, else as text to stderr
//     (Note [When a report cannot be written] in core/report/report_file.cpp); the path is checked when
//     the instance is made, and a line on stderr says then what would fail.
//
// Note [SIGTERM]
// Launchers (Slurm, torchrun) and `kill` end a process with SIGTERM, whose default action runs no exit
// handler: the report would be lost. So where the process leaves SIGTERM to its default action,
// tracepool's handler takes it, and only passes it on: a signal handler may not build a report (the
// signal may have stopped a thread holding the allocator's locks, or malloc's). It writes a byte to a
// pipe that a thread of ours waits on; that thread writes the report, puts the default action back and
// raises SIGTERM again, so the process ends as it would have, by the signal. A program with a SIGTERM
// handler of its own keeps it: set before the instance is made, tracepool installs none; set after, it
// replaces ours. The program then decides whether it ends, and a normal exit writes the report. A
// program that ignores SIGTERM keeps ignoring it. A forked child has no such thread: it dies of the
// signal at once, as it would without tracepool.
#include "exit_report.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "handle.h"
#include "report/report.h"

namespace tracepool::capi {
namespace {

namespace core = tracepool::core;

// Set once by arm_exit_report, before the handlers that read them exist; leaked, so that neither the
// atexit handler nor the watcher ever reads a destroyed string.
tracepool_s* instance = nullptr;
const std::string* report_path = nullptr;
pid_t maker = 0;  // the process that made the default instance

// Who is writing the report, and how far: (pid << 1) | written. A pid other than ours means this
// process has not started (a forked child inherits its parent's word).
std::atomic<uint64_t> progress{0};

bool due_in_this_process() {
  return ::getpid() == maker || report_path->find("{pid}") != std::string::npos;
}

// Builds the report and writes it where TRACEPOOL_REPORT says, or where the fallback puts it, saying so.
int write_now() {
  const char* path = report_path->c_str();
  const int rc = guarded("report at exit", [&] {
    core::report r;
    if (status s = core::build_report(*instance->impl, "exit", &r); s != status::ok) return s;
    core::report_format format;
    if (status s = core::report_format_of(nullptr, path, &format); s != status::ok) return s;
    const std::string content = core::render(r, format);
    const std::string where = core::expand_report_path(path, core::this_process());  // Note [Ranks]
    std::string written_to, why;
    if (core::write_file_or_fallback(where.c_str(), content.data(), content.size(), &written_to, &why) ==
        status::ok) {
      if (!why.empty())
        std::fprintf(stderr, "tracepool: TRACEPOOL_REPORT=%s: %s; the report went to %s instead\n", path, why.c_str(),
                     written_to.c_str());
      return status::ok;
    }
    const std::string fallback = last_error();
    const std::string text = core::to_text(r);
    std::fprintf(stderr, "tracepool: TRACEPOOL_REPORT=%s: %s; nor could it go to the temporary folder (%s): the "
                 "report follows\n%s", path, why.c_str(), fallback.c_str(), text.c_str());
    return fail(status::invalid_argument, "%s", why.c_str());
  });
  if (rc != TRACEPOOL_OK && rc != code(status::invalid_argument))
    std::fprintf(stderr, "tracepool: TRACEPOOL_REPORT=%s: %s\n", path, last_error());
  return rc;
}

void write_at_exit() { write_exit_report_once(); }

// ---- Note [SIGTERM] ------------------------------------------------------------------------------------

int term_pipe[2] = {-1, -1};
pid_t watcher_process = 0;

void on_sigterm(int) {
  const int saved = errno;
  const char byte = 1;
  if (::getpid() != watcher_process || ::write(term_pipe[1], &byte, 1) != 1) {
    ::signal(SIGTERM, SIG_DFL);  // no watcher here (a forked child): end as the default action would
    ::raise(SIGTERM);
  }
  errno = saved;
}

[[noreturn]] void watch_for_sigterm() {
  char byte = 0;
  while (::read(term_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  write_exit_report_once();
  ::signal(SIGTERM, SIG_DFL);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::kill(::getpid(), SIGTERM);  // delivered to a thread that does not block it: the process ends
  ::pthread_sigmask(SIG_UNBLOCK, &term, nullptr);
  for (;;) ::pause();
}

// Installs the handler where SIGTERM has its default action, with a thread of ours to do the work. The
// thread blocks every signal: the host's go to the host's threads.
void take_sigterm() {
  struct sigaction now {};
  if (::sigaction(SIGTERM, nullptr, &now) != 0 || (now.sa_flags & SA_SIGINFO) || now.sa_handler != SIG_DFL) return;
  if (::pipe2(term_pipe, O_CLOEXEC) != 0) return;
  ::fcntl(term_pipe[1], F_SETFL, O_NONBLOCK);  // a handler never blocks: a full pipe already woke the thread
  watcher_process = ::getpid();
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    std::thread(watch_for_sigterm).detach();
  } catch (...) {  // no thread: SIGTERM keeps its default action
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  struct sigaction ours {};
  ours.sa_handler = on_sigterm;
  ours.sa_flags = SA_RESTART;
  sigemptyset(&ours.sa_mask);
  ::sigaction(SIGTERM, &ours, nullptr);
}

}  // namespace

void arm_exit_report(tracepool_s* tp, const char* path) {
  instance = tp;
  report_path = new std::string(path);
  maker = ::getpid();
  if (core::check_report_path(path) != status::ok)
    std::fprintf(stderr, "tracepool: TRACEPOOL_REPORT=%s: %s; unless that changes, the exit report will go to the "
                 "temporary folder\n", path, last_error());
  std::atexit(write_at_exit);
  take_sigterm();
}

int write_exit_report_once() {
  if (instance == nullptr || !due_in_this_process()) return TRACEPOOL_OK;
  const uint64_t me = static_cast<uint64_t>(::getpid()) << 1;
  uint64_t seen = progress.load();
  while ((seen & ~uint64_t{1}) != me) {
    if (progress.compare_exchange_weak(seen, me)) {
      const int rc = write_now();
      progress.store(me | 1);
      return rc;
    }
  }
  // Another thread of this process is writing it, or wrote it: wait for the end of its write (bounded,
  // in case that thread can never finish), so that the process does not end under it.
  for (int waited_ms = 0; (progress.load() & 1) == 0 && waited_ms < 300000; waited_ms += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return TRACEPOOL_OK;
}

}  // namespace tracepool::capi
