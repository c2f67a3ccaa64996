#include "gguf/value.h"

#include <cstdio>
#include <string>

namespace sluice {

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[kGgufTypeCount] = {
      "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
      "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) < kGgufTypeCount ? kNames[uint32_t(t)] : std::string_view("unknown");
}

GgufArray make_string_array(const std::vector<std::string>& items) {
  return make_array(GgufType::STRING, items);
}

namespace {

std::string quote(const std::string& s, size_t max_len) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  if (s.size() > max_len) out += "...";
  out += "\"";
  return out;
}

}  // namespace

std::string format_value(const GgufValue& v, size_t max_items) {
  struct Visitor {
    size_t max_items;
    std::string operator()(const std::string& s) const { return quote(s, 60); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(float f) const { return operator()(double(f)); }
    std::string operator()(double d) const {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", d);
      return buf;
    }
    std::string operator()(const GgufArray& a) const {
      std::string out = "[";
      for (size_t i = 0; i < a.items.size() && i < max_items; ++i) {
        if (i) out += ", ";
        out += format_value(a.items[i], max_items);
      }
      if (a.items.size() > max_items) out += ", ... (" + std::to_string(a.items.size()) + " items)";
      return out + "]";
    }
    std::string operator()(uint8_t x) const { return std::to_string(x); }
    std::string operator()(int8_t x) const { return std::to_string(x); }
    std::string operator()(uint16_t x) const { return std::to_string(x); }
    std::string operator()(int16_t x) const { return std::to_string(x); }
    std::string operator()(uint32_t x) const { return std::to_string(x); }
    std::string operator()(int32_t x) const { return std::to_string(x); }
    std::string operator()(uint64_t x) const { return std::to_string(x); }
    std::string operator()(int64_t x) const { return std::to_string(x); }
  };
  return std::visit(Visitor{max_items}, v.v);
}

}  // namespace sluice
