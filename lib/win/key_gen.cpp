// The per-core key generator (key_gen.hpp): AES-128-CTR keystream from libcrypto, keyed from
// getrandom(2) at setup.
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <openssl/evp.h>

#include <rdmx/core/config.hpp>
#include <rdmx/win/key_gen.hpp>

namespace rdmx::win {

namespace {

constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

// Non-zero when some byte of w is zero (the classic "haszero" bit trick: exact).
constexpr uint64_t has_zero_byte(uint64_t w) noexcept {
  return (w - kOnes) & ~w & kHighs;
}

// The non-zero bytes of w, in order, from the low byte up (the rest zero).
uint64_t drop_zero_bytes(uint64_t w) noexcept {
  uint64_t out = 0;
  uint32_t shift = 0;
  for (uint32_t i = 0; i < 8; ++i) {
    const uint64_t b = (w >> (8 * i)) & 0xff;
    if (b) {
      out |= b << shift;
      shift += 8;
    }
  }
  return out;
}

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

Status KeyGen::init(KeyPolicy policy, uint64_t seed, uint32_t stream) {
  policy_ = policy;
  word_ = 0;
  pos_ = end_ = 0;
  regenerations_ = 0;
  if (!buf_) buf_ = std::make_unique<uint64_t[]>(kWords);
  if (policy == KeyPolicy::kIncrement) {
    for (uint32_t i = 0; i < kWords; ++i) buf_[i] = kOnes;
    end_ = kWords;
    pos_ = 0;
    word_ = kOnes;
    return Status{};
  }
  // 16 bytes of AES key, 16 bytes of initial counter.
  unsigned char material[32] = {};
  if (seed == 0) {
    size_t got = 0;
    while (got < sizeof material) {
      const ssize_t n = getrandom(material + got, sizeof material - got, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return make_error(Errc::kDeviceError,
                          std::string("key generator: getrandom: ") + std::strerror(errno));
      }
      got += static_cast<size_t>(n);
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
  refill();
  regenerations_ = 0;
  return Status{};
}

void KeyGen::regenerate() noexcept {
  pos_ = 0;
  ++regenerations_;
  if (policy_ == KeyPolicy::kIncrement) return;  // the buffer holds steps of 1 for good
  // CTR keystream = encryption of zeros; the counter carries on from the previous buffer.
  uint64_t* b = buf_.get();
  std::memset(b, 0, kWords * sizeof(uint64_t));
  int out = 0;
  auto* p = reinterpret_cast<unsigned char*>(b);
  const int ok = EVP_EncryptUpdate(ctx_, p, &out, p, static_cast<int>(kWords * sizeof(uint64_t)));
  RDMX_ASSERT(ok == 1 && out == static_cast<int>(kWords * sizeof(uint64_t)));
  // A zero byte would end a word early and a zero step would keep the key: drop them
  // (rejection sampling), compacting the words in place.
  uint32_t n = 0;
  for (uint32_t i = 0; i < kWords; ++i) {
    uint64_t w = b[i];
    if (has_zero_byte(w)) [[unlikely]]
      w = drop_zero_bytes(w);
    b[n] = w;
    n += w != 0;
  }
  end_ = n;  // >= 1 but with probability 2^-4096
}

void KeyGen::refill() noexcept {
  do {
    regenerate();
  } while (end_ == 0);
  word_ = buf_[pos_++];
}

}  // namespace rdmx::win
