// rdmx-wqe: verbs-shaped work requests -> the exact mlx5 WQE bytes, and WQE bytes -> named
// fields. Both directions go through lib/mlx5/prm (the builders and the decoder the hot
// path and the emulated device use) and the SqWriter of lib/mlx5; nothing here
// writes or parses a WQE field by itself. Setup-path code: allocates, may throw internally.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rdmx::wqetool {

// One output line of the tool (no trailing newline) and whether the request was accepted.
struct LineResult {
  bool ok = false;
  std::string text;
};

// Encodes one request line (a JSON object, see `rdmx-wqe encode --help`) to one JSON line:
// {"rc":0,"sq_pi_after":N,"wqebbs":[...],"doorbell_record":N} or {"rc":"E...","error":"..."}.
LineResult encode_line(std::string_view line);

// Decodes a list of WQEBBs given as hex strings (each a multiple of 128 hex digits), laid out
// in ring order from the first WQE's first WQEBB. JSON output, or with `pretty` an annotated
// table. Never reads past the bytes it was given, whatever they say.
LineResult decode_hex(const std::vector<std::string>& hex, bool pretty);

// Decodes one input line: a JSON array of hex strings, or an encode output object (its
// "wqebbs" are decoded; an error object is passed through as an error).
LineResult decode_line(std::string_view line, bool pretty);

// Help texts.
std::string_view usage_text();
std::string_view encode_help_text();
std::string_view decode_help_text();
std::string_view exec_help_text();

// Lower-case hex of `n` bytes.
std::string to_hex(const uint8_t* p, size_t n);
// Parses hex (upper or lower case, no separators); false on odd length or a non-hex digit.
bool from_hex(std::string_view s, std::vector<uint8_t>& out);

}  // namespace rdmx::wqetool
