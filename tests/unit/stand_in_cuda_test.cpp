// The stand-in driver (tests/support/stand_in_cuda.c), for testing what meets the CUDA driver on machines
// without a GPU (issue 34): programs reach it at link time and through dlopen + cuGetProcAddress_v2, as
// the CUDA runtime does, and tracepool's CUDA backend on a driver lacking most entry points refuses with
// one clear line instead of failing later.
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "child_process.h"

namespace {

int run(const std::vector<std::string>& argv, std::string* out) {
  return tracepool::testing::run_child(argv, {std::string("LD_LIBRARY_PATH=") + TRACEPOOL_STAND_IN_CUDA_DIR}, out);
}

TEST(StandInCuda, AProgramLinkedAgainstTheDriverReachesIt) {
  std::string out;
  ASSERT_EQ(run({TRACEPOOL_STAND_IN_LINKED}, &out), 0) << out;
  EXPECT_NE(out.find("linked: allocated 5242880 bytes"), std::string::npos) << out;
}

TEST(StandInCuda, ARuntimeReachesItThroughGetProcAddress) {
  std::string out;
  ASSERT_EQ(run({TRACEPOOL_STAND_IN_CLIENT, "driver"}, &out), 0) << out;
  EXPECT_NE(out.find("cuMemMap: NULL, status 1"), std::string::npos) << "a missing entry point, as the driver says it\n"
                                                                        << out;
  EXPECT_NE(out.find("allocated 3145728 bytes of 17179869184"), std::string::npos) << out;
  EXPECT_NE(out.find("after the free 0 bytes in use"), std::string::npos) << out;
}

// The stand-in has cuMemAlloc but not the primary context, events or streams the CUDA backend needs:
// tracepool says which entry point is missing, and its host backend still serves.
TEST(StandInCuda, TracepoolOnADriverWithoutItsEntryPointsSaysWhichIsMissing) {
  std::string out;
  ASSERT_EQ(run({TRACEPOOL_STAND_IN_CLIENT, "tracepool"}, &out), 0) << out;
  EXPECT_NE(out.find("backend:cuda: TRACEPOOL_ERR_UNAVAILABLE: backend unavailable: backend cuda: the driver has no "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("backend:host: serves"), std::string::npos) << out;
}

}  // namespace
