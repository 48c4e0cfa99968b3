// test_support.h: shared helpers for the C++ suites.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "allocator.h"
#include "base/config.h"

namespace tracepool::testing {

// A core allocator on the host backend with `extra` configuration ("key:value,...") appended.
// Every invariant is checked after each operation (validate:on).
inline std::unique_ptr<core::allocator> host_allocator(const std::string& extra = "") {
  core::config cfg;
  const std::string text = "backend:host,validate:on" + (extra.empty() ? "" : "," + extra);
  EXPECT_EQ(core::parse_config(text.c_str(), &cfg), status::ok) << last_error();
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

}  // namespace tracepool::testing
