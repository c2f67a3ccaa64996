// Checks on a JSON string's decoded value that no byte grammar can express, run by the matcher
// on the string's text as it grows (grammar.h: "checked rules"). Today one: a host name's
// total length (253) and the IDNA2008 validity of its A-labels ("xn--" + Punycode: the
// decoded Unicode must be a valid U-label, with the contextual rules of RFC 5892), which
// libidn2 decides. The LDH syntax of every label stays in the grammar (json_schema_formats.h).
//
//   text so far          prefix_ok                      complete_ok
//   "xn--X."             no: "xn--X" is no Punycode     -
//   "xn--ll-0ea"         yes (the label is still open)  yes (l·l: MIDDLE DOT between l's)
//   "a" * 63 + "." ...   yes while 253 can still hold   no past 253 characters
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/expr.h"

namespace sluice::grammar {

// The longest text a check allows (a host name's 253 characters).
inline constexpr size_t kMaxCheckedLength = 253;

// The decoded value of the start of a JSON string's contents (the bytes after the opening
// quote, escapes as JSON writes them), appended to `out`. Returns how many bytes of `raw` were
// decoded: fewer than raw.size() when it ends inside an escape (that character is pending).
// Bytes that are not valid JSON string contents are copied as they are (the grammar has
// refused them already).
size_t json_unescape_prefix(std::string_view raw, std::string& out);

// Decides StringCheck's on decoded text, remembering the verdicts on labels (one per matcher:
// not thread-safe). The text is given as its total length and its `tail`: the text from the
// start of a label on, every label before which has been found valid already.
class StringChecker {
 public:
  // The text (with one more character pending when `pending`) can still become a valid value:
  // every finished label is valid and the shortest completion fits the length.
  bool prefix_ok(StringCheck c, std::string_view tail, size_t length, bool pending);
  // The text is a valid value as it is.
  bool complete_ok(StringCheck c, std::string_view tail, size_t length);

 private:
  bool label_ok(std::string_view label);
  std::unordered_map<std::string, bool> labels_;
  std::string key_;  // label_ok scratch: the label lowercased
};

// A whole host name's length and A-labels (the LDH syntax is the format regex's).
bool hostname_idna_ok(std::string_view host);

}  // namespace sluice::grammar
