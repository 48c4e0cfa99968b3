// cupy_hooks.h: CuPy's CFunctionAllocator hooks, built into the extension tracepool._tracepool
// (cupy_hooks.cpp says what CuPy gives them and how they fail).
#pragma once

#include <Python.h>

#include <cstdint>

// Before CuPy may call the hooks, with the GIL held: `stream_capsule` is CuPy's get_current_stream_ptr
// capsule ("intptr_t (void)"), or None for stream 0 (tests only); `oom` the class raised for out of memory. False
// with a Python error set if the capsule is not that function.
bool cupy_hooks_install(PyObject* stream_capsule, PyObject* oom);
// The hooks' addresses, for cupy.cuda.memory.CFunctionAllocator(param, malloc, free, owner).
uintptr_t cupy_malloc_address();
uintptr_t cupy_free_address();
