// Compile-time knobs, tied together by static_asserts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmx {

inline constexpr size_t kCacheLine = 64;

// Send queue: one WQEBB = 64 bytes; DS = 16 bytes (PRM).
inline constexpr uint32_t kWqebb = 64;
inline constexpr uint32_t kDs = 16;
static_assert(kWqebb % kDs == 0);

// Default ring sizes (power of two, in WQEBBs / CQEs).
inline constexpr uint32_t kDefaultSqWqebbs = 1024;
inline constexpr uint32_t kDefaultRqWqes = 256;
inline constexpr uint32_t kDefaultCqCqes = 4096;
static_assert((kDefaultSqWqebbs & (kDefaultSqWqebbs - 1)) == 0);
static_assert((kDefaultCqCqes & (kDefaultCqCqes - 1)) == 0);

// Signal one WQE in this many (unsignaled batching); the last WQE of a burst is always signaled.
inline constexpr uint32_t kDefaultSignalEvery = 16;

// Chunk page sizes allowed by lib/mem.
inline constexpr uint32_t kPage4K = 4096;
inline constexpr uint32_t kPage64K = 65536;
inline constexpr uint32_t kPage2M = 2u << 20;

}  // namespace rdmx
