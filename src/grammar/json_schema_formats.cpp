#include "grammar/json_schema_formats.h"

#include <cstdio>

namespace sluice::grammar {
namespace {

std::string two(int v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02d", v);
  return buf;
}

// YYYY-MM-DD with real month lengths and Gregorian leap years.
std::string date_re() {
  const std::string y = "[0-9]{4}";
  // Leap years: YY00 with YY a multiple of 4, or YYNN with NN a non-zero multiple of 4.
  const std::string mult4 = "(?:0[48]|[2468][048]|[13579][26])";
  const std::string leap = "(?:[0-9]{2}" + mult4 + "|(?:0[048]|[2468][048]|[13579][26])00)";
  return "(?:" + y + "-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|" + y +
         "-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|" + y + "-02-(?:0[1-9]|1[0-9]|2[0-8])|" + leap +
         "-02-29)";
}

// HH:MM:SS[.frac] with an offset; :60 only where the time is 23:59 UTC.
std::string time_re() {
  const std::string frac = "(?:\\.[0-9]+)?";
  const std::string offset = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  std::string out = "(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" + frac + offset;
  // Leap seconds: local time L with offset +O has UTC L - O = 23:59, so O = L + 1 minute;
  // with -O, O = 23:59 - L (all modulo a day).
  for (int h = 0; h < 24; ++h) {
    out += "|" + two(h) + ":(?:";
    for (int m = 0; m < 60; ++m) {
      const int local = h * 60 + m;
      const int plus = (local + 1) % 1440;
      const int minus = (1439 - local + 1440) % 1440;
      if (m > 0) out += "|";
      out += two(m) + ":60" + frac + "(?:\\+" + two(plus / 60) + ":" + two(plus % 60) + "|-" +
             two(minus / 60) + ":" + two(minus % 60);
      if (local == 1439) out += "|[Zz]";
      out += ")";
    }
    out += ")";
  }
  return out + ")";
}

std::string duration_re() {
  const std::string d = "[0-9]+";
  const std::string second = d + "S";
  const std::string minute = d + "M(?:" + second + ")?";
  const std::string hour = d + "H(?:" + minute + ")?";
  const std::string time = "T(?:" + hour + "|" + minute + "|" + second + ")";
  const std::string day = d + "D";
  const std::string month = d + "M(?:" + day + ")?";
  const std::string year = d + "Y(?:" + month + ")?";
  const std::string date = "(?:" + day + "|" + month + "|" + year + ")(?:" + time + ")?";
  return "P(?:" + date + "|" + time + "|" + d + "W)";
}

std::string ipv4_re() {
  const std::string octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
  return octet + "\\." + octet + "\\." + octet + "\\." + octet;
}

// RFC 3986 IPv6address.
std::string ipv6_re() {
  const std::string h16 = "[0-9A-Fa-f]{1,4}";
  const std::string ls32 = "(?:" + h16 + ":" + h16 + "|" + ipv4_re() + ")";
  auto rep = [&](int n) {  // n times "h16:"
    return n == 0 ? std::string() : "(?:" + h16 + ":){" + std::to_string(n) + "}";
  };
  auto upto = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    return n < 0 ? std::string() : "(?:(?:" + h16 + ":){0," + std::to_string(n) + "}" + h16 + ")?";
  };
  std::vector<std::string> alts = {
      rep(6) + ls32,
      "::" + rep(5) + ls32,
      upto(0) + "::" + rep(4) + ls32,
      upto(1) + "::" + rep(3) + ls32,
      upto(2) + "::" + rep(2) + ls32,
      upto(3) + "::" + h16 + ":" + ls32,
      upto(4) + "::" + ls32,
      upto(5) + "::" + h16,
      upto(6) + "::",
  };
  std::string out = "(?:";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? "|" : "") + alts[i];
  return out + ")";
}

// One DNS label: letters, digits, inner hyphens, 1-63 characters; "--" in positions 3-4 only
// after "xn" (an A-label).
std::string label_re() {
  const std::string ld = "[A-Za-z0-9]";
  const std::string ldh = "[A-Za-z0-9-]";
  const std::string c34 = "(?:" + ld + ld + "|-" + ld + ")";  // positions 3-4, not "--"
  const std::string c34_open = "(?:" + ld + ldh + "|-" + ld + ")";
  return "(?:" + ld + "|" + ld + ld + "|" + ld + ldh + ld +  // 1-3 characters
         "|" + ld + ldh + c34 +                              // 4
         "|" + ld + ldh + c34_open + ldh + "{0,58}" + ld +   // 5-63
         "|[Xx][Nn]--" + ldh + "{0,58}" + ld + ")";          // A-labels
}

std::string hostname_re() {
  return label_re() + "(?:\\." + label_re() + ")*";
}

std::string email_re() {
  const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
  const std::string dot_atom = atext + "+(?:\\." + atext + "+)*";
  const std::string quoted = "\"(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\\x20-\\x7E])*\"";
  const std::string domain =
      "(?:" + hostname_re() + "|\\[" + ipv4_re() + "\\]|\\[IPv6:" + ipv6_re() + "\\])";
  return "(?:" + dot_atom + "|" + quoted + ")@" + domain;
}

std::string uri_re() {
  const std::string unreserved = "A-Za-z0-9\\-._~";
  const std::string sub_delims = "!$&'()*+,;=";
  const std::string pct = "%[0-9A-Fa-f]{2}";
  const std::string pchar = "(?:[" + unreserved + sub_delims + ":@]|" + pct + ")";
  const std::string segment = pchar + "*";
  const std::string segment_nz = pchar + "+";
  const std::string userinfo = "(?:[" + unreserved + sub_delims + ":]|" + pct + ")*";
  const std::string reg_name = "(?:[" + unreserved + sub_delims + "]|" + pct + ")*";
  const std::string ip_future = "[Vv][0-9A-Fa-f]+\\.[" + unreserved + sub_delims + ":]+";
  const std::string host =
      "(?:\\[(?:" + ipv6_re() + "|" + ip_future + ")\\]|" + ipv4_re() + "|" + reg_name + ")";
  const std::string authority = "(?:" + userinfo + "@)?" + host + "(?::[0-9]*)?";
  const std::string hier = "(?://" + authority + "(?:/" + segment + ")*|/(?:" + segment_nz +
                           "(?:/" + segment + ")*)?|" + segment_nz + "(?:/" + segment + ")*|)";
  const std::string qf = "(?:" + pchar + "|[/?])*";
  return "[A-Za-z][A-Za-z0-9+\\-.]*:" + hier + "(?:\\?" + qf + ")?(?:#" + qf + ")?";
}

std::string uuid_re() {
  const std::string h = "[0-9A-Fa-f]";
  return h + "{8}-" + h + "{4}-" + h + "{4}-" + h + "{4}-" + h + "{12}";
}

}  // namespace

const std::vector<std::string>& enforced_formats() {
  static const std::vector<std::string> kFormats = {
      "date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"};
  return kFormats;
}

StringCheck format_check(std::string_view format) {
  return format == "hostname" ? StringCheck::kHostname : StringCheck::kNone;
}

std::optional<std::string> format_regex(std::string_view format) {
  std::string re;
  if (format == "date") {
    re = date_re();
  } else if (format == "time") {
    re = time_re();
  } else if (format == "date-time") {
    re = date_re() + "[Tt]" + time_re();
  } else if (format == "duration") {
    re = duration_re();
  } else if (format == "email") {
    re = email_re();
  } else if (format == "hostname") {
    re = hostname_re();
  } else if (format == "ipv4") {
    re = ipv4_re();
  } else if (format == "ipv6") {
    re = ipv6_re();
  } else if (format == "uuid") {
    re = uuid_re();
  } else if (format == "uri") {
    re = uri_re();
  } else {
    return std::nullopt;
  }
  return "^(?:" + re + ")$";
}

}  // namespace sluice::grammar
