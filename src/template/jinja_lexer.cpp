#include "template/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "template/jinja_string.h"

namespace sluice::jinja {

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += c;
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

SourceMap::SourceMap(std::string_view source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
  }
}

uint32_t SourceMap::line(uint32_t pos) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  return static_cast<uint32_t>(it - line_starts_.begin());
}

std::string SourceMap::describe(uint32_t pos) const {
  uint32_t l = line(pos);
  uint32_t col = pos - line_starts_[l - 1] + 1;
  return "line " + std::to_string(l) + ", column " + std::to_string(col);
}

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src), map_(src) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      size_t q = find_tag_open(pos_);
      if (q == std::string_view::npos) {
        emit_data(src_.substr(pos_), pos_);
        break;
      }
      char kind = src_[q + 1];
      size_t after = q + 2;
      char sign =
          (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      std::string_view text = src_.substr(pos_, q - pos_);
      size_t raw_body = 0;
      bool raw = kind == '%' && match_raw_begin(after + (sign ? 1 : 0), &raw_body);
      emit_data(strip_before(text, sign, kind != '{'), pos_);
      if (raw) {
        SLUICE_RETURN_IF_ERROR(lex_raw(q, raw_body));
        continue;
      }
      pos_ = after + (sign ? 1 : 0);
      line_starting_ = false;
      if (kind == '#') {
        SLUICE_RETURN_IF_ERROR(lex_comment(q));
      } else {
        SLUICE_RETURN_IF_ERROR(lex_tag(kind == '%', q));
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, static_cast<uint32_t>(src_.size())});
    return std::move(tokens_);
  }

 private:
  Error fail(size_t pos, const std::string& msg) const {
    return make_error(map_.describe(static_cast<uint32_t>(pos)), ": ", msg);
  }

  size_t find_tag_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string_view::npos;
  }

  // Python's str.rstrip() on the text before a '-' tag, or lstrip_blocks for block/comment tags.
  std::string_view strip_before(std::string_view text, char sign, bool lstrip_applies) const {
    if (sign == '-') return py_strip(text, nullptr, StripSide::kRight);
    if (sign == '+' || !lstrip_applies) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    // Jinja 3.1: strip when everything after the last newline is (Unicode) whitespace.
    std::string_view tail = text.substr(l_pos);
    if (tail.empty() || !py_strip(tail, nullptr, StripSide::kLeft).empty()) return text;
    return text.substr(0, l_pos);
  }

  void emit_data(std::string_view text, size_t pos) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::kData, std::string(text), 0, 0, static_cast<uint32_t>(pos)});
  }

  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t next = p;
      if (!py_isspace(utf8_next(src_, next))) break;
      p = next;
    }
    return p;
  }

  bool starts_with(size_t p, std::string_view s) const { return src_.substr(p, s.size()) == s; }

  // `raw\s*(-%}\s*|%})` at p (after `{%` and its sign and whitespace). Sets the body start.
  bool match_raw_begin(size_t p, size_t* body) const {
    p = skip_space(p);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      *body = skip_space(p + 3);
      return true;
    }
    if (starts_with(p, "%}")) {
      *body = p + 2;  // no trim_blocks after {% raw %}: Jinja's rule has no \n? here
      return true;
    }
    return false;
  }

  // Consumes a tag end at p: "+%}", "-%}\s*" or "%}\n?" (suffix '#' for comments).
  // Returns the end position or npos.
  size_t match_block_end(size_t p, char close) const {
    if (p >= src_.size()) return std::string_view::npos;
    const std::string end{close, '}'};
    if (src_[p] == '+' && starts_with(p + 1, end)) return p + 3;
    if (src_[p] == '-' && starts_with(p + 1, end)) return skip_space(p + 3);
    if (starts_with(p, end)) {
      size_t e = p + 2;
      return (e < src_.size() && src_[e] == '\n') ? e + 1 : e;
    }
    return std::string_view::npos;
  }

  Status lex_raw(size_t tag_pos, size_t body) {
    if (body >= src_.size()) {  // like Jinja, "{% raw %}" at the very end renders nothing
      pos_ = body;
      return {};
    }
    for (size_t q = src_.find("{%", body); q != std::string_view::npos;
         q = src_.find("{%", q + 1)) {
      size_t p = q + 2;
      char sign = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
      if (sign) ++p;
      p = skip_space(p);
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      if (p >= src_.size()) continue;
      size_t end = match_block_end(p, '%');
      if (end == std::string_view::npos) continue;
      line_starting_ = src_[body - 1] == '\n';
      emit_data(strip_before(src_.substr(body, q - body), sign, true), body);
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return {};
    }
    return fail(tag_pos, "missing end of raw directive");
  }

  Status lex_comment(size_t tag_pos) {
    if (pos_ >= src_.size()) return {};  // Jinja accepts a bare "{#" at the very end
    for (size_t p = pos_; p + 1 < src_.size(); ++p) {
      size_t end = std::string_view::npos;
      if ((src_[p] == '+' || src_[p] == '-' || src_[p] == '#') && p + 1 < src_.size()) {
        end = match_block_end(p, '#');
      }
      if (end != std::string_view::npos) {
        pos_ = end;
        line_starting_ = src_[end - 1] == '\n';
        return {};
      }
    }
    return fail(tag_pos, "missing end of comment tag");
  }

  Status lex_tag(bool block, size_t tag_pos) {
    tokens_.push_back(Token{block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", 0, 0,
                            static_cast<uint32_t>(tag_pos)});
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        return fail(tag_pos, std::string("unexpected end of template, expected '") +
                                 (block ? "%}" : "}}") + "'");
      }
      if (balance.empty()) {
        size_t end = std::string_view::npos;
        if (block && (src_[pos_] == '+' || src_[pos_] == '-' || src_[pos_] == '%')) {
          end = match_block_end(pos_, '%');
        } else if (!block) {
          if (starts_with(pos_, "-}}"))
            end = skip_space(pos_ + 3);
          else if (starts_with(pos_, "}}"))
            end = pos_ + 2;
        }
        if (end != std::string_view::npos) {
          tokens_.push_back(Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", 0, 0,
                                  static_cast<uint32_t>(pos_)});
          pos_ = end;
          line_starting_ = src_[end - 1] == '\n';
          return {};
        }
      }
      size_t ws_end = skip_space(pos_);
      if (ws_end != pos_) {
        pos_ = ws_end;
        continue;
      }
      SLUICE_RETURN_IF_ERROR(lex_token(balance));
    }
  }

  // (\d+_)*\d+ starting at p; returns the end or p when there is no digit.
  size_t scan_digits(size_t p) const {
    size_t q = p;
    while (q < src_.size() && is_digit(src_[q])) {
      ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
    }
    return q;
  }

  size_t scan_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return p;
    size_t q = scan_digits(p);
    if (q == p) return p;
    size_t frac_end = q;
    if (q < src_.size() && src_[q] == '.') {
      size_t f = scan_digits(q + 1);
      if (f != q + 1) frac_end = f;
    }
    size_t e = frac_end;
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      size_t xe = scan_digits(x);
      if (xe != x) return xe;
    }
    return frac_end != q ? frac_end : p;
  }

  Status lex_number(size_t start) {
    size_t fend = scan_float(start);
    if (fend != start) {
      std::string digits;
      for (size_t i = start; i < fend; ++i) {
        if (src_[i] != '_') digits += src_[i];
      }
      Token t{TokenType::kFloat, std::string(src_.substr(start, fend - start)), 0,
              std::strtod(digits.c_str(), nullptr), static_cast<uint32_t>(start)};
      tokens_.push_back(std::move(t));
      pos_ = fend;
      return {};
    }
    int base = 10;
    size_t p = start;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char b = static_cast<char>(src_[p + 1] | 0x20);
      base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
      if (base != 10) p += 2;
    }
    auto digit_ok = [&](char c) {
      if (base == 16) return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 2) return c == '0' || c == '1';
      return is_digit(c);
    };
    std::string digits;
    size_t q = p;
    if (base == 10 && src_[q] == '0') {  // 0(_?0)*
      ++q;
      while (q < src_.size() &&
             (src_[q] == '0' || (src_[q] == '_' && q + 1 < src_.size() && src_[q + 1] == '0'))) {
        ++q;
      }
      digits = "0";
    } else {
      while (q < src_.size()) {
        if (src_[q] == '_' && q + 1 < src_.size() && digit_ok(src_[q + 1]) &&
            (q > p || base != 10)) {
          ++q;
          continue;
        }
        if (!digit_ok(src_[q])) break;
        digits += src_[q++];
      }
    }
    if (digits.empty()) return fail(start, "invalid integer literal");
    errno = 0;
    unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      return fail(start, "integer literal too large (sluice supports 64-bit integers)");
    }
    tokens_.push_back(Token{TokenType::kInteger, std::string(src_.substr(start, q - start)),
                            static_cast<int64_t>(v), 0, static_cast<uint32_t>(start)});
    pos_ = q;
    return {};
  }

  // Python unicode-escape decoding of a string literal body.
  Result<std::string> unescape(std::string_view body, size_t at) const {
    std::string out;
    out.reserve(body.size());
    for (size_t i = 0; i < body.size(); ++i) {
      char c = body[i];
      if (c != '\\' || i + 1 >= body.size()) {
        out += c;
        continue;
      }
      char e = body[++i];
      switch (e) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n >= body.size()) {
            return fail(at, std::string("truncated \\") + e + " escape in string literal");
          }
          uint32_t cp = 0;
          for (size_t k = 1; k <= n; ++k) {
            char h = body[i + k];
            int d = is_digit(h)                                ? h - '0'
                    : ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') ? (h | 0x20) - 'a' + 10
                                                               : -1;
            if (d < 0)
              return fail(at, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF) return fail(at, "illegal Unicode character in string literal");
          utf8_append(out, cp);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0;
                 k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
            }
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  Status lex_token(std::vector<char>& balance) {
    size_t start = pos_;
    char c = src_[pos_];
    if (is_digit(c)) return lex_number(start);
    if (is_name_start(c)) {
      size_t q = pos_;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      tokens_.push_back(Token{TokenType::kName, std::string(src_.substr(start, q - start)), 0, 0,
                              static_cast<uint32_t>(start)});
      pos_ = q;
      return {};
    }
    if (c == '\'' || c == '"') {
      size_t q = pos_ + 1;
      while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
      if (q >= src_.size()) return fail(start, "unterminated string literal");
      SLUICE_ASSIGN_OR_RETURN(std::string value,
                              unescape(src_.substr(start + 1, q - start - 1), start));
      tokens_.push_back(
          Token{TokenType::kString, std::move(value), 0, 0, static_cast<uint32_t>(start)});
      pos_ = q + 1;
      return {};
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (starts_with(pos_, op)) {
        tokens_.push_back(
            Token{TokenType::kOperator, std::string(op), 0, 0, static_cast<uint32_t>(start)});
        pos_ += 2;
        return {};
      }
    }
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      std::string shown;
      append_py_repr(shown, std::string(1, c));
      return fail(start, "unexpected char " + shown);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return fail(start, std::string("unexpected '") + c + "'");
      if (balance.back() != c) {
        return fail(start,
                    std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      }
      balance.pop_back();
    }
    tokens_.push_back(
        Token{TokenType::kOperator, std::string(1, c), 0, 0, static_cast<uint32_t>(start)});
    ++pos_;
    return {};
  }

  std::string_view src_;
  SourceMap map_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace sluice::jinja
