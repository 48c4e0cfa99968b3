/* leaky_training.c: tracepool's main job, shown on a small "training loop" written against the C API.
 *
 * The loop makes the mistakes PyTorch users ask about (../shared/seeds): validation outputs kept in
 * a list, a loss kept every step (losses.append(loss)), and activations that are freed but stay
 * cached. It marks each epoch and exits; the report that tracepool writes at exit (TRACEPOOL_REPORT)
 * names the lines that still hold memory, flags the ones that grew every epoch, and tells the cache
 * apart from the leaks. Runs on the GPU where there is one, on the host backend otherwise. */
#include <stdio.h>
#include <stdlib.h>

#include <tracepool/tracepool.h>

#define MiB ((size_t)1 << 20)
#define NOINLINE __attribute__((noinline))

static tracepool_t* tp;

static void* device_alloc(size_t bytes) {
  void* p = NULL;
  if (tracepool_malloc(tp, bytes, 0, NULL, &p) != TRACEPOOL_OK) {
    fprintf(stderr, "leaky_training: %s\n", tracepool_last_error());
    exit(1);
  }
  return p;
}

static void device_free(void* p) {
  if (tracepool_free(tp, p, NULL) != TRACEPOOL_OK) {
    fprintf(stderr, "leaky_training: %s\n", tracepool_last_error());
    exit(1);
  }
}

enum { layers = 4, steps = 8, val_batches = 3, epochs = 3 };
static void* weights[layers];
static void* val_outputs[epochs * val_batches]; /* "outputs kept in a list after validation" */
static int n_val_outputs;
static void* losses[epochs * steps]; /* "losses.append(loss)" */
static int n_losses;

static NOINLINE void load_model(void) {
  for (int i = 0; i < layers; ++i) weights[i] = device_alloc(24 * MiB);
}

static NOINLINE void* forward(void** activations) {
  for (int i = 0; i < layers; ++i) activations[i] = device_alloc(6 * MiB + 512 * (size_t)i);
  return device_alloc(512); /* the loss */
}

static NOINLINE void train_step(void) {
  void* activations[layers];
  void* loss = forward(activations);
  for (int i = 0; i < layers; ++i) device_free(activations[i]); /* backward done: freed, and cached */
  losses[n_losses++] = loss;                                      /* the leak: the loss is kept */
}

static NOINLINE void keep_validation_outputs(void) {
  val_outputs[n_val_outputs++] = device_alloc(2 * MiB); /* the leak: outputs kept past validation */
}

static NOINLINE void validate(void) {
  tracepool_tag_push("validation");
  for (int b = 0; b < val_batches; ++b) {
    void* activations[layers];
    device_free(forward(activations));
    for (int i = 0; i < layers; ++i) device_free(activations[i]);
    keep_validation_outputs();
  }
  tracepool_tag_pop();
}

static NOINLINE void unload_model(void) {
  for (int i = 0; i < layers; ++i) device_free(weights[i]);
}

int main(void) {
  tp = tracepool_default();
  if (tp == NULL) {
    fprintf(stderr, "leaky_training: %s\n", tracepool_last_error());
    return 1;
  }
  printf("leaky_training: %d epochs of %d steps and %d validation batches on the %s backend\n", epochs, steps,
         val_batches, tracepool_backend_name(tp));
  load_model();
  for (int e = 1; e <= epochs; ++e) {
    tracepool_tag_push("train");
    for (int s = 0; s < steps; ++s) train_step();
    tracepool_tag_pop();
    validate();
    char label[32];
    snprintf(label, sizeof label, "epoch %d", e);
    tracepool_mark(tp, label);
  }
  unload_model(); /* the model is released; what is left at exit was forgotten */

  tracepool_stats_t s = {.size = sizeof s};
  tracepool_get_stats(tp, 0, &s);
  printf("at exit: %.2f MiB still allocated in %llu blocks, %.2f MiB reserved (nvidia-smi would show this)\n",
         s.allocated_bytes.current / (double)MiB, (unsigned long long)s.allocation.current,
         s.reserved_bytes.current / (double)MiB);
  fflush(stdout); /* before the report, which goes to stderr */
  if (getenv("TRACEPOOL_REPORT") == NULL) /* otherwise tracepool writes it at exit */
    return tracepool_write_report(tp, "stderr", "text") == TRACEPOOL_OK ? 0 : 1;
  return 0;
}
