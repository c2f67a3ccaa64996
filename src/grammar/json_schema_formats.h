// JSON Schema `format` as the strings a model may write: each supported format is an anchored
// regular expression (regex.h syntax) over the decoded string, compiled like `pattern` (and
// checked like it by the validator). 2020-12 makes `format` an annotation; structured output
// enforces it, as OpenAI's strict mode, XGrammar and llama.cpp do.
//
//   date, time, date-time   RFC 3339 full-date / full-time / date-time: month lengths, leap
//                           years (Gregorian: 2000 and 2400 are, 2100 is not), leap seconds only
//                           where the time is 23:59 UTC (so 23:59:60+00:00 and 01:29:60+01:30),
//                           case-insensitive T and Z
//   duration                RFC 3339 Appendix A (P1Y2M3DT4H5M6S, P2W; no fractions, no signs)
//   email                   RFC 5321 Mailbox: dot-atom or quoted local part; a host name, or an
//                           address literal [IPv4] / [IPv6:...]
//   hostname                RFC 1123 labels of letters, digits and inner hyphens, 1-63 each;
//                           hyphens in positions 3-4 only for "xn--" A-labels; 253 in all;
//                           A-labels valid under IDNA2008 (checked, below)
//   ipv4, ipv6              dotted quad without leading zeros; RFC 4291 text forms with "::" and
//                           an embedded dotted quad
//   uuid                    RFC 4122 8-4-4-4-12 hex digits, any case
//   uri                     RFC 3986 absolute URI (scheme, authority or path, query, fragment)
//
// What no regex says is checked on the decoded text by the matcher (format_check,
// string_checks.h): a host name's total length (253 characters) and its A-labels' IDNA2008
// validity (Punycode that decodes to a valid U-label: code points, leading marks, the
// contextual rules of RFC 5892, bidi), by libidn2. An email's domain is not (idn-email is its
// own format).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/expr.h"

namespace sluice::grammar {

// The anchored regex of `format`, or nullopt for a format not enforced.
std::optional<std::string> format_regex(std::string_view format);

// The check `format` needs beside its regex (kNone for most).
StringCheck format_check(std::string_view format);

// The formats format_regex knows.
const std::vector<std::string>& enforced_formats();

}  // namespace sluice::grammar
