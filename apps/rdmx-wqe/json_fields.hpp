// Strict reading of request fields out of nlohmann::json objects: every number is checked for
// type and range, every key must be known (a typo is an error, not a silently ignored field).
// Problems are thrown as Reject{rc, message}; the tool turns them into one error line.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace rdmx::wqetool {

using Json = nlohmann::ordered_json;

// A rejected request: rc is "EINVAL", "ENOMEM" or "EOPNOTSUPP" (the verbs errno names).
struct Reject {
  const char* rc;
  std::string message;
};

[[noreturn]] inline void reject(const char* rc, std::string msg) {
  throw Reject{rc, std::move(msg)};
}

class Fields {
 public:
  Fields(const Json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) reject("EINVAL", where_ + ": expected a JSON object");
  }

  bool has(const char* key) const { return j_.contains(key); }
  const std::string& where() const { return where_; }

  // The value of `key`, or nullptr when absent. Marks the key as known.
  const Json* get(const char* key) {
    used_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  // An unsigned integer <= max: a JSON number, or a string "0x..." / decimal.
  uint64_t u64(const char* key, uint64_t max) {
    const Json* v = get(key);
    if (!v) reject("EINVAL", where_ + ": missing field \"" + key + "\"");
    return number(*v, key, max);
  }
  uint64_t u64_or(const char* key, uint64_t max, uint64_t def) {
    return has(key) ? u64(key, max) : (get(key), def);
  }
  bool flag(const char* key, bool def) {
    const Json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) reject("EINVAL", where_ + ": \"" + key + "\" must be true or false");
    return v->get<bool>();
  }
  std::string str(const char* key) {
    const Json* v = get(key);
    if (!v) reject("EINVAL", where_ + ": missing field \"" + key + "\"");
    if (!v->is_string()) reject("EINVAL", where_ + ": \"" + key + "\" must be a string");
    return v->get<std::string>();
  }
  const Json& array(const char* key) {
    const Json* v = get(key);
    if (!v) reject("EINVAL", where_ + ": missing field \"" + key + "\"");
    if (!v->is_array()) reject("EINVAL", where_ + ": \"" + key + "\" must be an array");
    return *v;
  }
  // Rejects keys that were never asked for.
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!used_.count(it.key())) reject("EINVAL", where_ + ": unknown field \"" + it.key() + "\"");
    }
  }

  uint64_t number(const Json& v, const std::string& key, uint64_t max) const {
    uint64_t x = 0;
    if (v.is_number_unsigned()) {
      x = v.get<uint64_t>();
    } else if (v.is_number_integer()) {
      reject("EINVAL", where_ + ": \"" + key + "\" must not be negative");
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (!parse_uint(s, x))
        reject("EINVAL", where_ + ": \"" + key + "\" is not an unsigned integer: \"" + s + "\"");
    } else {
      reject("EINVAL", where_ + ": \"" + key + "\" must be an unsigned integer");
    }
    if (x > max)
      reject("EINVAL", where_ + ": \"" + key + "\" = " + std::to_string(x) + " exceeds " +
                           std::to_string(max));
    return x;
  }

  static bool parse_uint(const std::string& s, uint64_t& out) {
    size_t i = 0;
    unsigned base = 10;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
      base = 16;
      i = 2;
    }
    if (i >= s.size()) return false;
    uint64_t x = 0;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      unsigned d;
      if (c >= '0' && c <= '9') {
        d = unsigned(c - '0');
      } else if (base == 16 && c >= 'a' && c <= 'f') {
        d = unsigned(c - 'a' + 10);
      } else if (base == 16 && c >= 'A' && c <= 'F') {
        d = unsigned(c - 'A' + 10);
      } else {
        return false;
      }
      if (x > (UINT64_MAX - d) / base) return false;
      x = x * base + d;
    }
    out = x;
    return true;
  }

 private:
  const Json& j_;
  std::string where_;
  std::set<std::string> used_;
};

}  // namespace rdmx::wqetool
