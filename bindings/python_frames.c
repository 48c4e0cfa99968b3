/* python_frames.c: tracepool's frame provider for CPython 3.11, 3.12 and 3.13 (tracepool.h,
 * "Script frames"). Built as C against the interpreter's internal headers, so that it reads
 * _PyInterpreterFrame with the exact layout of the Python it is built for.
 *
 * Note [Frames without the GIL]
 * Allocations reach tracepool with the GIL released (PyTorch ops and ctypes calls release it), so
 * capture() must not take it: re-taking it costs ~0.1 µs alone and up to the 5 ms switch interval
 * while another thread computes (shared notes/stacks.md), and taking it under any lock invites a
 * deadlock. capture() walks the calling thread's own frame chain instead, as faulthandler does:
 * only this thread pushes and pops its frames, and it is blocked in the call that allocates, so the
 * chain and the code objects its frames hold references to stay put whatever other threads do. The
 * walk calls nothing that needs the GIL, allocates nothing and changes no reference count: a frame
 * is two words, the code object and the instruction offset with the flags. describe() runs on the
 * same thread moments later, still inside that call, so those objects are alive; it reads only
 * their immutable parts (co_filename, co_qualname, co_linetable).
 *
 * Note [Finalisation]
 * Py_FinalizeEx frees the thread states of daemon threads while they may still run C code without
 * the GIL (an allocation, say). Python's atexit handlers run before that, and ours
 * (python_frames_shutdown) raises `finished`, then waits until no thread is inside capture() or
 * describe(): both enter by incrementing a count of `in_flight` and then reading `finished`, the
 * handler stores `finished` and then reads every count, all sequentially consistent, so either the
 * thread sees `finished` and reads nothing, or the handler sees it in flight and waits for it.
 * Costs two atomic increments per capture, on one of 64 counts picked by the thread's stack address:
 * a single count would move between cores on every capture when two threads allocate (PyTorch's
 * autograd thread and the thread that runs the step). The interpreter's own finalising flag covers
 * hosts that finalise without running atexit handlers first.
 *
 * Note [Borrowed frames]
 * PyTorch runs backward on the autograd engine's threads: they have a thread state but no Python
 * frames of their own, while the thread that called backward() waits. Its wrapper calls
 * python_frames_backward_begin/end around the engine's run; begin walks the caller's frames,
 * interns them as a borrowed_stack and publishes the newest active one in `lent`; capture() on a
 * thread whose own walk finds no frames copies `lent`. When several threads run backward at once
 * the autograd threads cannot tell whose work they run, and the latest begun wins.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE_MODULE 1
// clang-format off: Python.h comes first, and the internal header right after it.
#include <Python.h>
#include <internal/pycore_frame.h>
// clang-format on

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "python_frames.h"
#include "tracepool/tracepool.h"

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "python_frames.c knows the frame layout of CPython 3.11, 3.12 and 3.13 only"
#endif
#ifdef Py_GIL_DISABLED
#error "python_frames.c reads frames as the GIL build lays them out; free-threaded CPython is not supported"
#endif

enum { max_stack_frames = 256 }; /* the largest python_depth */

/* ---- The frame layout of the CPython this file is built for ----------------------------------- */

static inline _PyInterpreterFrame* newest_frame(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030D0000
  return ts->current_frame;
#else
  return ts->cframe->current_frame;
#endif
}

static inline PyObject* frame_code(_PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030D0000
  return f->f_executable;
#else
  return (PyObject*)f->f_code;
#endif
}

/* 3.12+: the frame a native call of the eval loop keeps on its C stack to mark where it entered. */
static inline int is_shim(const _PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030C0000
  return f->owner == FRAME_OWNED_BY_CSTACK;
#else
  (void)f;
  return 0;
#endif
}

/* The outermost frame that one native call of the eval loop runs. */
static inline int is_entry(const _PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030C0000
  return f->previous == NULL || f->previous->owner == FRAME_OWNED_BY_CSTACK;
#else
  return f->is_entry;
#endif
}

static inline int interpreter_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/* The line of instruction `lasti` (code units). 3.11's PyCode_Addr2Line prefers co->_co_linearray, a
 * cache that tracing builds lazily under the GIL, unordered for a reader without it; so on 3.11 this
 * walks the immutable line table itself, as PyCode_Addr2Line does when that cache is absent. From
 * 3.12 PyCode_Addr2Line is that walk and nothing else. */
static int line_of(PyCodeObject* code, int lasti) {
  const int address = lasti * (int)sizeof(_Py_CODEUNIT);
#if PY_VERSION_HEX < 0x030C0000
  if (address < 0) return code->co_firstlineno;
  PyCodeAddressRange range;
  range.opaque.lo_next = (const uint8_t*)PyBytes_AS_STRING(code->co_linetable);
  range.opaque.limit = range.opaque.lo_next + PyBytes_GET_SIZE(code->co_linetable);
  range.opaque.computed_line = code->co_firstlineno;
  range.ar_start = -1;
  range.ar_end = 0;
  range.ar_line = -1;
  const int line = _PyCode_CheckLineNumber(address, &range);
#else
  const int line = PyCode_Addr2Line(code, address);
#endif
  return line > 0 ? line : 0;
}

/* ---- Capture ---------------------------------------------------------------------------------- */

static atomic_int enabled = 1; /* _set_python_frames */
static atomic_int finished;    /* set once, at exit (Note [Finalisation]) */
enum { flight_counts = 64 };
static struct {
  _Alignas(64) atomic_long n;
} in_flight[flight_counts]; /* threads inside capture() or describe(), by stack address */

/* An interned sequence of borrowed frames (Note [Borrowed frames]). Made once per distinct stack and
 * never freed, and it owns one reference to each of its code objects forever, so that capture() may
 * copy it and describe() read it on any thread at any later time. Memory stays bounded by the
 * number of distinct stacks that ran backward. */
struct borrowed_stack {
  size_t frames;
  uintptr_t words[]; /* 2 per frame, as capture() writes them, with TRACEPOOL_FRAME_BORROWED */
};
static _Atomic(const struct borrowed_stack*) lent; /* the newest active one, or NULL */

/* This thread's slot of per-thread tables of 64: threads' stacks lie megabytes apart, so its stack
 * address tells them apart without a thread-local lookup (two threads may share one, rarely). */
static size_t stack_slot(void) {
  const uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  return (size_t)((sp >> 20) * 0x9E3779B97F4A7C15ull >> 58);
}

_Static_assert(flight_counts == 64, "stack_slot() picks one of 64");

static atomic_long* flight_count(void) { return &in_flight[stack_slot()].n; }

/* Returns the count to hand to leave() when the caller may read interpreter state, else NULL. */
static atomic_long* enter(void) {
  atomic_long* count = flight_count();
  atomic_fetch_add(count, 1); /* sequentially consistent: before the load of `finished` */
  if (!atomic_load(&finished) && !interpreter_finalizing()) return count;
  atomic_fetch_sub_explicit(count, 1, memory_order_release);
  return NULL;
}

static void leave(atomic_long* count) { atomic_fetch_sub_explicit(count, 1, memory_order_release); }

/* Note [Frame chains]
 * A frame's header is two cache lines (its owner byte lies past the first 64 bytes), and the walk
 * reaches each frame through the one before it, so on a deep stack it waits on one load after
 * another: in a PyTorch step, where the CPU ran kernels' launch code since the last allocation, about
 * 15-20 ns a frame (180-265 ns for ~12 frames on the H200's host). Successive captures of one thread
 * share most of their frames, at the same addresses (frames lie on the thread's frame stack), so
 * each walk leaves the addresses of the frames it visited in a slot picked by stack address, as the
 * in-flight counts are, and the next walk from that stack first prefetches them all at once. A stale
 * or foreign address costs a useless prefetch and nothing else: a prefetch never faults, and the
 * walk itself reads only the live chain. */
enum { chain_frames = 24 };
static struct {
  _Alignas(64) _Atomic(uintptr_t) frame[chain_frames]; /* 0 ends the chain */
} chains[flight_counts];

static void prefetch_chain(size_t slot) {
  for (size_t i = 0; i < chain_frames; ++i) {
    const uintptr_t f = atomic_load_explicit(&chains[slot].frame[i], memory_order_relaxed);
    if (f == 0) break;
    __builtin_prefetch((const void*)f);
    __builtin_prefetch((const void*)(f + sizeof(_PyInterpreterFrame) - 1));
  }
}

/* Cost: the loads of each frame's header (its code object, instruction pointer and links; frames lie
 * together on the thread's frame stack, and are prefetched: Note [Frame chains]), plus about 20 ns
 * per capture for enter()/leave() and the thread-state lookup; stores only into `words` and the
 * chain slot. Shim frames and frames still being set up (before their first RESUME) run no code of
 * their own and are skipped. Only the newest frame can be still being set up (a frame calls out only
 * from its code), so only its code object is read here: the code objects of a deep Python stack are
 * scattered and rarely in the cache, and reading them cost PyTorch steps ~10 ns a frame. */
static size_t walk(_PyInterpreterFrame* f, uintptr_t* words, size_t max_frames, uintptr_t flags, size_t slot) {
  size_t n = 0, visited = 0;
  for (; f != NULL && n < max_frames; f = f->previous) {
    if (visited < chain_frames)
      atomic_store_explicit(&chains[slot].frame[visited++], (uintptr_t)f, memory_order_relaxed);
    if (is_shim(f)) continue;
    PyObject* code = frame_code(f);
    if (code == NULL || code == Py_None) continue;
    if (n == 0 && (!PyCode_Check(code) || _PyFrame_IsIncomplete(f))) continue;
    const uintptr_t lasti = (uintptr_t)(unsigned)_PyInterpreterFrame_LASTI(f);
    words[2 * n] = (uintptr_t)code;
    words[2 * n + 1] = lasti << 2 | (is_entry(f) ? TRACEPOOL_FRAME_ENTRY : 0u) | flags;
    ++n;
  }
  if (visited < chain_frames) atomic_store_explicit(&chains[slot].frame[visited], 0, memory_order_relaxed);
  return n;
}

static size_t copy_lent(uintptr_t* words, size_t max_frames) {
  const struct borrowed_stack* stack = atomic_load_explicit(&lent, memory_order_acquire);
  if (stack == NULL) return 0;
  const size_t n = stack->frames < max_frames ? stack->frames : max_frames;
  memcpy(words, stack->words, 2 * n * sizeof *words);
  return n;
}

static size_t capture(uintptr_t* words, size_t max_frames) {
  if (!atomic_load_explicit(&enabled, memory_order_relaxed)) return 0;
  atomic_long* count = enter();
  if (count == NULL) return 0;
  size_t n = 0;
  PyThreadState* ts = PyGILState_GetThisThreadState(); /* a thread-specific-storage read, no lock */
  if (ts != NULL) {
    const size_t slot = stack_slot();
    prefetch_chain(slot);
    n = walk(newest_frame(ts), words, max_frames, 0, slot);
    if (n == 0) n = copy_lent(words, max_frames);
  }
  leave(count);
  return n;
}

/* ---- Describe --------------------------------------------------------------------------------- */

/* Room for the UTF-8 of names that are not ASCII (rare: ASCII names are handed over in place). It
 * must outlive describe(), until tracepool has copied the strings, so it is per thread. */
enum { scratch_bytes = 16384, max_name_bytes = 1024 };
static _Thread_local struct {
  char bytes[scratch_bytes];
  size_t used;
} scratch;

static size_t utf8_encode(Py_UCS4 c, char* out) {
  if (c < 0x80) {
    out[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    out[0] = (char)(0xC0 | c >> 6);
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c >= 0xD800 && c <= 0xDFFF) { /* a lone surrogate (surrogateescape'd file names) */
    out[0] = '?';
    return 1;
  }
  if (c < 0x10000) {
    out[0] = (char)(0xE0 | c >> 12);
    out[1] = (char)(0x80 | (c >> 6 & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | c >> 18);
  out[1] = (char)(0x80 | (c >> 12 & 0x3F));
  out[2] = (char)(0x80 | (c >> 6 & 0x3F));
  out[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

/* The UTF-8 of a str without making Python objects: compact ASCII in place, anything else encoded
 * into the scratch space and cut at a character boundary when that is full. The cached UTF-8 of a
 * str is not used: PyUnicode_AsUTF8 on another thread publishes it without ordering. */
static void text_of(PyObject* s, const char** text, size_t* length) {
  *text = "?";
  *length = 1;
  if (s == NULL || !PyUnicode_Check(s)) return;
#if PY_VERSION_HEX < 0x030C0000
  if (!PyUnicode_IS_READY(s)) return;
#endif
  if (PyUnicode_IS_COMPACT_ASCII(s)) {
    *text = (const char*)PyUnicode_DATA(s);
    *length = (size_t)PyUnicode_GET_LENGTH(s);
    return;
  }
  size_t room = scratch_bytes - scratch.used;
  if (room > max_name_bytes) room = max_name_bytes;
  char* out = scratch.bytes + scratch.used;
  const int kind = PyUnicode_KIND(s);
  const void* data = PyUnicode_DATA(s);
  size_t n = 0;
  for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(s); ++i) {
    char unit[4];
    const size_t k = utf8_encode(PyUnicode_READ(kind, data, i), unit);
    if (n + k > room) break;
    memcpy(out + n, unit, k);
    n += k;
  }
  if (n == 0) return;
  scratch.used += n;
  *text = out;
  *length = n;
}

/* A frame that describe() cannot read, named by `why`. */
static void describe_unknown(tracepool_script_frame_t* frame, const char* why) {
  frame->file = "";
  frame->file_len = 0;
  frame->function = why;
  frame->function_len = strlen(why);
  frame->line = 0;
}

static int describe(const uintptr_t* words, size_t frames, tracepool_script_frame_t* out) {
  atomic_long* alive = enter();
  scratch.used = 0;
  for (size_t i = 0; i < frames; ++i) {
    tracepool_script_frame_t* frame = &out[i];
    frame->flags = (unsigned)(words[2 * i + 1] & (TRACEPOOL_FRAME_ENTRY | TRACEPOOL_FRAME_BORROWED));
    if (!alive) { /* the interpreter is going away: its objects may be too */
      describe_unknown(frame, "<interpreter exiting>");
      continue;
    }
    PyCodeObject* code = (PyCodeObject*)words[2 * i];
    if (!PyCode_Check(code)) { /* walk() checks only the newest frame's code */
      describe_unknown(frame, "<not code>");
      continue;
    }
    frame->line = line_of(code, (int)(words[2 * i + 1] >> 2));
    text_of(code->co_filename, &frame->file, &frame->file_len);
    text_of(code->co_qualname, &frame->function, &frame->function_len);
  }
  if (alive) leave(alive);
  return TRACEPOOL_OK;
}

/* ---- Borrowed frames (Note [Borrowed frames]); everything here runs with the GIL held ---------- */

static PyObject* interned_stacks; /* bytes of the words -> address of their borrowed_stack */
static struct backward_run {
  unsigned long thread;
  const struct borrowed_stack* stack;
} * runs; /* active backward runs, oldest first */
static size_t run_count, run_capacity;

static const struct borrowed_stack* intern_stack(const uintptr_t* words, size_t frames) {
  if (interned_stacks == NULL && (interned_stacks = PyDict_New()) == NULL) return NULL;
  const size_t bytes = 2 * frames * sizeof *words;
  PyObject* key = PyBytes_FromStringAndSize((const char*)words, (Py_ssize_t)bytes);
  if (key == NULL) return NULL;
  PyObject* known = PyDict_GetItemWithError(interned_stacks, key); /* borrowed reference */
  if (known != NULL || PyErr_Occurred()) {
    Py_DECREF(key);
    return known != NULL ? PyLong_AsVoidPtr(known) : NULL;
  }
  struct borrowed_stack* stack = malloc(sizeof *stack + bytes);
  PyObject* address = stack != NULL ? PyLong_FromVoidPtr(stack) : PyErr_NoMemory();
  if (address == NULL || PyDict_SetItem(interned_stacks, key, address) < 0) {
    Py_XDECREF(address);
    Py_DECREF(key);
    free(stack);
    return NULL;
  }
  Py_DECREF(address);
  Py_DECREF(key);
  stack->frames = frames;
  memcpy(stack->words, words, bytes);
  for (size_t i = 0; i < frames; ++i) Py_INCREF((PyObject*)words[2 * i]); /* the stack's, forever */
  return stack;
}

static void publish_newest_run(void) {
  atomic_store_explicit(&lent, run_count > 0 ? runs[run_count - 1].stack : NULL, memory_order_release);
}

int python_frames_backward_begin(int skip) {
  uintptr_t words[2 * max_stack_frames];
  size_t frames = walk(newest_frame(PyThreadState_Get()), words, max_stack_frames, TRACEPOOL_FRAME_BORROWED, stack_slot());
  /* The innermost `skip` frames are the wrapper's own (tracepool.torch's), not the caller's. */
  const size_t dropped = skip > 0 ? ((size_t)skip < frames ? (size_t)skip : frames) : 0;
  memmove(words, words + 2 * dropped, 2 * (frames - dropped) * sizeof words[0]);
  frames -= dropped;
  const struct borrowed_stack* stack = intern_stack(words, frames);
  if (stack == NULL) return -1;
  if (run_count == run_capacity) {
    const size_t capacity = run_capacity ? 2 * run_capacity : 8;
    struct backward_run* grown = PyMem_Realloc(runs, capacity * sizeof *runs);
    if (grown == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    runs = grown;
    run_capacity = capacity;
  }
  runs[run_count++] = (struct backward_run){PyThread_get_thread_ident(), stack};
  publish_newest_run();
  return 0;
}

/* Ends this thread's newest run, which need not be the newest of all (threads end in any order). */
int python_frames_backward_end(void) {
  const unsigned long me = PyThread_get_thread_ident();
  for (size_t i = run_count; i-- > 0;) {
    if (runs[i].thread != me) continue;
    memmove(&runs[i], &runs[i + 1], (run_count - i - 1) * sizeof *runs);
    --run_count;
    publish_newest_run();
    return 0;
  }
  PyErr_SetString(PyExc_RuntimeError, "_backward_end() without a matching _backward_begin() on this thread");
  return -1;
}

/* ---- Registration ----------------------------------------------------------------------------- */

/* Where the eval loop's machine code lies, for hybrid stacks: from its symbol's size, whether it
 * lives in the python executable or in libpython. Code the compiler split out of it (".cold") is
 * not included; the calls that matter return into the hot part. */
static void eval_loop_range(uintptr_t* begin, uintptr_t* end) {
  Dl_info info;
  const ElfW(Sym)* symbol = NULL;
  if (dladdr1((void*)&_PyEval_EvalFrameDefault, &info, (void**)&symbol, RTLD_DL_SYMENT) == 0 || symbol == NULL ||
      info.dli_saddr == NULL || symbol->st_size == 0)
    return;
  *begin = (uintptr_t)info.dli_saddr;
  *end = *begin + symbol->st_size;
}

/* Must stay valid until the process ends (tracepool_set_frame_provider). */
static tracepool_frame_provider_t provider = {sizeof(tracepool_frame_provider_t), "python", capture, describe, 0, 0};
static int installed;

/* A fork() child has only the thread that forked, which is not inside capture() or describe(); the
 * threads that were are not there, so their count goes (otherwise the child's exit would wait for
 * them for ever in python_frames_shutdown). */
static void forget_other_threads(void) {
  for (size_t i = 0; i < flight_counts; ++i) atomic_store(&in_flight[i].n, 0);
}

int python_frames_install(void) {
  if (installed) return TRACEPOOL_OK;
  eval_loop_range(&provider.eval_begin, &provider.eval_end);
  const int status = tracepool_set_frame_provider(&provider);
  if (status == TRACEPOOL_OK) {
    installed = 1;
    pthread_atfork(NULL, NULL, forget_other_threads);
  }
  return status;
}

void python_frames_set_enabled(int on) { atomic_store_explicit(&enabled, on != 0, memory_order_relaxed); }

/* Sequentially consistent store, then load (Note [Finalisation]). The wait lasts one walk or one
 * describe at most: neither blocks, and neither needs the GIL this thread holds. */
void python_frames_shutdown(void) {
  atomic_store(&finished, 1);
  for (size_t i = 0; i < flight_counts; ++i)
    while (atomic_load(&in_flight[i].n) != 0) sched_yield();
}
