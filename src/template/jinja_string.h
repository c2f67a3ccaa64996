// Python-compatible text helpers for the chat-template interpreter: strings are UTF-8 bytes,
// but Python's str operations (len, slicing, strip, upper, repr) work on code points, so
// these helpers decode on demand. Invalid UTF-8 bytes decode to U+DC80..U+DCFF (Python's
// "surrogateescape") and encode back to the same byte, so any byte string round-trips.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/xml.h"  // html_escape (Jinja's escape filter)

namespace sluice::jinja {

bool is_ascii(std::string_view s);
// Number of code points.
size_t utf8_length(std::string_view s);
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);
std::string utf8_encode(const uint32_t* cps, size_t n);
// Decodes one code point at s[i], advancing i.
uint32_t utf8_next(std::string_view s, size_t& i);

// Python's str.isspace() / str.isalpha() / isdigit / isalnum per code point (isalpha is an
// approximation outside Latin, Greek and Cyrillic: every other non-ASCII non-space code point
// above U+00FF counts as a letter).
bool py_isspace(uint32_t cp);
bool py_isalpha(uint32_t cp);
bool py_isdigit(uint32_t cp);
bool py_is_cased_lower(uint32_t cp);
bool py_is_cased_upper(uint32_t cp);
// Simple (one code point) Unicode case mapping; py_lower/py_upper add the common multi-code-
// point cases (ß -> SS, İ -> i̇). Other full mappings (ŉ, ǰ, ligatures) stay unchanged.
uint32_t py_to_lower(uint32_t cp);
uint32_t py_to_upper(uint32_t cp);

std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_swapcase(std::string_view s);
// str.title(): a letter following a cased letter is lowered, any other letter is uppered.
std::string py_title(std::string_view s);
// str.capitalize(): first code point upper, the rest lower.
std::string py_capitalize(std::string_view s);

// str.strip/lstrip/rstrip: `chars` null strips Python whitespace, else any code point in it.
enum class StripSide { kLeft, kRight, kBoth };
std::string_view py_strip(std::string_view s, const std::string* chars, StripSide side);

// Substring search in linear time even for long, repetitive needles (KMP), so searching a
// huge template string stays proportional to its size. npos when absent.
size_t find_substr(std::string_view hay, std::string_view needle, size_t from = 0);
// Last occurrence starting at or before `before_or_at` (npos: anywhere).
size_t rfind_substr(std::string_view hay, std::string_view needle,
                    size_t before_or_at = std::string_view::npos);

// str.splitlines() line boundaries (\n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029).
std::vector<std::string_view> py_splitlines(std::string_view s, bool keepends);

// Python repr() of a str: quotes chosen as Python does, non-printables escaped.
void append_py_repr(std::string& out, std::string_view s);
// json.dumps of a str (ensure_ascii escapes every non-ASCII code point as \uXXXX).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);
// Python repr() of a float: shortest round-trip digits, '1e+16' / '1e-05' / '3.0'.
void append_py_float(std::string& out, double d);

}  // namespace sluice::jinja
