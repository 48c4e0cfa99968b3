// exit_report.h: the TRACEPOOL_REPORT report of the default instance, written once per process when it
// ends: at a normal exit, when the host asks (tracepool_write_exit_report), or on SIGTERM (Note [Exit
// report] in exit_report.cpp). Never installed.
#pragma once

struct tracepool_s;

namespace tracepool::capi {

// Called once, when the default instance `tp` has been made and TRACEPOOL_REPORT (`path`) is set: says
// on stderr at once if the path cannot be written, and arranges for the report at exit and on SIGTERM.
void arm_exit_report(tracepool_s* tp, const char* path);

// Writes the report now if this process has not written it yet (tracepool_write_exit_report's contract).
int write_exit_report_once();

}  // namespace tracepool::capi
