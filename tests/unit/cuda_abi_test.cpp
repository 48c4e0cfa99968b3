// cuda_abi_test.cpp: core/backend/cuda_abi.h, tracepool's own declarations of the CUDA driver API,
// against the toolkit's cuda.h and cudaTypedefs.h (cuda_abi/toolkit.cpp): the same constants, the same
// sizes, alignments and field offsets, and for every entry point cuda_abi.h declares, the toolkit's type
// of the version it is exported as, with the same parameters. Built only where the toolkit's headers are
// installed (tests/CMakeLists.txt); tracepool itself builds without them.
#include <gtest/gtest.h>

#include "backend/cuda_abi.h"
#include "cuda_abi/abi_facts.h"

namespace tracepool::abi_check {

facts ours() {
  facts f;
  TRACEPOOL_ABI_DESCRIBE_COMMON(f);
#define TRACEPOOL_OUR_ENTRY_POINT(name, parameters) f.entry_points[#name] = entry_point_of<name##_t>();
  TRACEPOOL_CUDA_FUNCTIONS(TRACEPOOL_OUR_ENTRY_POINT)
#undef TRACEPOOL_OUR_ENTRY_POINT
  return f;
}

namespace {

std::string describe(const entry_point& e) {
  std::string s = "returns " + std::to_string(e.result_size) + " bytes; (";
  for (const parameter& p : e.parameters) {
    static const char* const kinds[] = {"integer", "floating", "pointer", "aggregate"};
    s += std::string(kinds[p.kind]) + " of " + std::to_string(p.size);
    if (p.kind == parameter::pointer) s += " to " + std::to_string(p.pointee);
    s += ", ";
  }
  return s + ")";
}

TEST(CudaAbi, ConstantsHaveTheToolkitsValues) {
  const facts mine = ours(), theirs = toolkit();
  ASSERT_EQ(mine.constants.size(), theirs.constants.size());
  for (const auto& [name, value] : mine.constants) EXPECT_EQ(value, theirs.constants.at(name)) << name;
}

TEST(CudaAbi, TypesHaveTheToolkitsSizesAlignmentsAndOffsets) {
  const facts mine = ours(), theirs = toolkit();
  for (const auto& [name, size_alignment] : mine.types) EXPECT_EQ(size_alignment, theirs.types.at(name)) << name;
  for (const auto& [name, offset] : mine.fields) EXPECT_EQ(offset, theirs.fields.at(name)) << name;
}

TEST(CudaAbi, EveryEntryPointHasTheToolkitsParameters) {
  const facts mine = ours(), theirs = toolkit();
  // toolkit.cpp pairs each declaration with the toolkit's type: one added here must be paired there.
  ASSERT_EQ(mine.entry_points.size(), theirs.entry_points.size());
  for (const auto& [name, ours_e] : mine.entry_points) {
    ASSERT_TRUE(theirs.entry_points.count(name)) << name << " has no toolkit type in cuda_abi/toolkit.cpp";
    const entry_point& theirs_e = theirs.entry_points.at(name);
    EXPECT_EQ(ours_e.result_size, theirs_e.result_size) << name;
    ASSERT_EQ(ours_e.parameters.size(), theirs_e.parameters.size()) << name << ": " << describe(ours_e) << " vs "
                                                                    << describe(theirs_e);
    for (size_t i = 0; i < ours_e.parameters.size(); ++i) {
      parameter a = ours_e.parameters[i], b = theirs_e.parameters[i];
      // An opaque structure here (CUlaunchConfig, only passed on) is a complete one in cuda.h.
      if (a.pointee == 0 || b.pointee == 0) a.pointee = b.pointee = 0;
      EXPECT_EQ(a, b) << name << " parameter " << i << ": " << describe(ours_e) << " vs " << describe(theirs_e);
    }
  }
}

}  // namespace
}  // namespace tracepool::abi_check
