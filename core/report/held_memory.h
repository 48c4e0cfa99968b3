// held_memory.h: the first step of every report and export (collect -> describe -> group): what each
// device holds now, its statistics, its retained private pools and every block, copied one stream
// pool at a time under that pool's lock and read after it is released. Then site_describer.h names
// the sites, and the report (report.cpp) groups them; the PyTorch export (plugins/torch) lays the
// blocks out as PyTorch would.
#pragma once

#include <vector>

#include "allocator.h"
#include "block.h"
#include "stats.h"

namespace tracepool::core {

struct device_blocks {
  int device = 0;
  device_stats stats;
  std::vector<block_record> blocks;  // each segment's blocks together, in address order
  std::vector<private_pool_info> pools;  // retained private pools, read just before the blocks
  std::vector<observed_block> observed;  // memory seen outside the pool (Note [Observed memory]), after them
};

struct held_memory {
  std::vector<device_blocks> devices;  // every device, in order
};

inline status collect(allocator& a, held_memory* out) {
  out->devices.assign(static_cast<size_t>(a.device_count()), device_blocks{});
  for (int d = 0; d < a.device_count(); ++d) {
    device_blocks& dev = out->devices[static_cast<size_t>(d)];
    dev.device = d;
    if (status s = a.stats(d, &dev.stats); s != status::ok) return s;
    // A pool retained while the blocks are copied shows its blocks as ordinary ones in this report.
    if (status s = a.retained_pools(d, &dev.pools); s != status::ok) return s;
    if (status s = a.collect_blocks(d, &dev.blocks); s != status::ok) return s;
    dev.observed = a.observed().blocks(d);
  }
  return status::ok;
}

}  // namespace tracepool::core
