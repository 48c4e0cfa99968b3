// intercept.h: what the interposer's seams share (intercept.cpp: the driver; thread_origins.cpp: thread
// starts). Internal to libtracepool_intercept.so.
#pragma once

#include "tracepool/tracepool.h"

namespace tracepool::intercept {

// This thread is inside tracepool, recording: its driver calls and thread starts pass straight through.
extern __attribute__((tls_model("initial-exec"))) thread_local bool recording;

// The default instance once the interposer has recorded into it, else nullptr (this never makes it: a
// process that never reaches the driver, such as a compiler run under `run --intercept -- make`, gets none).
tracepool_t* recorded_instance();

}  // namespace tracepool::intercept
