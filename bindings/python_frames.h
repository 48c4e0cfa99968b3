/* python_frames.h: CPython's frame provider for tracepool (python_frames.c), as the extension module
 * tracepool._tracepool uses it. Every function here is called with the GIL held. */
#ifndef TRACEPOOL_PYTHON_FRAMES_H
#define TRACEPOOL_PYTHON_FRAMES_H

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the provider with tracepool_set_frame_provider (once per process; later calls do nothing).
 * Returns a TRACEPOOL_* status. */
int python_frames_install(void);

/* Turns capture on or off for every thread (tracepool._tracepool._set_python_frames). After
 * python_frames_shutdown it stays off. */
void python_frames_set_enabled(int enabled);

/* Turns capture off for good and waits for captures in flight on other threads: registered with
 * Python's atexit, so that no thread reads interpreter state while the interpreter is torn down. */
void python_frames_shutdown(void);

/* Lends the calling thread's frames, less the innermost `skip`, to threads without frames of their
 * own (the autograd engine's) until the matching python_frames_backward_end on this thread. Return 0,
 * or -1 with a Python exception set. */
int python_frames_backward_begin(int skip);
int python_frames_backward_end(void);

#ifdef __cplusplus
}
#endif

#endif /* TRACEPOOL_PYTHON_FRAMES_H */
