/* exit_report_child.c: a separate process for the at-exit report tests. It leaks known blocks from
 * child_leak() and exits; TRACEPOOL_REPORT (set by the test) makes tracepool write the report.
 *
 * TRACEPOOL_CHILD_SITES=N also leaks one small block under each of N distinct long tags (a site is a
 * stack plus its tags), so that the exit report is megabytes long and its write takes a while, and
 * writes "exiting\n" to fd 1 just before main returns: the kill tests kill the process from then on.
 * TRACEPOOL_CHILD_EARLY=1 writes the exit report with tracepool_write_exit_report() before leaking
 * one more block from late_leak(): the report must not be written again at exit.
 * TRACEPOOL_CHILD_THREADS=N starts N threads that allocate and free without end; after a while one of
 * them calls exit(0) while the others go on, through the exit report and the static destructors.
 * TRACEPOOL_CHILD_WAIT=1 writes "waiting\n" to fd 1 once it has leaked, then waits for a signal: the
 * SIGTERM tests end it. TRACEPOOL_CHILD_OWN_SIGTERM=1 first sets a SIGTERM handler of its own, after
 * which the child exits with status 3. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tracepool/tracepool.h>
#include <unistd.h>

__attribute__((noinline)) static void child_leak(tracepool_t* tp, size_t bytes) {
  void* p = NULL;
  if (tracepool_malloc(tp, bytes, 0, NULL, &p) != TRACEPOOL_OK) {
    fprintf(stderr, "child: malloc failed: %s\n", tracepool_last_error());
    exit(2);
  }
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void late_leak(tracepool_t* tp) {
  child_leak(tp, 4096);
  __asm__ volatile("" ::: "memory");
}

static int leak_under_tags(tracepool_t* tp, long sites) {
  char label[201];
  memset(label, 'x', sizeof label - 1);
  label[sizeof label - 1] = '\0';
  for (long i = 0; i < sites; ++i) {
    snprintf(label, 24, "site %ld ", i); /* the rest of the label stays 'x': every tag is 200 bytes */
    label[strlen(label)] = 'x';
    if (tracepool_tag_push(label) != TRACEPOOL_OK) return -1;
    child_leak(tp, 512);
    if (tracepool_tag_pop() != TRACEPOOL_OK) return -1;
  }
  return 0;
}

static tracepool_t* shared;

static void* churn(void* arg) {
  const long me = (long)arg;
  for (long i = 0;; ++i) {
    void* p = NULL;
    if (tracepool_malloc(shared, 512 + (size_t)(i % 64) * 4096, 0, NULL, &p) == TRACEPOOL_OK)
      tracepool_free(shared, p, NULL);
    if (me == 0 && i == 20000) exit(0); /* not from main: the others are still allocating */
  }
  return NULL;
}

/* The program's own SIGTERM handler, as a careful C program writes one: it notes the signal, and main
 * exits (exit() itself is not async-signal-safe: it runs the exit report). */
static volatile sig_atomic_t terminated;
static void note_sigterm(int signo) {
  (void)signo;
  terminated = 1;
}

int main(void) {
  if (getenv("TRACEPOOL_CHILD_OWN_SIGTERM") != NULL) signal(SIGTERM, note_sigterm);
  tracepool_t* tp = tracepool_default();
  if (tp == NULL) {
    fprintf(stderr, "child: %s\n", tracepool_last_error());
    return 2;
  }
  for (int i = 0; i < 7; ++i) child_leak(tp, 12345);
  if (tracepool_mark(tp, "before exit") != TRACEPOOL_OK) return 2;
  if (getenv("TRACEPOOL_CHILD_EARLY") != NULL) {
    if (tracepool_write_exit_report() != TRACEPOOL_OK) return 2;
    late_leak(tp);
  }
  if (getenv("TRACEPOOL_CHILD_WAIT") != NULL) {
    if (write(1, "waiting\n", 8) != 8) return 2;
    while (!terminated) pause();
    exit(3);
  }
  const char* threads = getenv("TRACEPOOL_CHILD_THREADS");
  if (threads != NULL) {
    shared = tp;
    pthread_t t[16];
    const long n = atol(threads) < 16 ? atol(threads) : 16;
    for (long i = 0; i < n; ++i) pthread_create(&t[i], NULL, churn, (void*)i);
    for (long i = 0; i < n; ++i) pthread_join(t[i], NULL); /* never returns: thread 0 exits */
  }
  const char* sites = getenv("TRACEPOOL_CHILD_SITES");
  if (sites != NULL) {
    if (leak_under_tags(tp, atol(sites)) != 0) {
      fprintf(stderr, "child: tags: %s\n", tracepool_last_error());
      return 2;
    }
    if (write(1, "exiting\n", 8) != 8) return 2;
  }
  return 0; /* the report is written by tracepool's exit handler */
}
