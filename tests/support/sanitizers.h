// sanitizers.h: which sanitizer this test build runs under, for tests that do less (or skip what a
// sanitizer's own runtime cannot do) there. gcc defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__.
#pragma once

namespace tracepool::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool asan_build = true;
#else
inline constexpr bool asan_build = false;
#endif
#if defined(__SANITIZE_THREAD__)
inline constexpr bool tsan_build = true;
#else
inline constexpr bool tsan_build = false;
#endif
// Sanitized builds are Debug builds that run 70-100x slower than the plain one.
inline constexpr bool sanitized_build = asan_build || tsan_build;

}  // namespace tracepool::testing
