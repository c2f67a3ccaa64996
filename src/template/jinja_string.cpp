#include "template/jinja_string.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/unicode.h"
#include "base/unicode_data.h"

namespace sluice::jinja {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int n = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 1, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3, cp = c & 0x07, min = 0x10000;
  }
  if (n == 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return 0xDC00 + c;  // surrogateescape
  }
  for (int k = 1; k <= n; ++k) {
    unsigned char cc = byte(i + k);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return 0xDC00 + c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xDC00 + c;
  }
  i += n + 1;
  return cp;
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    utf8_next(s, i);
    ++n;
  }
  return n;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
    out += static_cast<char>(cp - 0xDC00);  // surrogateescape byte
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const uint32_t* cps, size_t n) {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) utf8_append(out, cps[i]);
  return out;
}

bool py_isspace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool py_isdigit(uint32_t cp) {
  return (cp >= '0' && cp <= '9') || (cp >= 0xFF10 && cp <= 0xFF19) || cp == 0xB2 || cp == 0xB3 ||
         cp == 0xB9;
}

namespace {

// Uppercase as the inverse of the Unicode lowercase table (unicode_data.cpp, generated from
// Python's unicodedata), built once: lowercase -> the smallest code point lowering to it, so
// 'k' maps to 'K' rather than the Kelvin sign.
const std::vector<std::pair<uint32_t, uint32_t>>& upper_table() {
  static const std::vector<std::pair<uint32_t, uint32_t>> table = [] {
    std::vector<std::pair<uint32_t, uint32_t>> t;
    for (size_t i = 0; i < unicode_data::kLowerCount; ++i) {
      const unicode_data::CaseRange& r = unicode_data::kLower[i];
      for (uint32_t cp = r.first; cp <= r.last; cp += static_cast<uint32_t>(r.step)) {
        t.emplace_back(static_cast<uint32_t>(static_cast<int64_t>(cp) + r.delta), cp);
      }
    }
    std::sort(t.begin(), t.end());  // by lowercase, then smallest uppercase first
    t.erase(std::unique(t.begin(), t.end(),
                        [](const auto& x, const auto& y) { return x.first == y.first; }),
            t.end());
    return t;
  }();
  return table;
}

}  // namespace

uint32_t py_to_lower(uint32_t cp) {
  return unicode::to_lower(cp);
}

uint32_t py_to_upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  switch (cp) {  // lowercase letters whose uppercase lowers to something else
    case 0x00B5:
      return 0x039C;  // µ
    case 0x0131:
      return 'I';  // dotless i
    case 0x017F:
      return 'S';  // long s
    case 0x0345:
      return 0x0399;
    case 0x03C2:
      return 0x03A3;  // final sigma
    case 0x03D0:
      return 0x0392;
    case 0x03D1:
      return 0x0398;
    case 0x03D5:
      return 0x03A6;
    case 0x03D6:
      return 0x03A0;
    case 0x03F0:
      return 0x039A;
    case 0x03F1:
      return 0x03A1;
    case 0x03F5:
      return 0x0395;
    case 0x1E9B:
      return 0x1E60;
    case 0x1FBE:
      return 0x0399;
    case 0x01C5:
    case 0x01C8:
    case 0x01CB:
    case 0x01F2:
      return cp - 1;  // titlecase digraphs
    case 0x1C80:
      return 0x0412;  // historic Cyrillic variants
    case 0x1C81:
      return 0x0414;
    case 0x1C82:
      return 0x041E;
    case 0x1C83:
      return 0x0421;
    case 0x1C84:
    case 0x1C85:
      return 0x0422;
    case 0x1C86:
      return 0x042A;
    case 0x1C87:
      return 0x0462;
    case 0x1C88:
      return 0xA64A;
    default:
      break;
  }
  const auto& t = upper_table();
  auto it = std::lower_bound(t.begin(), t.end(), std::make_pair(cp, uint32_t{0}));
  return (it != t.end() && it->first == cp) ? it->second : cp;
}

bool py_is_cased_upper(uint32_t cp) {
  return py_to_lower(cp) != cp;
}
bool py_is_cased_lower(uint32_t cp) {
  return py_to_upper(cp) != cp || cp == 0xDF;
}

bool py_isalpha(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (cp < 0x100)
    return cp >= 0xC0 ? (cp != 0xD7 && cp != 0xF7) : (cp == 0xAA || cp == 0xB5 || cp == 0xBA);
  if (py_isspace(cp)) return false;
  // General punctuation, symbols, CJK punctuation, surrogates/private use, full-width ASCII
  // punctuation: not letters. Everything else above U+00FF is treated as a letter.
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
      (cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFF00 && cp <= 0xFF20) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF)) {
    return false;
  }
  return true;
}

namespace {

template <class F>
std::string map_code_points(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) utf8_append(out, f(utf8_next(s, i)));
  return out;
}

bool is_cased(uint32_t cp) {
  return py_is_cased_upper(cp) || py_is_cased_lower(cp);
}

}  // namespace

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    if (cp == 0x0130) {  // İ lowers to i + combining dot above
      out += "i\xcc\x87";
    } else {
      utf8_append(out, py_to_lower(cp));
    }
  }
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    if (cp == 0x00DF) {  // ß uppers to SS
      out += "SS";
    } else {
      utf8_append(out, py_to_upper(cp));
    }
  }
  return out;
}
std::string py_swapcase(std::string_view s) {
  return map_code_points(s, [](uint32_t cp) {
    uint32_t lo = py_to_lower(cp);
    return lo != cp ? lo : py_to_upper(cp);
  });
}

std::string py_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    utf8_append(out, prev_cased ? py_to_lower(cp) : py_to_upper(cp));
    prev_cased = is_cased(cp);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    utf8_append(out, first ? py_to_upper(cp) : py_to_lower(cp));
    first = false;
  }
  return out;
}

std::string_view py_strip(std::string_view s, const std::string* chars, StripSide side) {
  std::vector<uint32_t> set;
  if (chars) {
    set = utf8_decode(*chars);
    std::sort(set.begin(), set.end());
  }
  auto strippable = [&](uint32_t cp) {
    return chars ? std::binary_search(set.begin(), set.end(), cp) : py_isspace(cp);
  };
  size_t begin = 0;
  size_t end = s.size();
  if (side != StripSide::kRight) {
    while (begin < end) {
      size_t next = begin;
      if (!strippable(utf8_next(s, next))) break;
      begin = next;
    }
  }
  if (side != StripSide::kLeft) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 &&
             end - start < 4) {
        --start;
      }
      size_t probe = start;
      uint32_t cp = utf8_next(s, probe);
      if (probe != end) {  // not a clean code point ending at `end`: a stray byte
        start = end - 1;
        probe = start;
        cp = utf8_next(s, probe);
      }
      if (!strippable(cp)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

namespace {

constexpr size_t kShortNeedle = 32;  // below this, the library search's worst case is fine

// Knuth-Morris-Pratt over random-access ranges: O(|hay| + |needle|) in the worst case
// (std::boyer_moore_searcher degrades quadratically on repetitive needles).
template <class It>
It kmp_search(It hay_begin, It hay_end, It needle_begin, It needle_end) {
  const size_t m = static_cast<size_t>(needle_end - needle_begin);
  std::vector<size_t> fail(m, 0);  // fail[i]: length of the longest proper border of needle[0..i]
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k > 0 && needle_begin[i] != needle_begin[k]) k = fail[k - 1];
    if (needle_begin[i] == needle_begin[k]) ++k;
    fail[i] = k;
  }
  size_t k = 0;
  for (It it = hay_begin; it != hay_end; ++it) {
    while (k > 0 && *it != needle_begin[k]) k = fail[k - 1];
    if (*it == needle_begin[k]) ++k;
    if (k == m) return it - static_cast<ptrdiff_t>(m - 1);
  }
  return hay_end;
}

}  // namespace

size_t find_substr(std::string_view hay, std::string_view needle, size_t from) {
  if (from > hay.size()) return std::string_view::npos;
  if (needle.size() <= kShortNeedle) return hay.find(needle, from);
  auto it = kmp_search(hay.begin() + static_cast<ptrdiff_t>(from), hay.end(), needle.begin(),
                       needle.end());
  return it == hay.end() ? std::string_view::npos : static_cast<size_t>(it - hay.begin());
}

size_t rfind_substr(std::string_view hay, std::string_view needle, size_t before_or_at) {
  if (needle.size() > hay.size()) return std::string_view::npos;
  size_t last_start = std::min(before_or_at, hay.size() - needle.size());
  if (needle.size() <= kShortNeedle) return hay.rfind(needle, last_start);
  // The first match of the reversed needle in the reversed text [0, last_start + needle.size()).
  auto begin = hay.rbegin() + static_cast<ptrdiff_t>(hay.size() - (last_start + needle.size()));
  auto it = kmp_search(begin, hay.rend(), needle.rbegin(), needle.rend());
  if (it == hay.rend()) return std::string_view::npos;
  return hay.size() - static_cast<size_t>(it - hay.rbegin()) - needle.size();
}

std::vector<std::string_view> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t at = i;
    uint32_t cp = utf8_next(s, i);
    bool boundary = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                    cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!boundary) continue;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    lines.push_back(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

namespace {

bool py_isprintable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB)) {
    return false;
  }
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E)
    return false;
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;  // surrogates, private use
  if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE) return false;
  if (cp >= 0xE0000) return false;  // tags, variation selectors supplement, private use planes
  return true;
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", digits, v);
  out += prefix;
  out += buf;
}

}  // namespace

void append_py_repr(std::string& out, std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (py_isprintable(cp)) {
      utf8_append(out, cp);
    } else if (cp < 0x100) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp < 0x10000) {
      append_hex(out, "\\u", cp, 4);
    } else {
      append_hex(out, "\\U", cp, 8);
    }
  }
  out += quote;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      uint32_t cp = utf8_next(s, i);
      if (!ensure_ascii) {
        utf8_append(out, cp);
      } else if (cp < 0x10000) {
        append_hex(out, "\\u", cp, 4);
      } else {
        uint32_t v = cp - 0x10000;
        append_hex(out, "\\u", 0xD800 + (v >> 10), 4);
        append_hex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          append_hex(out, "\\u", c, 4);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append_py_float(std::string& out, double d) {
  if (std::isnan(d)) {
    out += "nan";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  // sci looks like "-1.2345e+06": split sign, digits and decimal exponent.
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  if (negative) out += '-';
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out += '.';
      out.append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
    return;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  out += ebuf;
}

}  // namespace sluice::jinja
