// rdmafwd's options: one table (options()) drives getopt_long (parse_params), the usage text
// (usage_text(): --help, hence the man page), and the prompt's `set NAME VALUE` and `show config`
// (cmdline.cpp). An option is described once, here and in params.cpp's table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "rdmafwd.hpp"

namespace rdmafwd {

// What an option's value is.
enum class ArgKind : uint8_t {
  kFlag,     // no value: sets its bool field to OptionDef::flag_value
  kNumber,   // an unsigned decimal integer in [lo, hi], without leading zeros
  kSeconds,  // a non-negative number of seconds
  kText,     // a non-empty word
  kCustom,   // parsed by OptionDef::parse
  kHelp,     // -h, --help
};

// The Params field an option sets (none: its parse function sets what it must).
using OptionField = std::variant<std::monostate, bool Params::*, uint32_t Params::*,
                                 uint64_t Params::*, double Params::*, std::string Params::*>;

struct OptionDef;
// Parses `v` into `p`; returns what was wrong ("" when fine). `name` as the user spelled it.
using OptionParse = std::string (*)(const OptionDef& o, const std::string& name,
                                    const std::string& v, Params& p);

struct OptionDef {
  const char* name;              // the long name, without "--"
  char short_name;               // 0: none
  const char* metavar;           // the value's name in the usage ("N", "SEC"); nullptr: none
  ArgKind kind;                  //
  OptionField field;             // what it sets (and what `show config` prints)
  uint64_t lo = 0, hi = 0;       // kNumber: the range
  bool settable = false;         // the prompt's `set` may change it (while stopped)
  const char* help = "";         // usage lines ("\n" separated, indented when printed)
  OptionParse parse = nullptr;   // kCustom (and extra checks of a kNumber, after the range)
  const char* alias = nullptr;   // another long name getopt_long takes (testpmd's spelling)
  const char* prompt = nullptr;  // another name `set` takes ("pages" for --pages-per-io)
  bool flag_value = true;        // kFlag: the value it sets
  std::string (*show)(const Params&) = nullptr;  // `show config`'s value when not the field's
};

// The table, in usage order.
std::span<const OptionDef> options() noexcept;

// The option named `name` (long name, alias or prompt name, without "--"); nullptr if none.
const OptionDef* find_option(std::string_view name) noexcept;

// Applies one option's value to `p` (range, choices and the option's own parse); returns what
// was wrong ("" when fine). `name` as the user spelled it, for messages.
std::string apply_option(const OptionDef& o, const std::string& name, const std::string& v,
                         Params& p);

// The option's current value in `p`, as `show config` prints it.
std::string option_value(const OptionDef& o, const Params& p);

// The options `set` takes ("fwd, burst, pages-per-io"), for messages.
std::string settable_names(const char* sep);

}  // namespace rdmafwd
