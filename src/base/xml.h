// Text for HTML/XML/SVG documents.
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// `s` with & < > ' " replaced by entities, as Python's MarkupSafe does (Jinja's `escape`):
// &amp; &lt; &gt; &#39; &#34;, valid in HTML and XML text and attribute values.
inline std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace sluice
