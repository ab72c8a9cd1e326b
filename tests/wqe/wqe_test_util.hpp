// Helpers for the rdmx-wqe tests: expected WQEBBs are written one DS (16 bytes) per string,
// as the layout tables read; missing DS at the end of a WQEBB are zero.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>

namespace rdmx::wqetest {

inline const char* const kZeroDs = "00000000 00000000 00000000 00000000";

// One WQEBB from up to four DS lines ("xxxxxxxx xxxxxxxx xxxxxxxx xxxxxxxx").
inline std::string bb(std::initializer_list<std::string> ds_lines) {
  std::string s;
  for (const std::string& l : ds_lines)
    for (char c : l)
      if (c != ' ') s += c;
  while (s.size() < 128) s += '0';
  return s;
}

// A 16-byte KLM / data segment line: BE32 byte_count, BE32 key, BE64 address.
inline std::string seg16(uint32_t count, uint32_t key, uint64_t addr) {
  char b[48];
  std::snprintf(b, sizeof b, "%08x %08x %016llx", count, key,
                static_cast<unsigned long long>(addr));
  return b;
}

inline std::string hex_of(const uint8_t* p, size_t n) {
  static const char kD[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kD[p[i] >> 4];
    s += kD[p[i] & 15];
  }
  return s;
}

}  // namespace rdmx::wqetest
