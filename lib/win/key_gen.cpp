// The per-core key generator (key_gen.hpp): AES-128-CTR keystream from libcrypto, keyed from
// getrandom(2) at setup.
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include <openssl/evp.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <rdmx/core/assert.hpp>
#include <rdmx/core/config.hpp>
#include <rdmx/win/key_gen.hpp>

namespace rdmx::win {

namespace {

constexpr uint32_t kMinTableSteps = 4096;  // 4 KiB: a redraw per 2048 maps

}  // namespace

const char* key_policy_name(KeyPolicy p) noexcept {
  return p == KeyPolicy::kIncrement ? "increment" : "random";
}

bool parse_key_policy(const char* s, KeyPolicy* out) noexcept {
  if (!s) return false;
  if (std::strcmp(s, "random") == 0) {
    *out = KeyPolicy::kRandom;
    return true;
  }
  if (std::strcmp(s, "increment") == 0) {
    *out = KeyPolicy::kIncrement;
    return true;
  }
  return false;
}

KeyGen::~KeyGen() {
  if (ctx_) EVP_CIPHER_CTX_free(ctx_);
}

Status KeyGen::init(KeyPolicy policy, uint64_t seed, uint32_t stream,
                    uint32_t max_between_refresh) {
  policy_ = policy;
  regenerations_ = 0;
  spare_pos_ = sizeof spare_;
  uint32_t n = kMinTableSteps;
  while (n / 2 < max_between_refresh) {
    if (n >= (1u << 30))
      return make_error(Errc::kInvalidArgument, "key generator: table too large");
    n *= 2;
  }
  if (!buf_ || mask_ + 1 != n) {
    buf_.reset(new (std::nothrow) uint8_t[n + 63]());
    if (!buf_) return make_error(Errc::kNoMemory, "key generator: no memory for the step table");
  }
  mask_ = n - 1;
  const uintptr_t at = (reinterpret_cast<uintptr_t>(buf_.get()) + 63) & ~uintptr_t{63};
  uint8_t* const table = reinterpret_cast<uint8_t*>(at);
  steps_ = table;
  if (policy == KeyPolicy::kIncrement) {
    std::memset(table, 1, n);
    redraw_at_ = ~uint64_t{0};
    return Status{};
  }
  // 16 bytes of AES key, 16 bytes of initial counter.
  unsigned char material[32] = {};
  if (seed == 0) {
    size_t got = 0;
    while (got < sizeof material) {
      const ssize_t r = getrandom(material + got, sizeof material - got, 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        return make_error(Errc::kDeviceError,
                          std::string("key generator: getrandom: ") + std::strerror(errno));
      }
      got += static_cast<size_t>(r);
    }
  } else {
    std::memcpy(material, &seed, sizeof seed);
    std::memcpy(material + 8, &stream, sizeof stream);
  }
  if (!ctx_) ctx_ = EVP_CIPHER_CTX_new();
  if (!ctx_) return make_error(Errc::kNoMemory, "key generator: EVP_CIPHER_CTX_new failed");
  if (EVP_EncryptInit_ex(ctx_, EVP_aes_128_ctr(), nullptr, material, material + 16) != 1)
    return make_error(Errc::kUnsupported, "key generator: AES-128-CTR not available in libcrypto");
  std::memset(material, 0, sizeof material);
  fill(table, n);
  redraw_at_ = n / 2;
  return Status{};
}

void KeyGen::redraw(uint64_t used) noexcept {
  const uint32_t half = (mask_ + 1) / 2;
  // More than a half beyond the last redraw would mean steps were read twice: the owner broke
  // init's bound (a map count that moved without poll()).
  RDMX_ASSERT(used - redraw_at_ < half);
  // Draws [redraw_at_ - half, redraw_at_) are all used: the half they read gets new steps.
  fill(steps_ + ((redraw_at_ - half) & mask_), half);
  redraw_at_ += half;
  ++regenerations_;
}

uint8_t KeyGen::spare_step() noexcept {
  for (;;) {
    if (spare_pos_ == sizeof spare_) {
      int out = 0;
      const int ok = EVP_EncryptUpdate(ctx_, spare_, &out, spare_, static_cast<int>(sizeof spare_));
      RDMX_ASSERT(ok == 1 && out == static_cast<int>(sizeof spare_));
      spare_pos_ = 0;
    }
    const uint8_t b = spare_[spare_pos_++];
    if (b) return b;
  }
}

void KeyGen::fill(uint8_t* p, uint32_t n) noexcept {
  // CTR keystream XORed over the old steps is a fresh uniform byte string (the counter carries
  // on, never repeating). A zero byte would keep the key: each is replaced by the next non-zero
  // keystream byte (rejection sampling, so the steps are exactly uniform over 1..255).
  int out = 0;
  const int ok = EVP_EncryptUpdate(ctx_, p, &out, p, static_cast<int>(n));
  RDMX_ASSERT(ok == 1 && out == static_cast<int>(n));
  uint32_t i = 0;
#if defined(__SSE2__)
  // 64 bytes per test: P(some zero byte) = 1 - (255/256)^64, about 22 %.
  const __m128i zero = _mm_setzero_si128();
  for (; i + 64 <= n; i += 64) {
    const auto* v = reinterpret_cast<const __m128i*>(p + i);
    const __m128i z01 = _mm_or_si128(_mm_cmpeq_epi8(_mm_load_si128(v), zero),
                                     _mm_cmpeq_epi8(_mm_load_si128(v + 1), zero));
    const __m128i z23 = _mm_or_si128(_mm_cmpeq_epi8(_mm_load_si128(v + 2), zero),
                                     _mm_cmpeq_epi8(_mm_load_si128(v + 3), zero));
    if (_mm_movemask_epi8(_mm_or_si128(z01, z23)) == 0) [[likely]]
      continue;
    uint64_t z = 0;
    for (uint32_t k = 0; k < 4; ++k)
      z |= uint64_t{static_cast<uint32_t>(
               _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_load_si128(v + k), zero)))}
           << (16 * k);
    for (; z; z &= z - 1) p[i + static_cast<uint32_t>(__builtin_ctzll(z))] = spare_step();
  }
#endif
  for (; i < n; ++i)
    if (p[i] == 0) p[i] = spare_step();
}

}  // namespace rdmx::win
