// The single tables (tracepool_status_map.h, tracepool_stat_map.h, TRACEPOOL_CAPTURE_MODE_MAP) row by
// row against the code that reads them: a row that a consumer drops, renames, reorders or describes
// twice fails here. The Python module's side is tests/python/test_tables.py.
#include <gtest/gtest.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/config.h"
#include "base/status.h"
#include "stats.h"
#include "tracepool/tracepool.h"

namespace {

using tracepool::status;
namespace core = tracepool::core;

struct status_row {
  const char* name;
  int code;
  status core_status;
  const char* message;
};
constexpr status_row status_rows[] = {
#define TRACEPOOL_STATUS_ROW_(name, core_name, code, message, python_class) \
  {"TRACEPOOL_" #name, TRACEPOOL_##name, status::core_name, message},
    TRACEPOOL_STATUS_MAP(TRACEPOOL_STATUS_ROW_)
#undef TRACEPOOL_STATUS_ROW_
};

TEST(StatusTable, EveryStatusHasItsOwnNamedMessage) {
  const std::string unknown = tracepool_status_string(INT_MIN);
  std::set<std::string> messages;
  std::set<int> codes;
  for (const status_row& row : status_rows) {
    const std::string text = tracepool_status_string(row.code);
    EXPECT_EQ(text, std::string(row.name) + ": " + row.message);
    EXPECT_NE(text, unknown) << row.name;
    EXPECT_STRNE(row.message, "") << row.name;
    EXPECT_TRUE(messages.insert(row.message).second) << row.name << " says what another status says";
    EXPECT_TRUE(codes.insert(row.code).second) << row.name << " reuses code " << row.code;
    EXPECT_EQ(static_cast<int>(row.core_status), row.code) << row.name;
    EXPECT_EQ(row.code == 0, std::string(row.name) == "TRACEPOOL_OK") << "0 is success, every error is negative";
    EXPECT_LE(row.code, 0) << row.name;
  }
  EXPECT_EQ(TRACEPOOL_ERR_OOM, -2) << "codes are ABI: the table must not renumber them";
  EXPECT_STREQ(tracepool_status_string(TRACEPOOL_ERR_OOM), "TRACEPOOL_ERR_OOM: out of memory");
}

constexpr const char* stat_names[] = {
#define TRACEPOOL_STAT_NAME_(name) #name,
    TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_NAME_)
#undef TRACEPOOL_STAT_NAME_
};

TEST(StatTable, EveryKindHasItsNameAndItsOwnCellInEveryColumn) {
  ASSERT_EQ(std::size(stat_names), static_cast<size_t>(core::stat_kind_count));
  // A different figure in every cell: two kinds sharing a slot of stat_table would overwrite one.
  core::device_stats st;
  auto figure = [](int k, int column, int field) { return int64_t{1000} * k + 10 * column + field + 1; };
  for (int k = 0; k < core::stat_kind_count; ++k)
    for (int c = 0; c <= core::all_pools; ++c) {
      core::stat& s = st.table.at(static_cast<core::stat_kind>(k), c);
      s.current = figure(k, c, 0), s.peak = figure(k, c, 1), s.allocated = figure(k, c, 2), s.freed = figure(k, c, 3);
    }
  std::map<std::string, int64_t> items;
  for (const auto& [key, value] : core::memory_stat_items(st)) EXPECT_TRUE(items.emplace(key, value).second) << key;
  const char* const columns[] = {"small_pool", "large_pool", "all"};  // pool_kind order, then all
  const char* const fields[] = {"current", "peak", "allocated", "freed"};
  for (int k = 0; k < core::stat_kind_count; ++k) {
    EXPECT_STREQ(core::stat_kind_name(static_cast<core::stat_kind>(k)), stat_names[k]);
    for (int c = 0; c <= core::all_pools; ++c)
      for (int f = 0; f < 4; ++f) {
        const std::string key = std::string(stat_names[k]) + "." + columns[c] + "." + fields[f];
        ASSERT_EQ(items.count(key), 1u) << key << " is missing from memory_stat_items";
        EXPECT_EQ(items[key], figure(k, c, f)) << key;
      }
  }
  EXPECT_EQ(items.size(), static_cast<size_t>(core::stat_kind_count) * 3 * 4 + 6) << "the six counters besides";
}

TEST(StatTable, TheCStructsHoldTheKindsInTableOrder) {
  size_t k = 0;
#define TRACEPOOL_STAT_LAYOUT_(name)                                                                                   \
  EXPECT_EQ(offsetof(tracepool_stat_set_t, name), k * sizeof(tracepool_stat_t)) << #name;                              \
  EXPECT_EQ(offsetof(tracepool_stats_t, name), offsetof(tracepool_stats_t, allocation) + k * sizeof(tracepool_stat_t)) \
      << #name;                                                                                                        \
  EXPECT_EQ(static_cast<size_t>(core::stat_kind::name), k) << #name;                                                   \
  ++k;
  TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_LAYOUT_)
#undef TRACEPOOL_STAT_LAYOUT_
  EXPECT_EQ(k, std::size(stat_names));
}

// The figures get_stats puts in each named field are the ones the report gives under that name.
TEST(StatTable, GetStatsAndTheReportAgreeOnEveryKind) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,capture:off", &tp), TRACEPOOL_OK);
  void* small = nullptr;
  void* large = nullptr;
  void* freed = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 1000, 0, nullptr, &small), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 5 << 20, 0, nullptr, &large), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 3000, 0, nullptr, &freed), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, freed, nullptr), TRACEPOOL_OK);
  tracepool_stats_t s{};
  s.size = sizeof s;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &s), TRACEPOOL_OK);
  char* text = nullptr;
  ASSERT_EQ(tracepool_report_string(tp, "json", &text), TRACEPOOL_OK);
  const nlohmann::json stats = nlohmann::json::parse(text)["stats"]["0"];
  tracepool_string_free(text);
  auto expect_same = [&](const std::string& key, const tracepool_stat_t& field) {
    ASSERT_TRUE(stats.contains(key + ".current")) << key;
    EXPECT_EQ(stats[key + ".current"].get<uint64_t>(), field.current) << key;
    EXPECT_EQ(stats[key + ".peak"].get<uint64_t>(), field.peak) << key;
    EXPECT_EQ(stats[key + ".allocated"].get<uint64_t>(), field.allocated) << key;
    EXPECT_EQ(stats[key + ".freed"].get<uint64_t>(), field.freed) << key;
  };
#define TRACEPOOL_STAT_SAME_(name)                     \
  expect_same(#name ".all", s.name);                   \
  expect_same(#name ".small_pool", s.small_pool.name); \
  expect_same(#name ".large_pool", s.large_pool.name);
  TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_SAME_)
#undef TRACEPOOL_STAT_SAME_
  EXPECT_GT(s.allocated_bytes.current, s.requested_bytes.current) << "the figures differ, so a mix-up shows";
  ASSERT_EQ(tracepool_free(tp, small, nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, large, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

struct capture_row {
  const char* name;
  core::capture_mode mode;
};
constexpr capture_row capture_rows[] = {
#define TRACEPOOL_CAPTURE_ROW_(name) {#name, core::capture_mode::name},
    TRACEPOOL_CAPTURE_MODE_MAP(TRACEPOOL_CAPTURE_ROW_)
#undef TRACEPOOL_CAPTURE_ROW_
};

TEST(CaptureModeTable, EveryModeIsParsedNamedOfferedAndReported) {
  core::config bad;
  ASSERT_EQ(core::parse_config("capture:sometimes", &bad), status::bad_config);
  const std::string refusal = tracepool::last_error();
  const std::string help = core::config_help();
  for (const capture_row& row : capture_rows) {
    core::config c;
    c.capture = row.mode == core::capture_mode::off ? core::capture_mode::all : core::capture_mode::off;
    ASSERT_EQ(core::parse_config((std::string("capture:") + row.name).c_str(), &c), status::ok) << row.name;
    EXPECT_EQ(c.capture, row.mode) << row.name;
    EXPECT_STREQ(core::capture_mode_name(row.mode), row.name);
    EXPECT_NE(refusal.find(row.name), std::string::npos) << "a bad value's message offers " << row.name;
    EXPECT_NE(help.find(row.name), std::string::npos) << "config_help offers " << row.name;

    tracepool_t* tp = nullptr;
    ASSERT_EQ(tracepool_create((std::string("backend:host,capture:") + row.name).c_str(), &tp), TRACEPOOL_OK);
    char* text = nullptr;
    ASSERT_EQ(tracepool_report_string(tp, "json", &text), TRACEPOOL_OK);
    EXPECT_EQ(nlohmann::json::parse(text)["capture"]["mode"], row.name);
    tracepool_string_free(text);
    tracepool_destroy(tp);
  }
}

}  // namespace
