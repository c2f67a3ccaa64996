// GBNF parser (recursive descent over the source bytes, shaped like llama.cpp's
// llama_grammar_parser) and the printer back to GBNF. Where llama.cpp silently guesses (a rule
// defined twice keeps the last, a reversed range or [] matches nothing) this parser reports an
// error instead; where it is needlessly strict ({,n}, a continuation line starting with '|')
// this one accepts.
#include "grammar/gbnf.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/unicode.h"

namespace sluice::grammar {
namespace {

constexpr int kMaxDepth = 256;                // ( nesting plus postfix operators on one element
constexpr int64_t kMaxCount = 1'000'000'000;  // {m,n} bounds (lower() applies the real limit)

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

class Parser {
 public:
  explicit Parser(std::string_view src) : s_(src) {}

  Result<GrammarSpec> parse() {
    for (size_t i = 0; i < s_.size();) {
      const unicode::DecodedCp d = unicode::decode_utf8(s_, i);
      if (!d.valid) return err(i, "invalid UTF-8");
      i += d.len;
    }
    GrammarSpec spec;
    std::map<std::string, size_t> defined;  // name -> offset of its definition
    skip_space(/*newline_ok=*/true);
    while (!at_end()) {
      const size_t name_at = pos_;
      const std::string name = parse_name();
      if (name.empty()) return err(pos_, "expected a rule name, found ", describe(pos_));
      skip_space(false);
      if (!s_.substr(pos_).starts_with("::=")) {
        return err(pos_, "expected '::=' after rule name '", name, "', found ", describe(pos_));
      }
      pos_ += 3;
      skip_space(true);
      SLUICE_ASSIGN_OR_RETURN(Expr body, parse_alternates(/*nested=*/false));
      if (!at_end() && peek() != '\n' && peek() != '\r') {
        if (peek() == ')') return err(pos_, "unmatched ')'");
        return err(pos_, "expected the end of rule '", name, "', found ", describe(pos_));
      }
      skip_space(true);
      if (auto [it, fresh] = defined.emplace(name, name_at); !fresh) {
        return err(name_at, "rule '", name, "' defined twice (first at ", line_col(it->second),
                   ")");
      }
      spec.rules.emplace_back(name, std::move(body));
    }
    for (const auto& [name, at] : refs_) {
      if (!defined.count(name)) return err(at, "undefined rule '", name, "'");
    }
    if (!defined.count("root")) return make_error("gbnf: no rule named 'root'");
    spec.root = "root";
    return spec;
  }

 private:
  // "line:col" of byte offset `at` (1-based; columns count bytes).
  std::string line_col(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line, col = 1;
      } else {
        ++col;
      }
    }
    return std::to_string(line) + ":" + std::to_string(col);
  }

  template <class... Args>
  Error err(size_t at, Args&&... args) const {
    return make_error("gbnf: ", std::forward<Args>(args)..., " at ", line_col(at));
  }

  // What stands at `at`, for messages: 'x', "a newline" or "the end of input".
  std::string describe(size_t at) const {
    if (at >= s_.size()) return "the end of input";
    if (s_[at] == '\n' || s_[at] == '\r') return "a newline";
    const unicode::DecodedCp d = unicode::decode_utf8(s_, at);
    return "'" + std::string(s_.substr(at, d.len)) + "'";
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }

  // Blanks and `#` comments; newlines too when `newline_ok`.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // sequence ('|' sequence)*. Outside parentheses a newline ends the rule, unless the next
  // non-blank line starts with '|'.
  Result<Expr> parse_alternates(bool nested) {
    std::vector<Expr> alts;
    SLUICE_ASSIGN_OR_RETURN(Expr first, parse_sequence(nested));
    alts.push_back(std::move(first));
    while (true) {
      if (!nested && (peek() == '\n' || peek() == '\r')) {
        const size_t save = pos_;
        skip_space(true);
        if (peek() != '|') {
          pos_ = save;
          break;
        }
      }
      if (peek() != '|') break;
      ++pos_;
      skip_space(true);
      SLUICE_ASSIGN_OR_RETURN(Expr next, parse_sequence(nested));
      alts.push_back(std::move(next));
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return Expr::alt(std::move(alts));
  }

  Result<Expr> parse_sequence(bool nested) {
    std::vector<Expr> items;
    while (!at_end()) {
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      SLUICE_ASSIGN_OR_RETURN(Expr e, parse_element(nested));
      items.push_back(std::move(e));
    }
    if (items.empty()) return Expr::empty();
    if (items.size() == 1) return std::move(items[0]);
    return Expr::seq(std::move(items));
  }

  // One primary and its postfix operators, and the blanks after them.
  Result<Expr> parse_element(bool nested) {
    const size_t at = pos_;
    Expr e;
    const char c = peek();
    if (c == '"') {
      SLUICE_ASSIGN_OR_RETURN(e, parse_string());
    } else if (c == '[') {
      SLUICE_ASSIGN_OR_RETURN(e, parse_class());
    } else if (c == '.') {
      ++pos_;
      e = Expr::any_char();
    } else if (c == '(') {
      if (++depth_ > kMaxDepth) return err(at, "parentheses nested deeper than ", kMaxDepth);
      ++pos_;
      skip_space(true);
      SLUICE_ASSIGN_OR_RETURN(e, parse_alternates(/*nested=*/true));
      if (peek() != ')') return err(at, "unclosed '('");
      ++pos_;
      --depth_;
    } else if (is_name_char(c)) {
      std::string name = parse_name();
      const size_t after = pos_;
      skip_space(false);
      if (s_.substr(pos_).starts_with("::=")) {
        return err(at, "rule '", name, "' must start on a new line");
      }
      pos_ = after;
      refs_.emplace_back(name, at);
      e = Expr::ref(std::move(name));
    } else if (c == '<' || (c == '!' && peek(1) == '<')) {
      return err(at, "token references '<...>' are not supported");
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      return err(at, "nothing to repeat before '", c, "'");
    } else {
      return err(at, "unexpected ", describe(at));
    }
    skip_space(nested);
    int wraps = 0;
    while (true) {
      const size_t op_at = pos_;
      int32_t lo, hi;
      const char op = peek();
      if (op == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (op == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (op == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (op == '{') {
        SLUICE_ASSIGN_OR_RETURN(auto b, parse_braces(nested));
        lo = b.first, hi = b.second;
      } else {
        break;
      }
      if (depth_ + ++wraps > kMaxDepth) {
        return err(op_at, "more than ", kMaxDepth, " nested operators");
      }
      e = Expr::repeat(std::move(e), lo, hi);
      skip_space(nested);
    }
    return e;
  }

  Result<int64_t> parse_count() {
    const size_t at = pos_;
    int64_t v = 0;
    while (is_digit(peek())) {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), kMaxCount + 1);
      ++pos_;
    }
    if (v > kMaxCount) return err(at, "repeat count above ", kMaxCount);
    return v;
  }

  // {m} {m,} {m,n} {,n}, blanks allowed inside as llama.cpp does.
  Result<std::pair<int32_t, int32_t>> parse_braces(bool nested) {
    const size_t open = pos_;
    ++pos_;
    skip_space(nested);
    int64_t lo = 0, hi;
    const bool has_min = is_digit(peek());
    if (has_min) {
      SLUICE_ASSIGN_OR_RETURN(lo, parse_count());
      skip_space(nested);
    }
    if (peek() == '}' && has_min) {
      hi = lo;
    } else if (peek() == ',') {
      ++pos_;
      skip_space(nested);
      if (is_digit(peek())) {
        SLUICE_ASSIGN_OR_RETURN(hi, parse_count());
        skip_space(nested);
      } else if (!has_min) {
        return err(open, "'{,}' needs a bound");
      } else {
        hi = kUnbounded;
      }
      if (peek() != '}') return err(pos_, "expected '}', found ", describe(pos_));
    } else {
      return err(pos_, "expected a count, ',' or '}' in '{...}', found ", describe(pos_));
    }
    ++pos_;
    if (hi != kUnbounded && lo > hi) return err(open, "repeat {", lo, ",", hi, "} has min > max");
    return std::pair{int32_t(lo), int32_t(hi)};
  }

  // One character of a string or class: an escape or a UTF-8 character. Returns its code
  // point; escapes name code points (\xE9 is U+00E9).
  Result<uint32_t> parse_char() {
    const size_t at = pos_;
    if (peek() != '\\') {
      const unicode::DecodedCp d = unicode::decode_utf8(s_, pos_);  // valid: checked up front
      pos_ += d.len;
      return d.cp;
    }
    ++pos_;
    const char c = peek();
    if (at_end()) return err(at, "unterminated escape");
    ++pos_;
    size_t n_hex = 0;
    switch (c) {
      case 'n':
        return uint32_t('\n');
      case 'r':
        return uint32_t('\r');
      case 't':
        return uint32_t('\t');
      case '\\':
      case '"':
      case '[':
      case ']':
        return uint32_t(uint8_t(c));
      case 'x':
        n_hex = 2;
        break;
      case 'u':
        n_hex = 4;
        break;
      case 'U':
        n_hex = 8;
        break;
      default:
        if (uint8_t(c) < 0x20) return err(at, "unknown escape: '\\' before a control character");
        return err(at, "unknown escape '\\",
                   std::string(s_.substr(at + 1, unicode::decode_utf8(s_, at + 1).len)), "'");
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n_hex; ++i) {
      const int h = hex_digit_value(peek());
      if (h < 0) return err(at, "'\\", c, "' needs ", n_hex, " hex digits");
      v = v * 16 + uint64_t(h);
      ++pos_;
    }
    if (v > kMaxCodepoint) return err(at, "escape above U+10FFFF");
    if (v >= 0xD800 && v <= 0xDFFF) return err(at, "escape names a surrogate (not valid UTF-8)");
    return uint32_t(v);
  }

  Result<Expr> parse_string() {
    const size_t open = pos_;
    ++pos_;
    std::string text;
    while (true) {
      if (at_end()) return err(open, "unterminated string literal");
      if (peek() == '"') break;
      SLUICE_ASSIGN_OR_RETURN(uint32_t cp, parse_char());
      unicode::append_utf8(text, cp);
    }
    ++pos_;
    if (text.empty()) return Expr::empty();
    return Expr::lit(std::move(text));
  }

  // [...] / [^...]: ranges as written (unsorted, overlaps allowed); [^] is any code point.
  Result<Expr> parse_class() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (at_end()) return err(open, "unterminated character class");
      if (peek() == ']') break;
      const size_t lo_at = pos_;
      SLUICE_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < s_.size() && peek(1) != ']') {
        ++pos_;
        SLUICE_ASSIGN_OR_RETURN(hi, parse_char());
        if (hi < lo) return err(lo_at, "class range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    if (ranges.empty()) {
      if (negated) return Expr::any_char();
      return err(open, "empty character class '[]' matches nothing");
    }
    return Expr::cls(std::move(ranges), negated);
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<std::pair<std::string, size_t>> refs_;  // every reference, in source order
};

// ---- printer ----

std::string hex_escape(char kind, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\%c%0*X", kind, digits, v);
  return buf;
}

// One code point inside "..." (in_class false) or [...] (true).
void print_cp(std::string& out, uint32_t cp, bool in_class) {
  switch (cp) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '"':
      out += in_class ? "\"" : "\\\"";
      return;
    case ']':
      out += in_class ? "\\]" : "]";
      return;
    case '[':
      out += in_class ? "\\[" : "[";
      return;
    case '-':
    case '^':
      if (in_class) {
        out += hex_escape('x', cp, 2);  // never a range dash or a negation
        return;
      }
      break;
    default:
      break;
  }
  if (cp < 0x20 || cp == 0x7F) {
    out += hex_escape('x', cp, 2);
  } else if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (!in_class) {
    unicode::append_utf8(out, cp);
  } else if (cp <= 0xFFFF) {
    out += hex_escape('u', cp, 4);
  } else {
    out += hex_escape('U', cp, 8);
  }
}

// Binding strength of what print_expr emits bare: an alternation binds loosest.
enum Prec : int { kPrecAlt = 0, kPrecSeq = 1, kPrecRepeat = 2, kPrecAtom = 3 };

// Prints `e`, parenthesized when it binds looser than `need`. Sets *lossy when a byte-level
// construct had to print as code points.
void print_expr(std::string& out, const Expr& e, int need, bool* lossy) {
  auto group = [&](int prec, auto&& body) {
    if (prec < need) out += "(";
    body();
    if (prec < need) out += ")";
  };
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      out += "\"\"";
      return;
    case Expr::Kind::kLiteral: {
      out += "\"";
      for (size_t i = 0; i < e.text.size();) {
        const unicode::DecodedCp d = unicode::decode_utf8(e.text, i);
        if (d.valid) {
          print_cp(out, d.cp, /*in_class=*/false);
          i += d.len;
        } else {
          out += hex_escape('x', uint8_t(e.text[i]), 2);
          *lossy = true;
          ++i;
        }
      }
      out += "\"";
      return;
    }
    case Expr::Kind::kClass:
    case Expr::Kind::kByteClass:
      if (e.kind == Expr::Kind::kByteClass) *lossy = true;
      if (e.kind == Expr::Kind::kClass && !e.negated && e.ranges.size() == 1 &&
          e.ranges[0].first == 0 && e.ranges[0].second == kMaxCodepoint) {
        out += ".";
        return;
      }
      out += e.negated ? "[^" : "[";
      for (auto [lo, hi] : e.ranges) {
        // Bytes >= 0x80 print as \xHH: the same number, read back as a code point.
        auto put = [&](uint32_t v) {
          if (e.kind == Expr::Kind::kByteClass && v >= 0x80) {
            out += hex_escape('x', v, 2);
          } else {
            print_cp(out, v, /*in_class=*/true);
          }
        };
        put(lo);
        if (hi != lo) {
          out += "-";
          put(hi);
        }
      }
      out += "]";
      return;
    case Expr::Kind::kRef:
      out += e.text;
      return;
    case Expr::Kind::kSeq:
      if (e.kids.empty()) {
        out += "\"\"";
        return;
      }
      group(kPrecSeq, [&] {
        for (size_t i = 0; i < e.kids.size(); ++i) {
          if (i) out += " ";
          print_expr(out, e.kids[i], kPrecRepeat, lossy);
        }
      });
      return;
    case Expr::Kind::kAlt:
      if (e.kids.empty()) {
        out += "[^]";  // unreachable from parse_gbnf; no GBNF text matches nothing
        return;
      }
      group(kPrecAlt, [&] {
        for (size_t i = 0; i < e.kids.size(); ++i) {
          if (i) out += " | ";
          print_expr(out, e.kids[i], kPrecSeq, lossy);
        }
      });
      return;
    case Expr::Kind::kRepeat: {
      group(kPrecRepeat, [&] {
        print_expr(out, e.kids[0], kPrecAtom, lossy);
        const int32_t lo = e.min, hi = e.max;
        if (lo == 0 && hi == 1) {
          out += "?";
        } else if (lo == 0 && hi == kUnbounded) {
          out += "*";
        } else if (lo == 1 && hi == kUnbounded) {
          out += "+";
        } else if (hi == kUnbounded) {
          out += "{" + std::to_string(lo) + ",}";
        } else if (lo == hi) {
          out += "{" + std::to_string(lo) + "}";
        } else {
          out += "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
        }
      });
      return;
    }
  }
}

}  // namespace

Result<GrammarSpec> parse_gbnf(std::string_view src) {
  return Parser(src).parse();
}

std::string to_gbnf(const GrammarSpec& spec) {
  std::string out;
  if (spec.root != "root") out += "# root: " + spec.root + "\n";
  for (const auto& [name, e] : spec.rules) {
    std::string line = name + " ::= ";
    bool lossy = false;
    print_expr(line, e, kPrecAlt, &lossy);
    if (lossy) out += "# note: '" + name + "' has raw bytes; printed here as code points\n";
    out += line + "\n";
  }
  return out;
}

}  // namespace sluice::grammar
