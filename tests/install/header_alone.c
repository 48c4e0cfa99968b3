/* header_alone.c: the public header compiles from capi/include alone, as strict C11, with nothing of
 * core on the include path (a vendored header, cgo, bindgen, a build that does not install): tests/
 * CMakeLists.txt compiles it with -I capi/include only. It names a status and a statistic of each
 * table, so that both tables are really read. */
#include <tracepool/tracepool.h>

int header_alone(tracepool_t* tp) {
  tracepool_stats_t stats;
  stats.size = sizeof stats;
  if (tracepool_get_stats(tp, 0, &stats) != TRACEPOOL_OK) return TRACEPOOL_ERR_INVALID_DEVICE;
  return stats.small_pool.requested_bytes.current > 0 ? TRACEPOOL_OK : TRACEPOOL_ERR_OOM;
}
