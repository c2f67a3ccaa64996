#include "template/json_scanner.h"

#include <cstdio>

namespace sluice {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

std::string describe(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", u);
  return buf;
}

}  // namespace

void JsonScanner::reset() {
  stack_.clear();
  mode_ = Mode::kValue;
  in_key_ = false;
  error_.clear();
}

JsonScanner::Step JsonScanner::fail(std::string message, char c) {
  mode_ = Mode::kError;
  error_ = std::move(message) + " (got " + describe(c) + ")";
  return Step::kError;
}

JsonScanner::Step JsonScanner::push(char c) {
  switch (mode_) {
    case Mode::kValue:
      if (is_json_ws(c)) return Step::kMore;
      return begin_value(c);
    case Mode::kFirstValueOrClose:
      if (is_json_ws(c)) return Step::kMore;
      if (c == ']') return close(c);
      return begin_value(c);
    case Mode::kFirstKeyOrClose:
    case Mode::kKey:
      if (is_json_ws(c)) return Step::kMore;
      if (c == '}' && mode_ == Mode::kFirstKeyOrClose) return close(c);
      if (c != '"') return fail("expected an object key", c);
      mode_ = Mode::kString;
      in_key_ = true;
      return Step::kMore;
    case Mode::kColon:
      if (is_json_ws(c)) return Step::kMore;
      if (c != ':') return fail("expected ':' after an object key", c);
      mode_ = Mode::kValue;
      return Step::kMore;
    case Mode::kAfterValue:
      if (is_json_ws(c)) return Step::kMore;
      if (c == ',') {
        mode_ = stack_.back() == '{' ? Mode::kKey : Mode::kValue;
        return Step::kMore;
      }
      if (c == '}' || c == ']') return close(c);
      return fail(stack_.back() == '{' ? "expected ',' or '}'" : "expected ',' or ']'", c);
    case Mode::kString:
      if (c == '"') {
        if (in_key_) {
          in_key_ = false;
          mode_ = Mode::kColon;
          return Step::kMore;
        }
        return value_end();
      }
      if (c == '\\') mode_ = Mode::kEscape;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string", c);
      return Step::kMore;
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kUnicode;
        unicode_left_ = 4;
        return Step::kMore;
      }
      switch (c) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          mode_ = Mode::kString;
          return Step::kMore;
        default:
          return fail("invalid escape in a string", c);
      }
    case Mode::kUnicode:
      if (!is_hex(c)) return fail("expected a hex digit in \\u escape", c);
      if (--unicode_left_ == 0) mode_ = Mode::kString;
      return Step::kMore;
    case Mode::kNumber:
      return number(c);
    case Mode::kLiteral:
      if (c != literal_[literal_pos_])
        return fail(std::string("invalid literal (") + literal_ + ")", c);
      if (literal_[++literal_pos_] == '\0') return value_end();
      return Step::kMore;
    case Mode::kDone:
      return fail("text after the end of the value", c);
    case Mode::kError:
      return Step::kError;
  }
  return Step::kError;
}

JsonScanner::Step JsonScanner::begin_value(char c) {
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= kMaxDepth) {
        return fail("nesting deeper than " + std::to_string(kMaxDepth), c);
      }
      stack_.push_back(c);
      mode_ = c == '{' ? Mode::kFirstKeyOrClose : Mode::kFirstValueOrClose;
      return Step::kMore;
    case '"':
      mode_ = Mode::kString;
      in_key_ = false;
      return Step::kMore;
    case 't':
    case 'f':
    case 'n':
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      literal_pos_ = 1;
      mode_ = Mode::kLiteral;
      return Step::kMore;
    default:
      if (c == '-' || is_digit(c)) {
        mode_ = Mode::kNumber;
        num_ = c == '-' ? Num::kSign : c == '0' ? Num::kZero : Num::kInt;
        return Step::kMore;
      }
      return fail("expected a JSON value", c);
  }
}

JsonScanner::Step JsonScanner::close(char c) {
  if (stack_.back() != (c == '}' ? '{' : '[')) return fail("mismatched bracket", c);
  stack_.pop_back();
  return value_end();
}

JsonScanner::Step JsonScanner::value_end() {
  if (stack_.empty()) {
    mode_ = Mode::kDone;
    return Step::kDone;
  }
  mode_ = Mode::kAfterValue;
  return Step::kMore;
}

JsonScanner::Step JsonScanner::number(char c) {
  const bool digit = is_digit(c);
  switch (num_) {
    case Num::kSign:
      if (!digit) return fail("expected a digit after '-'", c);
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return Step::kMore;
    case Num::kZero:
      if (digit) return fail("leading zero in a number", c);
      break;
    case Num::kInt:
      if (digit) return Step::kMore;
      break;
    case Num::kDot:
      if (!digit) return fail("expected a digit after '.'", c);
      num_ = Num::kFrac;
      return Step::kMore;
    case Num::kFrac:
      if (digit) return Step::kMore;
      if (c == 'e' || c == 'E') {
        num_ = Num::kExp;
        return Step::kMore;
      }
      break;
    case Num::kExp:
      if (c == '+' || c == '-') {
        num_ = Num::kExpSign;
        return Step::kMore;
      }
      [[fallthrough]];
    case Num::kExpSign:
      if (!digit) return fail("expected a digit in the exponent", c);
      num_ = Num::kExpDigits;
      return Step::kMore;
    case Num::kExpDigits:
      if (digit) return Step::kMore;
      break;
  }
  // Here the number so far is complete (0, an integer, a fraction or an exponent); '.' and 'e'
  // may still extend an integer part.
  if ((num_ == Num::kZero || num_ == Num::kInt) && c == '.') {
    num_ = Num::kDot;
    return Step::kMore;
  }
  if ((num_ == Num::kZero || num_ == Num::kInt) && (c == 'e' || c == 'E')) {
    num_ = Num::kExp;
    return Step::kMore;
  }
  if (stack_.empty()) {
    mode_ = Mode::kDone;
    return Step::kDoneBefore;
  }
  mode_ = Mode::kAfterValue;
  return push(c);  // the byte after the number belongs to the container
}

JsonScanner::Step JsonScanner::finish() {
  if (mode_ == Mode::kDone) return Step::kDone;
  if (mode_ == Mode::kNumber && stack_.empty() &&
      (num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExpDigits)) {
    mode_ = Mode::kDone;
    return Step::kDone;
  }
  if (mode_ != Mode::kError) {
    mode_ = Mode::kError;
    error_ = "unexpected end of the text inside a JSON value";
  }
  return Step::kError;
}

}  // namespace sluice
