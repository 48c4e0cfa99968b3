// block_tag.h: what a block remembers of the request that made it (filled by tracer::capture).
#pragma once

#include <cstdint>

namespace tracepool::core {

struct block_tag {
  uint32_t site = 0;   // call_site_table id; 0 = unknown (capture off, not sampled, table full)
  uint32_t birth = 0;  // marks made before the request
};

}  // namespace tracepool::core
