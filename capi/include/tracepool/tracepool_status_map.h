/* tracepool_status_map.h: every status code of tracepool, one row each (libuv's UV_ERRNO_MAP). Each
 * list of statuses is made from this table: the TRACEPOOL_OK and TRACEPOOL_ERR_* constants of the C API
 * (tracepool.h), the strings of tracepool_status_string() (capi/tracepool.cpp), core's enum class
 * status (base/status.h) and the exception class the Python module raises (bindings/module.cpp).
 *
 *   XX(name, core_name, code, message, python_class)
 *     name          the C constant without its TRACEPOOL_ prefix
 *     core_name     the enumerator of tracepool::status
 *     code          0 for success, negative for an error; part of the ABI, so never renumbered or reused
 *     message       what tracepool_status_string() says after "TRACEPOOL_<name>: "
 *     python_class  the tracepool.Error class raised for it: a subclass that is also the builtin
 *                   exception a caller already catches for such a failure, else Error itself
 *
 * C and C++; installed next to tracepool.h, which includes it. It defines this one macro only.
 */
#ifndef TRACEPOOL_STATUS_MAP_H
#define TRACEPOOL_STATUS_MAP_H

/* clang-format off */
#define TRACEPOOL_STATUS_MAP(XX)                                                                                  \
  XX(OK, ok, 0, "success", Error)                                                                                 \
  /* null out-pointer, absurd size, malformed call */                                                             \
  XX(ERR_INVALID_ARGUMENT, invalid_argument, -1, "invalid argument", InvalidArgumentError)                        \
  /* device or configured limit cannot hold the request */                                                        \
  XX(ERR_OOM, out_of_memory, -2, "out of memory", OutOfMemoryError)                                               \
  /* device index out of range */                                                                                 \
  XX(ERR_INVALID_DEVICE, invalid_device, -3, "invalid device", InvalidArgumentError)                              \
  /* free of an address tracepool never handed out */                                                             \
  XX(ERR_UNKNOWN_POINTER, unknown_pointer, -4, "pointer was not allocated by this tracepool", InvalidArgumentError) \
  /* address inside tracepool's memory, not a live block */                                                       \
  XX(ERR_DOUBLE_FREE, double_free, -5, "pointer is not a live block (double free or interior pointer)",           \
     InvalidArgumentError)                                                                                        \
  /* unknown configuration key or bad value */                                                                    \
  XX(ERR_BAD_CONFIG, bad_config, -6, "bad configuration", InvalidArgumentError)                                   \
  /* unexpected driver error */                                                                                   \
  XX(ERR_BACKEND, backend_error, -7, "backend error", Error)                                                      \
  /* backend cannot run here: no driver or no device */                                                           \
  XX(ERR_UNAVAILABLE, unavailable, -8, "backend unavailable", Error)                                              \
  /* bug, or host memory exhausted inside tracepool */                                                            \
  XX(ERR_INTERNAL, internal, -9, "internal error", Error)
/* clang-format on */

#endif /* TRACEPOOL_STATUS_MAP_H */
