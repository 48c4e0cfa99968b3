/* tracepool.h: the C ABI of tracepool, a caching GPU-memory allocator that remembers who asked.
 *
 * Error contract: every function that returns int returns TRACEPOOL_OK (0) on success and a negative
 * TRACEPOOL_ERR_* code on failure; tracepool_last_error() then holds a message for the calling thread
 * that says what was wrong. A failed call changes nothing. No function throws or aborts.
 *
 * Handles: a function given a handle that is not live (destroyed already, or never returned by
 * tracepool_create or tracepool_default) returns TRACEPOOL_ERR_INVALID_ARGUMENT ("tracepool_malloc:
 * handle 0x... is not a live tracepool (destroyed, or never created)") and never follows it; NULL is
 * refused so too. An address that a later tracepool_create returns is that new instance.
 *
 * Thread safety: every function may be called from any thread at any time, except that
 * tracepool_destroy() must not race with other calls on the same handle.
 *
 * fork(): safe while other threads use tracepool. The child inherits every instance in a consistent
 * state (no lock held, no operation half done); its reports, tags, marks and the host backend work.
 * A child cannot use CUDA state its parent initialised: with the CUDA backend, calls that need the
 * device fail with TRACEPOOL_ERR_UNAVAILABLE saying so, while frees of inherited blocks and reports
 * work. Use the 'spawn' start method for worker processes that need the GPU.
 *
 * Full documentation: docs/c-api.md, docs/c-api-reference.md and docs/configuration.md (the keys).
 */
#ifndef TRACEPOOL_TRACEPOOL_H
#define TRACEPOOL_TRACEPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "tracepool_stat_map.h"
#include "tracepool_status_map.h"

#if defined(TRACEPOOL_BUILDING_SHARED)
#define TRACEPOOL_API __attribute__((visibility("default")))
#else
#define TRACEPOOL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TRACEPOOL_VERSION 100 /* major*10000 + minor*100 + patch: 0.1.0 */

/* ---- Status codes ------------------------------------------------------------------------- */
/* TRACEPOOL_OK (0) and the negative TRACEPOOL_ERR_* codes (TRACEPOOL_ERR_INVALID_ARGUMENT = -1, ...):
 * one per row of tracepool_status_map.h, which gives each its value and its meaning. */
enum tracepool_status {
#define TRACEPOOL_STATUS_CONSTANT_(name, core_name, code, message, python_class) TRACEPOOL_##name = (code),
  TRACEPOOL_STATUS_MAP(TRACEPOOL_STATUS_CONSTANT_)
#undef TRACEPOOL_STATUS_CONSTANT_
};

/* ---- Handles and structs ------------------------------------------------------------------ */
/* The tag is tracepool_s, not tracepool: C++ cannot have a struct and a namespace of one name. */
typedef struct tracepool_s tracepool_t; /* opaque */

/* One statistic, with the meaning of PyTorch's torch.cuda.memory_stats(). */
typedef struct tracepool_stat {
  uint64_t current;   /* value now */
  uint64_t peak;      /* highest value since creation or the last reset_peak */
  uint64_t allocated; /* total increase since creation or the last reset_accumulated */
  uint64_t freed;     /* total decrease since creation or the last reset_accumulated */
} tracepool_stat_t;

/* The nine block and segment statistics, for one pool kind (all, small_pool, large_pool): one field
 * per row of tracepool_stat_map.h, in its order (allocation, segment, ..., requested_bytes), which
 * says what each counts. */
#define TRACEPOOL_STAT_FIELD_(name) tracepool_stat_t name;
typedef struct tracepool_stat_set {
  TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_FIELD_)
} tracepool_stat_set_t;

/* Per-device statistics. Set `size = sizeof(tracepool_stats_t)` before calling get_stats: an older
 * caller with a smaller struct gets the fields it knows of. The top-level fields are "all" pools, so
 * s.allocated_bytes.current is PyTorch's memory_stats()["allocated_bytes.all.current"]. */
typedef struct tracepool_stats {
  size_t size;
  TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_FIELD_) /* the nine of tracepool_stat_set_t, for all pools */
  uint64_t num_alloc_retries; /* allocations that freed the cache and retried */
  uint64_t num_ooms;          /* allocations that failed with TRACEPOOL_ERR_OOM */
  uint64_t num_device_alloc;  /* segments obtained from the device */
  uint64_t num_device_free;   /* segments given back to the device */
  uint64_t num_invalid_frees; /* frees rejected as unknown pointer or double free */
  uint64_t limit_bytes;       /* configured byte limit for this device, 0 if none */
  tracepool_stat_set_t small_pool; /* requests of at most 1 MiB, served from 2 MiB segments */
  tracepool_stat_set_t large_pool; /* larger requests */
} tracepool_stats_t;
#undef TRACEPOOL_STAT_FIELD_

/* ---- Lifetime ------------------------------------------------------------------------------ */
/* The process-wide instance, configured from TRACEPOOL_CONF on first call. NULL if that failed
 * (tracepool_last_error() says why, on the calling thread); later calls return the same result. */
TRACEPOOL_API tracepool_t* tracepool_default(void);
/* A new instance configured from `conf` ("key:value,key:value"; NULL or "" for defaults). At most 1024
 * instances are live at once: more is TRACEPOOL_ERR_INVALID_ARGUMENT. */
TRACEPOOL_API int tracepool_create(const char* conf, tracepool_t** out);
/* Frees every segment and the handle. Blocks still handed out become invalid. NULL is a no-op.
 * Destroying tracepool_default() is refused (it is a no-op). A handle that is not live (destroyed
 * already, or never created) is left alone, and tracepool_last_error() says so. */
TRACEPOOL_API void tracepool_destroy(tracepool_t* tp);

/* ---- Allocation (stream-ordered; a stream is a cudaStream_t / CUstream, NULL = default) ------- */
/* Device memory of at least `size` bytes, aligned to 256 bytes or more, usable in stream order on
 * `stream`. size 0 gives *out = NULL and TRACEPOOL_OK. */
TRACEPOOL_API int tracepool_malloc(tracepool_t* tp, size_t size, int device, void* stream, void** out);
/* tracepool_malloc with the host's own rounding (PyTorch's roundup_power2_divisions): the block is
 * `rounded` bytes, rounded up to tracepool's 512, where that is more than `size` and no more than the
 * largest request; otherwise tracepool's rounding. The caller's request (statistics, reports) stays `size`. */
TRACEPOOL_API int tracepool_malloc_rounded(tracepool_t* tp, size_t size, size_t rounded, int device, void* stream,
                                           void** out);
/* The segment a request of `size` bytes takes from the device when no cached block fits it: 2 MiB up to
 * 1 MiB, 20 MiB up to 10 MiB, beyond that the request rounded up to 2 MiB (PyTorch's sizes, which its
 * out-of-memory message names); a request larger than any tracepool serves (2^50) as it is. */
TRACEPOOL_API size_t tracepool_segment_size(size_t size);
/* Returns a block to the cache; it is reusable at once on the stream it was allocated on, and on
 * other streams once the work submitted there before the free has completed. NULL is a no-op.
 * `stream` is accepted for symmetry and ignored: the block remembers its allocation stream.
 * Streams: a stream must stay alive until every block allocated on it has been freed (as in RMM);
 * after that it may be destroyed, and tracepool never touches it again. */
TRACEPOOL_API int tracepool_free(tracepool_t* tp, void* ptr, void* stream);
/* Marks `ptr` as used on `stream` too (Tensor.record_stream): at free, reuse waits for the work
 * submitted to `stream` before the free as well. */
TRACEPOOL_API int tracepool_record_stream(tracepool_t* tp, void* ptr, void* stream);
/* ---- Observed memory: what a runtime got outside the pool --------------------------------------- */
/* Tells tracepool that the caller got `size` bytes at `ptr` outside tracepool's pool: from the driver
 * (cuMemAlloc, cudaMalloc), its own allocator or an arena. tracepool records the block with the calling
 * thread's call site, tags and marks, as a pool block, and never serves, caches or frees it: reports list
 * it among the live sites, tagged "outside the pool: SOURCE" ("pinned host: SOURCE" for kind HOST), with
 * its growth; the device's observed bytes are in the report's devices. `kind`: DEVICE (on `device`),
 * MANAGED, or HOST (pinned host memory that `device`'s context made). `source` names who got it, 1 to 32
 * bytes of UTF-8 without control characters ("nccl", "cudaMalloc", "xla"). TRACEPOOL_ERR_INVALID_ARGUMENT
 * (nothing recorded) for a NULL pointer, size 0 or over 2^50, a bad kind or source, a pointer observed
 * already, or a block of tracepool's own pool. */
#define TRACEPOOL_OBSERVED_DEVICE 0
#define TRACEPOOL_OBSERVED_MANAGED 1
#define TRACEPOOL_OBSERVED_HOST 2
TRACEPOOL_API int tracepool_observe_alloc(tracepool_t* tp, const void* ptr, size_t size, int device, int kind,
                                          const char* source);
/* Its release: `ptr` as told to tracepool_observe_alloc (NULL is a no-op). Call it before the memory goes
 * back (before cuMemFree): once it has, another thread may get the same address and observe it. A pointer
 * not observed now is TRACEPOOL_ERR_INVALID_ARGUMENT, and nothing changes. */
TRACEPOOL_API int tracepool_observe_free(tracepool_t* tp, const void* ptr);
/* A request of `size` bytes on `device` that the caller's own source refused for want of memory (the driver
 * said CUDA_ERROR_OUT_OF_MEMORY to a cuMemAlloc outside the pool): the out-of-memory report is made as for a
 * pool allocation that fails, with the request's call site, tagged "outside the pool: SOURCE" (printed
 * unless oom_report:off; tracepool_write_oom_report writes it). Returns TRACEPOOL_ERR_OOM, the last error
 * saying what the report found; TRACEPOOL_ERR_INVALID_ARGUMENT for size 0 or a bad source, and
 * TRACEPOOL_ERR_INVALID_DEVICE for a bad device. */
TRACEPOOL_API int tracepool_observe_oom(tracepool_t* tp, size_t size, int device, const char* source);
/* Gives every fully free cached segment of `device` back to the device (-1: all devices). */
TRACEPOOL_API int tracepool_empty_cache(tracepool_t* tp, int device);
/* Device memory as the driver sees it (like cudaMemGetInfo). */
TRACEPOOL_API int tracepool_mem_get_info(tracepool_t* tp, int device, size_t* free_bytes, size_t* total_bytes);
/* Caps the bytes `device` may reserve (0 removes the cap; -1: all devices). More than INT64_MAX bytes
 * is TRACEPOOL_ERR_INVALID_ARGUMENT: reports carry byte counts as int64 (TRACEPOOL_CONF's byte sizes
 * stop there too). */
TRACEPOOL_API int tracepool_set_limit(tracepool_t* tp, int device, size_t bytes);
/* Whether a block used on other streams (tracepool_record_stream) and freed during a CUDA graph capture
 * may be handed out again inside that capture once the graph orders all later work on its stream after
 * its last uses, as PyTorch's graph_capture_record_stream_reuse (on: nonzero). Off, such a block waits
 * for the capture's end. Starts as TRACEPOOL_CONF's capture_reuse (off). `*out` of the getter: 0 or 1. */
TRACEPOOL_API int tracepool_set_capture_reuse(tracepool_t* tp, int on);
TRACEPOOL_API int tracepool_capture_reuse(tracepool_t* tp, int* out);

/* ---- Private pools: a CUDA graph's memory, a scoped pool (PyTorch's MemPool) --------------------
 * A private pool (id: any nonzero 64-bit value the caller picks) holds memory that only allocations
 * routed to it get. While a route is open, every allocation on `device` that its filter accepts
 * comes from the pool; a block freed, even during a capture, goes back to the pool and is reused only
 * by allocations routed to it. Routes are tried newest first. The pool lives while it has uses: a
 * route's begin adds one, retain adds one, release drops one; at none its free memory goes back to
 * the device, and so does the rest as its last blocks are freed. While any route is open tracepool
 * calls nothing that would break a stream capture (no event queries, no cuMemFree; device memory is
 * obtained in relaxed capture mode): empty_cache keeps the cache and an allocation that does not fit
 * fails without emptying it. To capture a CUDA graph: begin with the capturing stream, begin the
 * capture, end it, tracepool_pool_end; tracepool_pool_release when the graph is destroyed.
 *
 * A filter returns nonzero for an allocation on `stream` that goes to the pool. It runs on the
 * allocating thread, before tracepool takes any lock of the allocator, under the routes' own lock: it
 * must not call tracepool. NULL filter: allocations on the stream `context` are routed. `release`
 * (may be NULL) is called with `context` once the route has closed and no filter call is running. */
typedef int (*tracepool_pool_filter_fn)(void* context, void* stream);
TRACEPOOL_API int tracepool_pool_begin(tracepool_t* tp, int device, uint64_t pool, tracepool_pool_filter_fn filter,
                                       void* context, void (*release)(void* context));
/* Closes every route to `pool` on `device` (none open is not an error). */
TRACEPOOL_API int tracepool_pool_end(tracepool_t* tp, int device, uint64_t pool);
/* Adds a use, creating the pool if it does not exist. A new pool is named in reports by the call site
 * of this call (or of the begin that created it). */
TRACEPOOL_API int tracepool_pool_retain(tracepool_t* tp, int device, uint64_t pool);
/* Drops a use. TRACEPOOL_ERR_INVALID_ARGUMENT if the pool has none left. */
TRACEPOOL_API int tracepool_pool_release(tracepool_t* tp, int device, uint64_t pool);
/* The pool's uses; 0 once it is released (or never was). */
TRACEPOOL_API int tracepool_pool_use_count(tracepool_t* tp, int device, uint64_t pool, int* out);
/* Gives the pool's fully free segments back to the device (while no route is open). */
TRACEPOOL_API int tracepool_pool_empty(tracepool_t* tp, int device, uint64_t pool);
/* The addresses of the pool's allocated blocks: *count is how many there are; at most `capacity` are
 * written to `out` (which may be NULL when capacity is 0). */
TRACEPOOL_API int tracepool_pool_blocks(tracepool_t* tp, int device, uint64_t pool, void** out, size_t capacity,
                                        size_t* count);
/* Names the pool's kind in reports ("CUDA graph", "torch.cuda.MemPool"; a pool never labelled is a
 * "private pool"): reports show each retained pool as a group of its own, "held by <label> created at
 * <the creating call's line>", and its blocks are not counted as leaks (docs/report-schema.md, "pools").
 * `label` is copied; UTF-8, 1 to 256 bytes, no control characters (as tag and mark labels). A later
 * call replaces it. TRACEPOOL_ERR_INVALID_ARGUMENT if the pool is not retained or the label is bad. */
TRACEPOOL_API int tracepool_pool_label(tracepool_t* tp, int device, uint64_t pool, const char* label);

/* A retained pool's options (PyTorch's MemPool(no_split=..., use_on_oom=...)), a set of these flags:
 * NO_SPLIT: its blocks are never split, so each allocation is a segment of its own, sized to it;
 * USE_ON_OOM: an allocation outside private pools that does not fit, even once the cache is emptied,
 * may take a free block of this pool on the same stream (the block returns to this pool when freed).
 * Other bits are TRACEPOOL_ERR_INVALID_ARGUMENT, as is a pool that is not retained. */
#define TRACEPOOL_POOL_NO_SPLIT 1u
#define TRACEPOOL_POOL_USE_ON_OOM 2u
TRACEPOOL_API int tracepool_pool_set_options(tracepool_t* tp, int device, uint64_t pool, unsigned options);
TRACEPOOL_API int tracepool_pool_options(tracepool_t* tp, int device, uint64_t pool, unsigned* out);

/* Where a retained pool's memory comes from (PyTorch's MemPool(allocator=...)): from now on its
 * segments, classic ones sized as usual, come from `alloc` (NULL: no memory, the allocation is out of
 * memory) and go back to `free` with the same size, device and stream; tracepool still splits, caches
 * and attributes its blocks. Both run under one of tracepool's locks: they must not call tracepool.
 * `release` (may be NULL) runs on `context` once the pool and all such segments are gone. Set before
 * the pool's first allocation: a pool with memory already is TRACEPOOL_ERR_INVALID_ARGUMENT (and
 * `release` runs at once). */
typedef void* (*tracepool_segment_alloc_fn)(void* context, size_t size, int device, void* stream);
typedef void (*tracepool_segment_free_fn)(void* context, void* ptr, size_t size, int device, void* stream);
TRACEPOOL_API int tracepool_pool_set_allocator(tracepool_t* tp, int device, uint64_t pool,
                                               tracepool_segment_alloc_fn alloc, tracepool_segment_free_fn free,
                                               void* context, void (*release)(void* context));

/* Checkpoints of a private pool (PyTorch's getCheckpointState/setCheckpointPoolState, which
 * torch.compile's CUDA-graph trees use to record a second path through a tree). A checkpoint is the
 * pool's allocated blocks at one moment: address, size, stream and call site. Restoring it frees every
 * block the pool has allocated now, then hands each checkpointed block out again at its address, so the
 * pool's allocated blocks are exactly the checkpoint's. `freed` is called with each address freed and
 * `made` with each block made (the caller owns it, to free with tracepool_free), once the restore is
 * done, with no lock held; either may be NULL, and one address may be in both. If a checkpointed
 * block's memory is no longer the pool's, or is still used by record_stream work while a capture runs,
 * TRACEPOOL_ERR_INVALID_ARGUMENT and nothing changes. A checkpoint belongs to the instance that took it;
 * release it with tracepool_pool_checkpoint_free (NULL is a no-op). */
typedef struct tracepool_pool_checkpoint tracepool_pool_checkpoint_t;
typedef void (*tracepool_pointer_fn)(void* context, void* ptr);
TRACEPOOL_API int tracepool_pool_checkpoint(tracepool_t* tp, int device, uint64_t pool,
                                            tracepool_pool_checkpoint_t** out);
TRACEPOOL_API int tracepool_pool_restore(tracepool_t* tp, const tracepool_pool_checkpoint_t* checkpoint,
                                         tracepool_pointer_fn freed, tracepool_pointer_fn made, void* context);
TRACEPOOL_API void tracepool_pool_checkpoint_free(tracepool_pool_checkpoint_t* checkpoint);

/* The allocation history at run time (what TRACEPOOL_CONF's history:N turns on at creation; PyTorch's
 * torch.cuda.memory._record_memory_history): max_entries > 0 records from now on, keeping the newest
 * max_entries events (and the newest already recorded that fit). max_entries 0 stops recording and
 * forgets them all. At most 2^26 entries (48 bytes each, touched only as they fill); more, or an
 * unknown flag, is TRACEPOOL_ERR_INVALID_ARGUMENT. `flags`, 0 or a set of:
 *   TRACEPOOL_HISTORY_CLEAR           forget the events recorded so far;
 *   TRACEPOOL_HISTORY_NO_ALLOC_SITES  events recorded from now on that allocate carry no call site;
 *   TRACEPOOL_HISTORY_NO_FREE_SITES   frees recorded from now on carry none (by default a free carries
 *                                     its allocation's call site);
 *   TRACEPOOL_HISTORY_FREEING_SITES   a block's free carries the call site that freed it (a stack
 *                                     capture at each free, as at each allocation). */
#define TRACEPOOL_HISTORY_CLEAR 1
#define TRACEPOOL_HISTORY_NO_ALLOC_SITES 2
#define TRACEPOOL_HISTORY_NO_FREE_SITES 4
#define TRACEPOOL_HISTORY_FREEING_SITES 8
TRACEPOOL_API int tracepool_record_history(tracepool_t* tp, size_t max_entries, int flags);
/* Labels on the history's events (PyTorch's torch.cuda.memory._set_memory_metadata and its compile
 * contexts): every event recorded on `device` carries the user metadata the device has then and the
 * innermost of its compile contexts (PyTorch's snapshot: user_metadata, compile_context). They are kept
 * whether or not the history is on. Metadata "" clears it; a NULL string is
 * TRACEPOOL_ERR_INVALID_ARGUMENT; popping an empty stack of contexts does nothing. Past 65,534 distinct
 * (metadata, context) pairs, events of new pairs read "(more distinct labels than tracepool keeps)".
 * tracepool_history_metadata's *out is freed with tracepool_string_free. */
TRACEPOOL_API int tracepool_history_set_metadata(tracepool_t* tp, int device, const char* metadata);
TRACEPOOL_API int tracepool_history_metadata(tracepool_t* tp, int device, char** out);
TRACEPOOL_API int tracepool_history_push_context(tracepool_t* tp, int device, const char* context);
TRACEPOOL_API int tracepool_history_pop_context(tracepool_t* tp, int device);

/* ---- Statistics ---------------------------------------------------------------------------- */
TRACEPOOL_API int tracepool_get_stats(tracepool_t* tp, int device, tracepool_stats_t* out);
TRACEPOOL_API int tracepool_reset_peak_stats(tracepool_t* tp, int device);        /* peak = current */
TRACEPOOL_API int tracepool_reset_accumulated_stats(tracepool_t* tp, int device); /* allocated, freed, num_* = 0 */
/* Number of devices this instance manages. */
TRACEPOOL_API int tracepool_device_count(tracepool_t* tp, int* out);
/* Name of the backend in use: "cuda" or "host"; "" for a handle that is not live (the last error says so). */
TRACEPOOL_API const char* tracepool_backend_name(tracepool_t* tp);
/* Checks every internal invariant; TRACEPOOL_ERR_INTERNAL with the broken one named if any fails. */
TRACEPOOL_API int tracepool_validate(tracepool_t* tp);

/* ---- Call sites, tags, marks and reports (docs/report-schema.md) ----------------------------- */
/* Every allocation records its call stack (TRACEPOOL_CONF capture, capture_depth, unwinder,
 * sample_bytes), the calling thread's tags and the number of marks made before it. Reports group
 * live blocks ("leaks" at exit), retained blocks and cached (reserved but free) memory by call site,
 * and show the memory of each retained private pool (a CUDA graph's) apart, as neither of them.
 * TRACEPOOL_REPORT=<path> writes the report of tracepool_default() at exit: JSON when the path ends
 * in .json, text otherwise; TRACEPOOL_REPORT=stderr prints the text. */

/* Pushes `label` on the calling thread's tag stack (at most 64 deep, UTF-8, 256 bytes a label): sites
 * captured until the matching pop carry it. Tags are per thread and shared by every instance. */
TRACEPOOL_API int tracepool_tag_push(const char* label);
/* Pops the innermost tag of the calling thread; TRACEPOOL_ERR_INVALID_ARGUMENT if none is pushed. */
TRACEPOOL_API int tracepool_tag_pop(void);
/* Records a named point in time (an epoch boundary; `label` is UTF-8, at most 256 bytes). Reports give
 * each site's live bytes at the marks, flag sites whose live bytes grew across marks (never fell, rose
 * at two marks at least and into the latest: told exactly over every mark made), and list retained
 * blocks: born before a mark and still alive after it and every later one. There is no limit on the
 * number of marks: an instance keeps at most 512 of them for the series and labels in reports (the
 * first, the latest and an even spread between), and reports say how many were made. */
TRACEPOOL_API int tracepool_mark(tracepool_t* tp, const char* label);
/* A boundary a host framework saw (an optimizer step, an epoch's end, a train/eval switch), kept as an
 * automatic mark if the last automatic one is at least TRACEPOOL_CONF auto_mark_ms old, or older where
 * marks cost more (at least 500 times their mean cost apart) (*taken, if not NULL, says whether it was). Automatic marks are kept apart from tracepool_mark's: when a program
 * made no marks of its own, reports judge which sites grow from them (and from the samples the
 * library takes as allocations go by). `label` as tracepool_mark's. Cheap when not taken (a clock
 * read); when taken, it reads every call site's counters. */
TRACEPOOL_API int tracepool_auto_mark(tracepool_t* tp, const char* label, int* taken);
/* Writes a report of the memory held now. path:
 *   - "stderr", "/dev/stdout", "/dev/stderr", "/dev/fd/N", "/proc/self/fd/N": written straight into
 *     that file descriptor (which must be open for writing); the path is never opened or replaced;
 *   - a new path or a regular file: replaced atomically. The report is written to an unnamed file in
 *     the same directory (O_TMPFILE, else a randomly named one), flushed, then put in place: a reader
 *     never sees half a report, and a process killed while writing leaves no temporary file;
 *   - a character device (/dev/null) or a FIFO: written in place; a FIFO that no process is reading
 *     is an error, not a wait;
 *   - anything else (a directory, a socket, a block device, a symbolic link) is refused with
 *     TRACEPOOL_ERR_INVALID_ARGUMENT and left untouched: a link is neither followed nor replaced.
 * format: "json", "text", "html", or NULL (JSON if path ends in ".json", HTML if in ".html" or ".htm",
 * text otherwise). HTML is one self-contained page (it loads nothing) that draws the report in a
 * browser: a flame graph of live and cached memory by call stack, a timeline over the marks, the
 * tables of the text report with each site's whole stack, and the device's memory as nvidia-smi
 * counts it. */
TRACEPOOL_API int tracepool_write_report(tracepool_t* tp, const char* path, const char* format);
/* Writes the report made when an allocation of `tp` last failed with TRACEPOOL_ERR_OOM. Unless
 * TRACEPOOL_CONF has oom_report:off, the first such report is printed to stderr whole and each later
 * one as a single line (a program that catches OOM and retries smaller meets many). Fails with
 * TRACEPOOL_ERR_INVALID_ARGUMENT if no allocation has failed so. */
TRACEPOOL_API int tracepool_write_oom_report(tracepool_t* tp, const char* path, const char* format);

/* The report as a string instead of a file: format "json", "text" or "html". *out is NUL-terminated and
 * must be released with tracepool_string_free. */
TRACEPOOL_API int tracepool_report_string(tracepool_t* tp, const char* format, char** out);

/* How a report is made and rendered. Zero it, then set size = sizeof(tracepool_report_options_t);
 * a NULL options pointer means every default. A caller built against an older, smaller struct gets
 * the defaults of the fields it does not have; a larger struct (a newer header) is accepted only if
 * the fields this library does not know are zero. Bad options are TRACEPOOL_ERR_INVALID_ARGUMENT with
 * a message that says what was wrong in the caller's terms ("unknown report format 'xml': expected
 * one of json, text, html"), quoting at most 64 bytes of it with control characters shown as \xNN. */
/* A host's holder search (tracepool's Python package passes one: what keeps each leaked block alive).
 * A report made with one calls it once, after the memory is collected and with no lock of tracepool
 * held, with every live block of every leak: its address, the bytes asked for it (as the leak's
 * "bytes" counts them; the block may be rounded up beyond them) and the leak's index in the
 * report's "leaks". It returns what it found as JSON, in memory from malloc that tracepool frees:
 *   {"held_by": {"<leak index>": [{"holder": ..., "bytes": ..., "blocks": ..., "example": ...}, ...]},
 *    "holder_search": {"complete": ..., "objects": ..., "exposing": ..., "seconds": ..., "note": ...}}
 * (docs/report-schema.md says what each field is), or NULL where it found nothing to say. An answer
 * that is not that fails the report with TRACEPOOL_ERR_INVALID_ARGUMENT naming its first problem. */
typedef struct tracepool_leak_block {
  uint64_t address;
  uint64_t bytes;
  uint64_t leak;
} tracepool_leak_block_t;
typedef char* (*tracepool_holders_fn)(void* context, const tracepool_leak_block_t* blocks, size_t count);

typedef struct tracepool_report_options {
  size_t size;
  const char* reason; /* why it is made, recorded in the report: NULL gives "demand". UTF-8, 1 to 64
                         bytes, no control characters; "oom" is the library's own (tracepool_write_oom_report).
                         tracepool_render_report keeps the saved reason and ignores this. */
  const char* format; /* "json" | "text" | "html" | NULL (write: by path's extension as
                         tracepool_write_report's; strings: "text") */
  int top;            /* call sites the text lists per section, largest first (0: 10; JSON has every site) */
  const char* name;   /* tracepool_render_report: what its messages call the text, a file name say
                         (NULL: "the text") */
  int addresses;      /* nonzero: each JSON "leaks" entry carries "addresses", [[address, bytes asked], ...] of
                         its live blocks, for a tool that names what holds them. Saved reports drop
                         them when rendered. */
  tracepool_holders_fn holders; /* who holds the leaks' blocks (NULL: not asked); see tracepool_holders_fn */
  void* holders_context;        /* passed to `holders` */
} tracepool_report_options_t;
/* tracepool_write_report with options: the report of the memory held now, to `path` (the rules of
 * tracepool_write_report). */
TRACEPOOL_API int tracepool_write_report_with(tracepool_t* tp, const char* path,
                                              const tracepool_report_options_t* options);
/* tracepool_report_string with options (format NULL: text). Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_report_string_with(tracepool_t* tp, const tracepool_report_options_t* options,
                                               char** out);
/* Renders a report saved as JSON (json, size bytes; need not be NUL-terminated) in options->format
 * (text if NULL), with the same renderer as the library's own reports: the text of a saved report is
 * the text the live one had. JSON comes out as the library writes it (fields it does not know are
 * dropped). A text that is not a tracepool.report/1 report, or whose fields have the wrong types, gets
 * TRACEPOOL_ERR_INVALID_ARGUMENT with a message naming what is wrong, by its JSON path:
 *   "the text: leaks[3].frames[0].line must be a non-negative integer or null, not \"x\"",
 *   "the text has schema tracepool.report/2; this tracepool reads tracepool.report/1",
 *   "the text is not a tracepool report (not JSON: ...)" (options->name replaces "the text").
 * Needs no instance. Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_render_report(const char* json, size_t size, const tracepool_report_options_t* options,
                                          char** out);
/* One HTML page of `count` reports saved as JSON (reports[i], sizes[i] bytes; the ranks of one job,
 * say): a view of each and of all of them merged. names[i] (or names NULL) is what messages call
 * reports[i] (NULL: "report i"); the first that cannot be read fails the call as
 * tracepool_render_report would. At most 4096 reports. Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_render_html(size_t count, const char* const* reports, const size_t* sizes,
                                        const char* const* names, char** out);
/* Several reports saved as JSON (the ranks of one job, or runs) as one view: each call site's live and
 * cached bytes in each, the imbalance between them and where it grows. A site is known across reports
 * by its tags and frames, and named as every report names it (its title). reports, sizes and names as
 * tracepool_render_html's; the reports in rank order, then by name. options: format "text" (also for
 * NULL), "json" (schema tracepool.merge/1) or "html" (tracepool_render_html's page); top: sites listed
 * (0: 10). Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_merge_reports(size_t count, const char* const* reports, const size_t* sizes,
                                          const char* const* names, const tracepool_report_options_t* options,
                                          char** out);
/* What changed from one saved report (reports[0], the earlier) to another (reports[1]): each call site's
 * live and cached bytes in both, the largest change first; the totals of allocated, reserved and
 * cached bytes. names as tracepool_render_html's. options: format "text" (also for NULL), "json"
 * (schema tracepool.diff/1) or "html" (one page: the changed sites, and a view of each report); top as
 * tracepool_merge_reports's. Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_diff_reports(const char* const reports[2], const size_t sizes[2],
                                         const char* const names[2], const tracepool_report_options_t* options,
                                         char** out);
/* `size` bytes of `text` (a name from a report, a file name) as every text rendering of tracepool shows
 * it on a terminal: each control character (C0, DEL, C1) and each byte that is not UTF-8 as \xNN, the
 * line separators and bidirectional controls as \uNNNN, everything else as it is (Note [Printable text]
 * in core/base/printable.h). For hosts that print report contents themselves. Release *out with
 * tracepool_string_free. */
TRACEPOOL_API int tracepool_printable(const char* text, size_t size, char** out);
TRACEPOOL_API void tracepool_string_free(char* s);

/* ---- Script frames (language runtimes) ----------------------------------------------------- */
/* A runtime that runs code of its own (CPython) registers a frame provider, so that call sites
 * carry its script frames (Python's, say: file, function, line) besides the native ones
 * (TRACEPOOL_CONF capture:all, hybrid or python; reports give them the kind "python").
 * tracepool's Python package registers one for CPython when it is imported. */

#define TRACEPOOL_FRAME_ENTRY 1u    /* outermost frame run by one native call of the interpreter loop */
#define TRACEPOOL_FRAME_BORROWED 2u /* a frame of the thread that started this work (autograd, a thread's start) */

/* One script frame, described. Strings need not be NUL-terminated; tracepool copies them. */
typedef struct tracepool_script_frame {
  const char* file;
  size_t file_len;
  const char* function;
  size_t function_len;
  int line;       /* 0 if unknown */
  unsigned flags; /* TRACEPOOL_FRAME_* */
} tracepool_script_frame_t;

/* Set `size = sizeof(tracepool_frame_provider_t)`. Every frame is two words, chosen by the
 * provider (CPython's: the code object and the instruction offset with the flags). */
typedef struct tracepool_frame_provider {
  size_t size;
  const char* language; /* "python" */
  /* Writes at most max_frames frames of the calling thread's interpreter stack, innermost first,
   * and returns how many. Runs on the allocating thread before any tracepool lock is taken: it
   * must not block, take locks, allocate through tracepool, or call into the interpreter. */
  size_t (*capture)(uintptr_t* words, size_t max_frames);
  /* Describes frames that capture() returned moments ago on this thread (so their objects are
   * alive), once per new call site, under no tracepool lock. Returns 0, or a negative status. */
  int (*describe)(const uintptr_t* words, size_t frames, tracepool_script_frame_t* out);
  /* Native code of the interpreter loop: a native frame whose return address lies in
   * [eval_begin, eval_end) ran the script frames up to the next TRACEPOOL_FRAME_ENTRY one.
   * Reports splice the script frames there (hybrid stacks). 0 and 0 if unknown. */
  uintptr_t eval_begin, eval_end;
} tracepool_frame_provider_t;

/* Installs `provider` for every instance (NULL removes it). The struct and its functions must stay
 * valid until the process ends: a capture running on another thread may still be using them. */
TRACEPOOL_API int tracepool_set_frame_provider(const tracepool_frame_provider_t* provider);

/* Marks the loaded module (shared library) that holds `address` as bindings that call tracepool
 * for a language or framework (tracepool's Python extension, its PyTorch shim): their frames at the
 * top of a native stack are dropped from call sites, like libtracepool.so's own, up to the first
 * frame of an interpreter loop. At most 8 modules; marking one twice is a no-op. */
TRACEPOOL_API int tracepool_add_bindings_module(const void* address);

/* Threads that never run script frames of their own (NCCL's proxy threads, XLA's) can be charged to
 * the line that started them: on the starting thread, tracepool_thread_origin gives where it stands;
 * the new thread passes that value to tracepool_adopt_thread_origin before its work. Its captures
 * that find no script frames then end with the starting thread's, flagged TRACEPOOL_FRAME_BORROWED,
 * and so do those of the threads it starts in turn: the frames of the latest site at which the
 * starting thread reached the driver since (memory it told of with tracepool_observe_alloc, or
 * tracepool_observe_oom, whose capture was not sampled out), as the work such a thread does is mostly
 * what a later call of its starter handed it, else of where it stood when it started the thread (Note
 * [Thread origins] in core/trace/tracer.h, which says where this guess falls short). The interposer (libtracepool_intercept.so) does
 * this for every pthread_create once it has recorded anything. *out is 0 when there are no script
 * frames to lend (capture off or without script frames, no provider, no interpreter frames here). */
TRACEPOOL_API int tracepool_thread_origin(tracepool_t* tp, uint64_t* out);
/* The calling thread's origin from now on (0 forgets it); one of another instance's is ignored. */
TRACEPOOL_API void tracepool_adopt_thread_origin(uint64_t origin);

/* Configures tracepool_default() before its first use ("key:value,..." as TRACEPOOL_CONF, which it
 * replaces). Fails with TRACEPOOL_ERR_INVALID_ARGUMENT once the default instance exists with a
 * different configuration text, and with TRACEPOOL_ERR_BAD_CONFIG for a bad text. */
TRACEPOOL_API int tracepool_configure_default(const char* conf);

/* ---- Files and the exit report ------------------------------------------------------------ */
/* Writes `size` bytes to `path` with the rules of tracepool_write_report (regular files and new paths
 * replaced atomically; character devices, FIFOs, /dev/stdout, /dev/stderr, /dev/fd/N written
 * straight; anything else refused). `data` may be NULL when size is 0. Needs no instance: hosts use it
 * for their own outputs (tracepool's Python command line and snapshots do). */
TRACEPOOL_API int tracepool_write_file(const char* path, const void* data, size_t size);
/* Whether a report could be written at `path` now (at its rank's path: tracepool_report_path), writing
 * nothing: TRACEPOOL_OK, or TRACEPOOL_ERR_INVALID_ARGUMENT saying why (a missing or read-only folder, a
 * directory, a symbolic link, a name too long, a descriptor not open for writing). A FIFO without a
 * reader yet is fine. For hosts that check their output paths before a long run. */
TRACEPOOL_API int tracepool_check_report_path(const char* path);
/* tracepool_write_file, and where that fails, a new file in the temporary folder ($TMPDIR, else /tmp),
 * tracepool-report-<pid>-<random> with `path`'s extension, readable by its owner alone: a report made
 * at the end of a long run is never lost to a bad path. TRACEPOOL_OK when written somewhere: *written_to
 * (release with tracepool_string_free) says where, and where it is not `path`, tracepool_last_error()
 * says why `path` could not be written. Otherwise neither could be written (the error is the
 * temporary folder's) and *written_to is NULL. */
TRACEPOOL_API int tracepool_write_file_or_fallback(const char* path, const void* data, size_t size, char** written_to);
/* Where a report written to `path` now goes. Report paths take {rank} (the launcher's rank, 0 when
 * none), {pid} and {host}; under a launcher of more than one rank (torchrun's RANK and WORLD_SIZE,
 * Open MPI, MPICH, Slurm), a path with neither {rank} nor {pid} gets "-rank<N>" before its extension,
 * so that no rank's report replaces another's ("report.json" -> "report-rank1.json"); what is written in
 * place stays as it is: "stderr", /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N and existing
 * character devices and FIFOs (a file under /dev/shm is a file). Each placeholder's value is made one
 * plain file-name component. tracepool_write_report, its variants and TRACEPOOL_REPORT all apply this.
 * Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_report_path(const char* path, char** out);
/* The format of a report written to `path`, as tracepool_write_report picks it: `format` where given
 * ("json", "text" or "html"), else by the path's extension (".json" JSON, ".html" or ".htm" HTML,
 * anything else text; NULL: text). *out is a static string; an unknown format is
 * TRACEPOOL_ERR_INVALID_ARGUMENT. */
TRACEPOOL_API int tracepool_report_format(const char* path, const char* format, const char** out);
/* Writes the TRACEPOOL_REPORT report of tracepool_default() now (reason "exit") if TRACEPOOL_REPORT is
 * set and the default instance exists; otherwise does nothing and returns TRACEPOOL_OK. At most once
 * per process: later calls, and the atexit handler that writes it at a normal exit, then do nothing.
 * For hosts whose exit skips C's atexit handlers (CPython ends by raising SIGINT again after
 * Ctrl-C): call it from the host's own exit hook. Where TRACEPOOL_REPORT cannot be written, the report
 * goes to the temporary folder (tracepool_write_file_or_fallback), else as text to stderr, and a line
 * on stderr says so. Only the process that made the default instance writes it: a forked child writes
 * none, unless the path places {pid} (then each process its own). SIGTERM, where the program leaves it
 * to its default action, writes the report and then ends the process by the signal as before; a
 * program's own SIGTERM handler is left alone. Memory freed afterwards is freed normally and is simply
 * not in the report. */
TRACEPOOL_API int tracepool_write_exit_report(void);

/* ---- Errors --------------------------------------------------------------------------------- */
TRACEPOOL_API const char* tracepool_status_string(int status); /* "TRACEPOOL_ERR_OOM: out of memory" */
TRACEPOOL_API const char* tracepool_last_error(void);          /* this thread's last failure, "" if none */

/* ---- PyTorch CUDAPluggableAllocator entry points (on tracepool_default()) -------------------- */
/* Never throw. alloc returns NULL for size 0 and on failure. Since PyTorch's wrapper drops the reason,
 * each entry point prints it to stderr the first time it fails with a given status (TRACEPOOL_ERR_*),
 * and stays silent for later failures with that status. */
TRACEPOOL_API void* tracepool_torch_alloc(size_t size, int device, void* stream);
TRACEPOOL_API void tracepool_torch_free(void* ptr, size_t size, int device, void* stream);
/* Optional hooks of CUDAPluggableAllocator (set_reset_fn, set_memory_fraction_fn,
 * set_record_stream_fn): torch.cuda.empty_cache(), set_per_process_memory_fraction() and
 * Tensor.record_stream(). */
TRACEPOOL_API void tracepool_torch_empty_cache(void);
TRACEPOOL_API void tracepool_torch_set_memory_fraction(double fraction, int device);
TRACEPOOL_API void tracepool_torch_record_stream(void* ptr, void* stream);
/* The memory now held, in the dictionary layout of PyTorch's torch.cuda.memory._snapshot()
 * ("segments", "device_traces"; docs/report-schema.md), as JSON for pytorch.org/memory_viz and
 * torch.cuda._memory_viz: one segment per device segment, its blocks in address order with state and
 * the frames of their call site. device_traces is the allocation history where TRACEPOOL_CONF has
 * history:N (alloc, free_requested + free_completed, segment_alloc, segment_free and oom events with
 * time, size, stream and frames; the last N events, oldest first); without it, one "alloc" entry per
 * live block, oldest first. Release *out with tracepool_string_free. */
TRACEPOOL_API int tracepool_torch_snapshot_string(tracepool_t* tp, char** out);
/* The former name of tracepool_torch_snapshot_string, kept for callers written before it. */
TRACEPOOL_API int tracepool_snapshot_string(tracepool_t* tp, char** out);

#ifdef __cplusplus
}
#endif

#endif /* TRACEPOOL_TRACEPOOL_H */
