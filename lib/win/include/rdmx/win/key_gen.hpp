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
// Hot path: the i-th map of a core (i = its map count) adds step(i), one byte of a table of
// steps, to the window's key: a load and an add. The table (a power of two of bytes, at least
// twice the most maps a core can make between two polls) is refreshed in halves from poll():
// once the maps have used a half, it is redrawn (AES-CTR over it in place, zero bytes replaced
// by further non-zero keystream bytes) while the maps read the other half, so no step is used
// twice. No allocation, lock or system call: the kernel's random source is read at setup only.
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
  // max_between_refresh: the most steps the owner can take between two refresh() calls (a
  // poll core: its send queue's WQEBBs, as every map takes at least one and poll() frees them).
  Status init(KeyPolicy policy, uint64_t seed = 0, uint32_t stream = 0,
              uint32_t max_between_refresh = 1024);

  KeyPolicy policy() const noexcept { return policy_; }

  // The step of the i-th draw: 1..255 (always 1 under kIncrement). The owner numbers its draws
  // 0, 1, 2, ... and calls refresh() often enough (see init).
  uint8_t step(uint64_t i) const noexcept { return steps_[i & mask_]; }
  // The key that follows `current` at draw i (never equal to it).
  uint8_t next_key(uint8_t current, uint64_t i) const noexcept {
    return static_cast<uint8_t>(current + step(i));
  }
  // `used` draws have been taken: redraws the half of the table they finished, if any.
  void refresh(uint64_t used) noexcept {
    if (used >= redraw_at_) [[unlikely]]
      redraw(used);
  }

  // Table halves redrawn since init (tests, stats) and the table's size in steps.
  uint64_t regenerations() const noexcept { return regenerations_; }
  uint32_t table_steps() const noexcept { return mask_ + 1; }

 private:
  [[gnu::cold]] void redraw(uint64_t used) noexcept;
  void fill(uint8_t* p, uint32_t n) noexcept;  // n fresh uniform steps 1..255 at p
  uint8_t spare_step() noexcept;               // one more non-zero keystream byte

  uint8_t* steps_ = nullptr;  // the table (64-byte aligned, in buf_)
  uint32_t mask_ = 0;         // table steps - 1
  KeyPolicy policy_ = KeyPolicy::kRandom;
  uint64_t redraw_at_ = ~uint64_t{0};  // draws after which the older half is redrawn
  uint64_t regenerations_ = 0;
  uint8_t spare_[64] = {};  // keystream bytes that replace zero bytes of a half
  uint32_t spare_pos_ = sizeof spare_;
  std::unique_ptr<uint8_t[]> buf_;
  EVP_CIPHER_CTX* ctx_ = nullptr;
};

}  // namespace rdmx::win
