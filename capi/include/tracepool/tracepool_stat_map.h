/* tracepool_stat_map.h: the block and segment statistics, one row each, in the order of PyTorch's
 * torch.cuda.memory_stats(). Each list of them is made from this table: the fields of
 * tracepool_stat_set_t and tracepool_stats_t (tracepool.h), core's enum stat_kind and the key names of
 * memory_stat_items() (stats.h, stats.cpp), and the Python module's statistics dicts (bindings/module.cpp).
 *
 *   XX(name)  the struct field, the stat_kind enumerator and the memory_stats() key prefix
 *
 * The rows are the layout of two public structs: adding, removing or reordering one breaks the ABI
 * (capi/tracepool.cpp static_asserts the layout). Where core keeps them in memory is its own choice
 * (stat_table in stats.h).
 *
 * C and C++; installed next to tracepool.h, which includes it. It defines this one macro only.
 */
#ifndef TRACEPOOL_STAT_MAP_H
#define TRACEPOOL_STAT_MAP_H

/* clang-format off */
#define TRACEPOOL_STAT_MAP(XX)                                                               \
  XX(allocation)           /* blocks handed out */                                           \
  XX(segment)              /* segments obtained from the device */                           \
  XX(active)               /* blocks handed out, or freed but still in use on a stream */    \
  XX(inactive_split)       /* free blocks inside partly used segments */                     \
  XX(allocated_bytes)      /* bytes of blocks handed out (rounded sizes) */                  \
  XX(reserved_bytes)       /* bytes of segments obtained from the device */                  \
  XX(active_bytes)         /* bytes of active blocks */                                      \
  XX(inactive_split_bytes) /* bytes of inactive split blocks */                              \
  XX(requested_bytes)      /* bytes asked for by callers (before rounding) */
/* clang-format on */

#endif /* TRACEPOOL_STAT_MAP_H */
