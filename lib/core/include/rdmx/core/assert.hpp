// Two assert levels: RDMX_ASSERT is always on (setup-path invariants);
// RDMX_DEBUG_ASSERT is for hot-path invariants and compiles away unless RDMX_DEBUG is set.
#pragma once

namespace rdmx::detail {
[[noreturn, gnu::cold, gnu::noinline]] void assert_fail(const char* expr, const char* file,
                                                        int line) noexcept;
}  // namespace rdmx::detail

#define RDMX_ASSERT(cond)                                                                     \
  do {                                                                                        \
    if (__builtin_expect(!(cond), 0)) ::rdmx::detail::assert_fail(#cond, __FILE__, __LINE__); \
  } while (0)

#if defined(RDMX_DEBUG) && RDMX_DEBUG
#define RDMX_DEBUG_ASSERT(cond) RDMX_ASSERT(cond)
#else
#define RDMX_DEBUG_ASSERT(cond) \
  do {                          \
    (void)sizeof(cond);         \
  } while (0)
#endif
