/* runtime.c: a small array runtime in C11 that gets its device memory from tracepool, through the
 * public header alone. Built two ways against an installed tracepool (examples/c/CMakeLists.txt with
 * find_package, and `cc $(pkg-config --cflags --libs tracepool)`), and run in CI on the host backend
 * and by the GPU check on CUDA (TRACEPOOL_CONF picks the backend; the default is CUDA where there is
 * one).
 *
 * Each "iteration" allocates scratch arrays and frees them (they stay cached), and keeps one result
 * array in a history that is never trimmed: the leak. The report printed at the end names
 * keep_result() as the site that holds memory and grew at every mark, and shows the scratch memory
 * as cache, not as a leak. Exit status 0 if every call succeeded. */
#include <stdio.h>
#include <stdlib.h>

#include <tracepool/tracepool.h>

typedef struct {
  float* data; /* device memory (host memory on the host backend) */
  size_t n;
} array;

static tracepool_t* tp;

static void fail(const char* what) {
  fprintf(stderr, "runtime: %s: %s\n", what, tracepool_last_error());
  exit(1);
}

/* noinline: each function is a frame of its own in the call sites the report shows. */
__attribute__((noinline)) static array array_new(size_t n) {
  array a = {NULL, n};
  if (tracepool_malloc(tp, n * sizeof(float), 0, NULL, (void**)&a.data) != TRACEPOOL_OK) fail("array_new");
  return a;
}

static void array_free(array* a) {
  if (tracepool_free(tp, a->data, NULL) != TRACEPOOL_OK) fail("array_free");
  a->data = NULL;
}

enum { iterations = 4, scratch_arrays = 8 };
static array history[iterations];

__attribute__((noinline)) static void keep_result(int i) { history[i] = array_new((size_t)1 << 18); }

__attribute__((noinline)) static void iterate(int i) {
  array scratch[scratch_arrays];
  for (int k = 0; k < scratch_arrays; ++k) scratch[k] = array_new((size_t)(k + 1) << 16);
  for (int k = 0; k < scratch_arrays; ++k) array_free(&scratch[k]);
  keep_result(i);
}

int main(void) {
  tp = tracepool_default();
  if (tp == NULL) fail("tracepool_default");
  printf("runtime.c on the %s backend, tracepool %d\n", tracepool_backend_name(tp), TRACEPOOL_VERSION);
  if (tracepool_tag_push("c runtime") != TRACEPOOL_OK) fail("tag_push");
  for (int i = 0; i < iterations; ++i) {
    iterate(i);
    char label[32];
    snprintf(label, sizeof label, "iteration %d", i);
    if (tracepool_mark(tp, label) != TRACEPOOL_OK) fail("mark");
  }
  if (tracepool_tag_pop() != TRACEPOOL_OK) fail("tag_pop");

  tracepool_report_options_t options = {.size = sizeof options, .format = "text", .top = 3};
  char* text = NULL;
  if (tracepool_report_string_with(tp, &options, &text) != TRACEPOOL_OK) fail("report");
  fputs(text, stdout);
  tracepool_string_free(text);

  for (int i = 0; i < iterations; ++i) array_free(&history[i]);
  if (tracepool_validate(tp) != TRACEPOOL_OK) fail("validate");
  return 0;
}
