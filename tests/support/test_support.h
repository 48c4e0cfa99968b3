// test_support.h: shared helpers for the C++ suites.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "allocator.h"
#include "base/config.h"

namespace tracepool::testing {

// A core allocator on the host backend with `extra` configuration ("key:value,...") on top. Every
// invariant is checked after each operation (validate:on) unless `extra` says validate:off.
// TRACEPOOL_TEST_CONF, where set, comes last: ctest runs suites again with segments:growable so. Each
// is parsed over the one before, since one text may not give a key twice.
inline std::unique_ptr<core::allocator> host_allocator(const std::string& extra = "") {
  core::config cfg;
  EXPECT_EQ(core::parse_config("backend:host,validate:on", &cfg), status::ok) << last_error();
  EXPECT_EQ(core::parse_config(extra.c_str(), &cfg), status::ok) << last_error();
  if (const char* more = std::getenv("TRACEPOOL_TEST_CONF"); more != nullptr && *more != '\0')
    EXPECT_EQ(core::parse_config(more, &cfg), status::ok) << last_error();
  std::unique_ptr<core::allocator> a;
  EXPECT_EQ(core::allocator::create(cfg, &a), status::ok) << last_error();
  return a;
}

inline core::device_stats stats_of(core::allocator& a, int device = 0) {
  core::device_stats s;
  EXPECT_EQ(a.stats(device, &s), status::ok);
  return s;
}

inline int64_t current(const core::device_stats& s, core::stat_kind k) {
  return s.table.at(k, core::all_pools).current;
}

// The addresses of a private pool's allocated blocks on device 0, in address order.
inline std::vector<void*> pool_blocks(core::allocator& a, uint64_t pool) {
  std::vector<void*> out;
  EXPECT_EQ(a.pool_blocks(0, pool, &out), status::ok);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tracepool::testing
