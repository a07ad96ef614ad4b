// The C++ test binary's one assertion macro and its counters. The binary is a single
// translation unit (engine_test.cc includes the *_checks.h files), so these live here and the
// CMake target keeps listing one source.
#pragma once

#include <cstdio>

namespace tandem_test {

inline int g_failures = 0;
inline int g_checks = 0;

}  // namespace tandem_test

#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    ++::tandem_test::g_checks;                                                       \
    if (!(cond)) {                                                                   \
      ++::tandem_test::g_failures;                                                   \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fprintf(stderr, "\n");                                                    \
    }                                                                                \
  } while (0)
