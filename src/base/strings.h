// Small text helpers that several modules need.
#pragma once

#include <string>
#include <string_view>
#include <system_error>

namespace sluice {

// ASCII case-insensitive equality (HTTP header names, tokens); bytes >= 0x80 compare exactly.
inline bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x + ('a' - 'A'));
    if (y >= 'A' && y <= 'Z') y = char(y + ('a' - 'A'));
    if (x != y) return false;
  }
  return true;
}

// The message for an errno value ("Connection refused"); thread-safe, unlike strerror.
inline std::string errno_text(int error) {
  return std::system_category().message(error);
}

}  // namespace sluice
