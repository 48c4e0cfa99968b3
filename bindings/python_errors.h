// python_errors.h: failures of tracepool calls as Python exceptions, for the extension's own wrappers
// (module.cpp) and for the host glue built into the extension (plugins/cupy/cupy_hooks.cpp).
#pragma once

#include <Python.h>

// Sets the Python error for a failed call: an instance of `cls` (nullptr: tracepool's class for
// `status`, tracepool.OutOfMemoryError say) made from `message` (tracepool_last_error(); NULL or ""
// gives the status's own text), with `status` as its attribute. The GIL must be held. If making the
// exception fails, that failure is the error set.
void set_python_error(int status, const char* message, PyObject* cls);
