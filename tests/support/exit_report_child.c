/* exit_report_child.c: a separate process for the at-exit report test. It leaks known blocks from
 * child_leak() and exits; TRACEPOOL_REPORT (set by the test) makes tracepool write the report. */
#include <stdio.h>
#include <stdlib.h>

#include <tracepool/tracepool.h>

__attribute__((noinline)) static void child_leak(tracepool_t* tp, size_t bytes) {
  void* p = NULL;
  if (tracepool_malloc(tp, bytes, 0, NULL, &p) != TRACEPOOL_OK) {
    fprintf(stderr, "child: malloc failed: %s\n", tracepool_last_error());
    exit(2);
  }
  __asm__ volatile("" ::: "memory");
}

int main(void) {
  tracepool_t* tp = tracepool_default();
  if (tp == NULL) {
    fprintf(stderr, "child: %s\n", tracepool_last_error());
    return 2;
  }
  for (int i = 0; i < 7; ++i) child_leak(tp, 12345);
  if (tracepool_mark(tp, "before exit") != TRACEPOOL_OK) return 2;
  return 0; /* the report is written by tracepool's exit handler */
}
