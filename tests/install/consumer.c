/* Built against an installed tracepool: allocates and frees one block on the host backend. */
#include <stdio.h>
#include <tracepool/tracepool.h>

int main(void) {
  tracepool_t* tp = NULL;
  void* p = NULL;
  if (tracepool_create("backend:host", &tp) != TRACEPOOL_OK) return 1;
  if (tracepool_malloc(tp, 1000, 0, NULL, &p) != TRACEPOOL_OK || p == NULL) return 2;
  if (tracepool_free(tp, p, NULL) != TRACEPOOL_OK) return 3;
  tracepool_destroy(tp);
  printf("installed tracepool %d works\n", TRACEPOOL_VERSION);
  return 0;
}
