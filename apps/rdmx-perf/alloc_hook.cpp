// Allocation counter: rdmx-perf replaces malloc, calloc, realloc and free (glibc allows an
// executable to interpose them; the real ones are reached through __libc_*), and operator new
// calls malloc, so every heap allocation of the process is counted, per thread and in total.
// Under a sanitizer (which brings its own allocator) the hook is compiled out and the counters
// stay at 0 - the docs say so.
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RDMX_PERF_ALLOC_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RDMX_PERF_ALLOC_HOOK 0
#endif
#endif
#ifndef RDMX_PERF_ALLOC_HOOK
#define RDMX_PERF_ALLOC_HOOK 1
#endif

namespace {
thread_local uint64_t t_allocs = 0;  // static TLS of the executable: no allocation to reach it
std::atomic<uint64_t> g_allocs{0};
inline void count() noexcept {
  ++t_allocs;
  g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

namespace rdmx::perf {
uint64_t thread_allocs() noexcept {
  return t_allocs;
}
uint64_t total_allocs() noexcept {
  return g_allocs.load(std::memory_order_relaxed);
}
}  // namespace rdmx::perf

#if RDMX_PERF_ALLOC_HOOK
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void free(void* p) {
  __libc_free(p);
}
void* memalign(size_t al, size_t n) {
  count();
  return __libc_memalign(al, n);
}
void* aligned_alloc(size_t al, size_t n) {
  count();
  return __libc_memalign(al, n);
}
int posix_memalign(void** out, size_t al, size_t n) {
  if (al < sizeof(void*) || (al & (al - 1)) != 0) return EINVAL;
  count();
  void* p = __libc_memalign(al, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}
#endif
