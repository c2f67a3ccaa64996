// Python string formatting: str.format() with the format-spec mini-language, and printf-style
// `fmt % args`. Field lookups in str.format go through the sandboxed get_attr/get_item.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "template/jinja_builtins.h"
#include "template/jinja_string.h"

namespace sluice::jinja {
namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;  // '<' '>' '^' '='
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int64_t width = -1;
  char grouping = 0;  // ',' or '_'
  int64_t precision = -1;
  char type = 0;
};

Result<Spec> parse_spec(std::string_view s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  size_t first_len = 0;
  if (!s.empty()) {
    size_t k = 0;
    utf8_next(s, k);
    first_len = k;
  }
  if (first_len && first_len < s.size() && is_align(s[first_len])) {
    spec.fill = std::string(s.substr(0, first_len));
    spec.align = s[first_len];
    i = first_len + 1;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') spec.alternate = true, ++i;
  if (i < s.size() && s[i] == '0') spec.zero = true, ++i;
  auto read_int = [&](int64_t* out) {
    int64_t v = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      v = std::min<int64_t>(v * 10 + (s[i++] - '0'), int64_t{1} << 40);
      any = true;
    }
    if (any) *out = v;
    return any;
  };
  read_int(&spec.width);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!read_int(&spec.precision)) return make_error("Format specifier missing precision");
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) return make_error("Invalid format specifier '", s, "'");
  return spec;
}

void group_digits(std::string& digits, char sep) {
  std::string out;
  size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % 3 == 0) out += sep;
    out += digits[i];
  }
  digits = out;
}

// Pads `body` (already signed) per align/width; '=' pads after the sign.
Result<std::string> pad(Interpreter& in, std::string sign, std::string body, const Spec& spec,
                        char default_align) {
  char align = spec.align ? spec.align : (spec.zero ? '=' : default_align);
  std::string fill = spec.align ? spec.fill : (spec.zero ? "0" : spec.fill);
  int64_t len = static_cast<int64_t>(utf8_length(sign) + utf8_length(body));
  if (spec.width <= len) return sign + body;
  SLUICE_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(spec.width) * fill.size()));
  int64_t marg = spec.width - len;
  auto fills = [&](int64_t n) {
    std::string f;
    for (int64_t k = 0; k < n; ++k) f += fill;
    return f;
  };
  switch (align) {
    case '<':
      return sign + body + fills(marg);
    case '^':
      return fills(marg / 2) + sign + body + fills(marg - marg / 2);
    case '=':
      return sign + fills(marg) + body;
    default:
      return fills(marg) + sign + body;
  }
}

std::string sign_of(bool negative, char sign) {
  if (negative) return "-";
  return sign == '+' ? "+" : sign == ' ' ? " " : "";
}

Result<std::string> format_int(Interpreter& in, int64_t v, const Spec& spec) {
  char type = spec.type ? spec.type : 'd';
  bool neg = v < 0;
  uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits;
  std::string prefix;
  char buf[80];
  switch (type) {
    case 'd':
    case 'n':
      std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(mag));
      break;
    case 'x':
      std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(mag)), prefix = "0x";
      break;
    case 'X':
      std::snprintf(buf, sizeof buf, "%llX", static_cast<unsigned long long>(mag)), prefix = "0X";
      break;
    case 'o':
      std::snprintf(buf, sizeof buf, "%llo", static_cast<unsigned long long>(mag)), prefix = "0o";
      break;
    case 'b': {
      std::string b;
      for (uint64_t m = mag; m; m >>= 1) b.insert(b.begin(), static_cast<char>('0' + (m & 1)));
      std::snprintf(buf, sizeof buf, "%s", b.empty() ? "0" : b.c_str());
      prefix = "0b";
      break;
    }
    case 'c': {
      std::string c;
      if (v < 0 || v > 0x10FFFF) return make_error("%c arg not in range(0x110000)");
      utf8_append(c, static_cast<uint32_t>(v));
      return pad(in, "", c, spec, '<');
    }
    default:
      return make_error("Unknown format code '", std::string(1, type),
                        "' for object of type 'int'");
  }
  digits = buf;
  if (spec.grouping) group_digits(digits, spec.grouping);
  return pad(in, sign_of(neg, spec.sign) + (spec.alternate ? prefix : ""), digits, spec, '>');
}

Result<std::string> format_float(Interpreter& in, double v, const Spec& spec) {
  char type = spec.type;
  bool neg = std::signbit(v) && !std::isnan(v);
  double mag = std::fabs(v);
  std::string body;
  if (std::isinf(mag) || std::isnan(mag)) {
    body = std::isnan(mag) ? "nan" : "inf";
    if (type == 'F' || type == 'E' || type == 'G') body = std::isnan(mag) ? "NAN" : "INF";
  } else if (!type && spec.precision < 0) {
    append_py_float(body, mag);
  } else {
    int64_t prec = spec.precision < 0 ? 6 : std::min<int64_t>(spec.precision, 1000);
    char conv = type ? type : 'g';
    std::string suffix;
    if (conv == '%') {
      mag *= 100;
      conv = 'f';
      suffix = "%";
    }
    if (conv == 'n') conv = 'g';
    if (conv != 'f' && conv != 'F' && conv != 'e' && conv != 'E' && conv != 'g' && conv != 'G') {
      return make_error("Unknown format code '", std::string(1, type),
                        "' for object of type 'float'");
    }
    std::vector<char> buf(static_cast<size_t>(prec) + 400);
    if (!type) {
      // No type with a precision: 'g'-like, but fixed notation keeps one fractional digit
      // and scientific notation starts at exponent p - 1 (Python's format spec rules).
      if (prec == 0) prec = 1;
      std::snprintf(buf.data(), buf.size(), "%.*e", static_cast<int>(prec - 1), mag);
      int exp10 = std::atoi(std::strchr(buf.data(), 'e') + 1);
      if (exp10 < -4 || exp10 >= prec - 1) {
        body = buf.data();  // strip zeros from the mantissa: 1.500e+05 -> 1.5e+05
        size_t e = body.find('e');
        std::string mant = body.substr(0, e);
        if (mant.find('.') != std::string::npos) {
          while (mant.back() == '0') mant.pop_back();
          if (mant.back() == '.') mant.pop_back();
        }
        body = mant + body.substr(e);
      } else {
        std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(prec - 1 - exp10), mag);
        body = buf.data();
        if (body.find('.') != std::string::npos) {
          while (body.back() == '0') body.pop_back();
          if (body.back() == '.') body += '0';
        } else {
          body += ".0";
        }
      }
    } else {
      std::string fmt = std::string("%") + (spec.alternate ? "#" : "") + ".*" + conv;
      std::snprintf(buf.data(), buf.size(), fmt.c_str(), static_cast<int>(prec), mag);
      body = buf.data();
    }
    body += suffix;
  }
  if (spec.grouping) {
    size_t end = body.find_first_not_of("0123456789");
    std::string int_part = body.substr(0, end);
    group_digits(int_part, spec.grouping);
    body = int_part + (end == std::string::npos ? "" : body.substr(end));
  }
  return pad(in, sign_of(neg, spec.sign), body, spec, '>');
}

// format(value, spec) for one replacement field.
Result<std::string> format_value(Interpreter& in, const Value& v, std::string_view spec_text) {
  if (spec_text.empty()) return to_string(in, v);
  SLUICE_ASSIGN_OR_RETURN(Spec spec, parse_spec(spec_text));
  if (v.is_string()) {
    if (spec.type && spec.type != 's') {
      return make_error("Unknown format code '", std::string(1, spec.type),
                        "' for object of type 'str'");
    }
    if (spec.sign != '-') return make_error("Sign not allowed in string format specifier");
    if (spec.alternate)
      return make_error("Alternate form (#) not allowed in string format specifier");
    if (spec.align == '=' || (spec.zero && !spec.align)) {
      return make_error("'=' alignment not allowed in string format specifier");
    }
    if (spec.grouping)
      return make_error("Cannot specify '", std::string(1, spec.grouping), "' with 's'.");
    std::string s = v.as_string();
    if (spec.precision >= 0 && static_cast<size_t>(spec.precision) < utf8_length(s)) {
      std::vector<uint32_t> cps = utf8_decode(s);
      s = utf8_encode(cps.data(), static_cast<size_t>(spec.precision));
    }
    return pad(in, "", s, spec, '<');
  }
  if (v.is_integral()) {
    char t = spec.type;
    if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G' || t == '%') {
      return format_float(in, static_cast<double>(v.as_int()), spec);
    }
    if (spec.precision >= 0) return make_error("Precision not allowed in integer format specifier");
    return format_int(in, v.as_int(), spec);
  }
  if (v.is_float()) return format_float(in, v.as_double(), spec);
  return make_error("unsupported format string passed to ", type_name(v), ".__format__");
}

// Resolves "0", "name", "0.attr", "name[key]" against the call's arguments.
// Field numbering state: "{}" and "{0}" cannot be mixed in one format string.
struct Numbering {
  size_t next = 0;
  bool automatic = false;
  bool manual = false;
};

Result<Value> resolve_field(Interpreter& in, std::string_view field, const CallArgs& args,
                            Numbering& numbering) {
  size_t end = field.find_first_of(".[");
  std::string_view head = field.substr(0, end);
  Value v;
  if (head.empty() || (head.find_first_not_of("0123456789") == std::string_view::npos)) {
    (head.empty() ? numbering.automatic : numbering.manual) = true;
    if (numbering.automatic && numbering.manual) {
      return make_error(
          "cannot switch from manual field specification to automatic field numbering");
    }
    size_t idx = numbering.next;
    if (head.empty()) {
      ++numbering.next;
    } else {
      idx = static_cast<size_t>(std::strtoull(std::string(head).c_str(), nullptr, 10));
    }
    if (idx >= args.args.size())
      return make_error("Replacement index ", idx, " out of range for positional args tuple");
    v = args.args[idx];
  } else {
    const Value* kw = args.kwarg(head);
    if (!kw) return make_error("'", head, "'");
    v = *kw;
  }
  size_t i = end;
  while (i != std::string_view::npos && i < field.size()) {
    if (field[i] == '.') {
      size_t next = field.find_first_of(".[", i + 1);
      std::string_view attr = field.substr(
          i + 1, next == std::string_view::npos ? std::string_view::npos : next - i - 1);
      if (attr.empty() || attr[0] == '_')
        return make_error("access to attribute '", attr, "' is unsafe");
      SLUICE_ASSIGN_OR_RETURN(v, get_attr(in, v, attr));
      i = next;
    } else {
      size_t close = field.find(']', i);
      if (close == std::string_view::npos) return make_error("Missing ']' in format string");
      std::string_view key = field.substr(i + 1, close - i - 1);
      Value k = key.find_first_not_of("0123456789") == std::string_view::npos && !key.empty()
                    ? Value::integer(std::strtoll(std::string(key).c_str(), nullptr, 10))
                    : Value::string(std::string(key));
      SLUICE_ASSIGN_OR_RETURN(v, get_item(in, v, k));
      i = close + 1;
    }
  }
  if (v.is_undefined()) return Error{v.undefined_message()};
  return v;
}

}  // namespace

Result<std::string> py_str_format(Interpreter& in, std::string_view fmt, const CallArgs& args) {
  std::string out;
  Numbering numbering;
  for (size_t i = 0; i < fmt.size();) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      return make_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    // Find the matching '}' (one nesting level for `{:{width}}`).
    size_t j = i + 1;
    int depth = 1;
    while (j < fmt.size() && depth > 0) {
      if (fmt[j] == '{') ++depth;
      if (fmt[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= fmt.size()) return make_error("expected '}' before end of string");
    std::string_view inner = fmt.substr(i + 1, j - i - 1);
    size_t colon = inner.find(':');
    size_t bang = inner.find('!');
    if (bang != std::string_view::npos && colon != std::string_view::npos && bang > colon)
      bang = std::string_view::npos;
    std::string_view field = inner.substr(0, std::min(bang, colon));
    char conversion =
        bang != std::string_view::npos && bang + 1 < inner.size() ? inner[bang + 1] : 0;
    std::string spec;
    if (colon != std::string_view::npos) {
      std::string_view raw_spec = inner.substr(colon + 1);
      for (size_t k = 0; k < raw_spec.size(); ++k) {  // nested {field} inside the spec
        if (raw_spec[k] == '{') {
          size_t close = raw_spec.find('}', k);
          if (close == std::string_view::npos) return make_error("unmatched '{' in format spec");
          SLUICE_ASSIGN_OR_RETURN(
              Value nested,
              resolve_field(in, raw_spec.substr(k + 1, close - k - 1), args, numbering));
          SLUICE_ASSIGN_OR_RETURN(std::string ns, to_string(in, nested));
          spec += ns;
          k = close;
        } else {
          spec += raw_spec[k];
        }
      }
    }
    SLUICE_ASSIGN_OR_RETURN(Value v, resolve_field(in, field, args, numbering));
    if (conversion == 'r' || conversion == 'a') {
      std::string r;
      SLUICE_RETURN_IF_ERROR(append_repr(r, v, in.max_size()));
      v = Value::string(std::move(r));
    } else if (conversion == 's') {
      SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
      v = Value::string(std::move(s));
    } else if (conversion) {
      return make_error("Unknown conversion specifier ", std::string(1, conversion));
    }
    SLUICE_ASSIGN_OR_RETURN(std::string piece, format_value(in, v, spec));
    out += piece;
    SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
    i = j + 1;
  }
  return out;
}

Result<std::string> py_percent_format(Interpreter& in, std::string_view fmt, const Value& args) {
  const bool is_tuple = args.is_list_kind(ListKind::kTuple);
  const bool is_map = args.is_dict();
  std::vector<Value> positional;
  if (is_tuple)
    positional = args.as_list().items;
  else if (!is_map)
    positional.push_back(args);
  size_t next = 0;
  bool used_map = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) return make_error("incomplete format");
    Value v;
    bool have_value = false;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string_view::npos) return make_error("incomplete format key");
      if (!is_map) return make_error("format requires a mapping");
      const Value* found = args.as_dict().find(fmt.substr(i + 1, close - i - 1));
      if (!found) return make_error("'", fmt.substr(i + 1, close - i - 1), "'");
      v = *found;
      have_value = used_map = true;
      i = close + 1;
    }
    Spec spec;
    for (; i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos;
         ++i) {
      if (fmt[i] == '-')
        spec.align = '<';
      else if (fmt[i] == '+' || fmt[i] == ' ')
        spec.sign = fmt[i];
      else if (fmt[i] == '#')
        spec.alternate = true;
      else
        spec.zero = true;
    }
    auto take_next = [&]() -> Result<Value> {
      if (next >= positional.size()) return make_error("not enough arguments for format string");
      return positional[next++];
    };
    auto read_num = [&](int64_t* target) -> Status {
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        SLUICE_ASSIGN_OR_RETURN(Value n, take_next());
        if (!n.is_integral()) return make_error("* wants int");
        *target = n.as_int();
        return {};
      }
      int64_t val = 0;
      bool any = false;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        val = std::min<int64_t>(val * 10 + (fmt[i++] - '0'), int64_t{1} << 40);
        any = true;
      }
      if (any) *target = val;
      return {};
    };
    SLUICE_RETURN_IF_ERROR(read_num(&spec.width));
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      spec.precision = 0;
      SLUICE_RETURN_IF_ERROR(read_num(&spec.precision));
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) return make_error("incomplete format");
    char type = fmt[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!have_value) {
      SLUICE_ASSIGN_OR_RETURN(v, take_next());
    }
    if (spec.align == '<') spec.zero = false;
    std::string piece;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s;
        if (type == 's') {
          SLUICE_ASSIGN_OR_RETURN(s, to_string(in, v));
        } else {
          SLUICE_RETURN_IF_ERROR(append_repr(s, v, in.max_size()));
        }
        if (spec.precision >= 0 && static_cast<size_t>(spec.precision) < utf8_length(s)) {
          std::vector<uint32_t> cps = utf8_decode(s);
          s = utf8_encode(cps.data(), static_cast<size_t>(spec.precision));
        }
        spec.zero = false;
        SLUICE_ASSIGN_OR_RETURN(piece, pad(in, "", s, spec, '>'));
        break;
      }
      case 'c':
        if (v.is_string()) {
          if (utf8_length(v.as_string()) != 1) return make_error("%c requires int or char");
          piece = v.as_string();
          break;
        }
        [[fallthrough]];
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number()) {
          return make_error("%", std::string(1, type), " format: a real number is required, not ",
                            type_name(v));
        }
        int64_t n = 0;
        if (v.is_float()) {
          SLUICE_ASSIGN_OR_RETURN(n, float_to_int(v.as_double()));
        } else {
          n = v.as_int();
        }
        spec.type = (type == 'i' || type == 'u') ? 'd' : type;
        SLUICE_ASSIGN_OR_RETURN(piece, format_int(in, n, spec));
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!v.is_number()) return make_error("must be real number, not ", type_name(v));
        spec.type = type;
        if (spec.precision < 0) spec.precision = 6;
        SLUICE_ASSIGN_OR_RETURN(piece, format_float(in, v.as_double(), spec));
        break;
      }
      default:
        return make_error("unsupported format character '", std::string(1, type), "'");
    }
    out += piece;
    SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  if (!used_map && !is_map && next < positional.size()) {
    return make_error("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace sluice::jinja
