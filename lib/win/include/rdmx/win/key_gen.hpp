// The 8-bit key a map gives a window (the low byte of its rkey). One generator per poll core,
// owned by it, touched by no other thread. See doc/guides/security.md.
//
// kRandom (default): each map adds a step drawn uniformly from 1..255 to the window's current
// key, so the new key is uniform over the 255 values that differ from the current one: the
// rkey of the last holder dies on every map, and an attacker who saw any number of earlier keys
// guesses the next one with probability 1/255. The steps come from AES-128 in counter mode
// (OpenSSL's libcrypto, AES-NI where the CPU has it) keyed at setup from getrandom(2): a
// cryptographic keystream, so keys seen by one peer tell nothing about the keys of another.
// Zero bytes of the keystream are dropped (rejection sampling: the steps stay exactly uniform).
// kIncrement (debugging only): step 1, so key = previous + 1 as the kernel's mlx5 mkey variant
// counter does. A peer that held a window's rkey knows its next one.
//
// Hot path: next_step() reads one byte from a 64-bit word of ready steps; every 8 maps the word
// is reloaded from a 4 KiB buffer, and every ~4080 steps the buffer is re-encrypted and its zero
// bytes dropped (no allocation, no lock, no system call: the kernel's random source is read at
// setup only).
#pragma once

#include <cstdint>
#include <memory>

#include <rdmx/core/result.hpp>

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace rdmx::win {

enum class KeyPolicy : uint8_t {
  kRandom,     // uniform over the 255 keys other than the current one (default)
  kIncrement,  // previous + 1: debugging only (predictable; see doc/guides/security.md)
};
const char* key_policy_name(KeyPolicy p) noexcept;
// "random" or "increment"; false for anything else.
bool parse_key_policy(const char* s, KeyPolicy* out) noexcept;

class KeyGen {
 public:
  KeyGen() = default;
  ~KeyGen();
  KeyGen(const KeyGen&) = delete;
  KeyGen& operator=(const KeyGen&) = delete;

  // Setup path. seed == 0: the AES key and counter come from getrandom(2) (a new stream on
  // every call). seed != 0: a deterministic stream for tests, distinct per `stream` (the core).
  Status init(KeyPolicy policy, uint64_t seed = 0, uint32_t stream = 0);

  KeyPolicy policy() const noexcept { return policy_; }

  // The step to add to the current key: 1..255 (always 1 under kIncrement).
  uint8_t next_step() noexcept {
    const uint8_t r = static_cast<uint8_t>(word_);
    word_ >>= 8;
    if (word_ == 0) [[unlikely]] {  // every 8 steps
      if (pos_ == end_) [[unlikely]]
        refill();  // every ~510 words: a new keystream buffer
      else
        word_ = buf_[pos_++];
    }
    return r;
  }
  // The key that follows `current` (never equal to it).
  uint8_t next_key(uint8_t current) noexcept { return static_cast<uint8_t>(current + next_step()); }

  // Keystream buffers encrypted since init (tests, stats).
  uint64_t regenerations() const noexcept { return regenerations_; }

 private:
  static constexpr uint32_t kWords = 512;  // 4 KiB of keystream per regeneration
  [[gnu::cold]] void refill() noexcept;
  void regenerate() noexcept;

  uint64_t word_ = 0;  // ready steps, low byte first; every byte non-zero (0 = word used up)
  uint32_t pos_ = 0;   // next word of buf_
  uint32_t end_ = 0;   // words of buf_ (zero bytes dropped: the rest are ready steps)
  KeyPolicy policy_ = KeyPolicy::kRandom;
  uint64_t regenerations_ = 0;
  std::unique_ptr<uint64_t[]> buf_;
  EVP_CIPHER_CTX* ctx_ = nullptr;
};

}  // namespace rdmx::win
