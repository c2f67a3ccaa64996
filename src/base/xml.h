// Text for XML/SVG documents.
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// `s` with &, <, > and " replaced by their entities (element text and attribute values).
inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace sluice
