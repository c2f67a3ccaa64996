// Regex (ECMAScript subset) -> Expr: a recursive-descent parser over the pattern's bytes.
//
// Character classes come out as explicit, sorted, merged code point ranges with `negated`
// false: [^...], \D, \W, \S and [\D...] are complemented here over 0..0x10FFFF (surrogates
// removed), so the tree says exactly which code points match and no later stage has to
// reason about negation inside a union.
//
// Anchors: ECMAScript ^ and $ are assertions that may stand anywhere; we support them only
// where they bound a whole top-level alternative ("^a|b$" is (^a)|(b$)). In full-match mode
// they are no-ops; in search mode an alternative without ^ gets a leading .* and one without $
// a trailing .*, which is exactly regex_search's language.
#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/unicode.h"

namespace sluice::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr int kMaxDepth = 256;  // group nesting; keeps recursion far from the stack's end
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// Sorted, merged (overlapping or adjacent ranges joined), surrogates removed.
Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  Ranges cut;
  for (auto [lo, hi] : out) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      cut.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) cut.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) cut.emplace_back(kSurrogateHi + 1, hi);
  }
  return cut;
}

// The code points (surrogates excluded) not in `r`; `r` must be normalized.
Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return normalize(std::move(out));
}

const Ranges& digit_ranges() {
  static const Ranges r = {{'0', '9'}};
  return r;
}
const Ranges& word_ranges() {
  static const Ranges r = normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
  return r;
}
// ECMAScript WhiteSpace + LineTerminator (what \s matches).
const Ranges& space_ranges() {
  static const Ranges r = normalize({{0x09, 0x0D},
                                     {0x20, 0x20},
                                     {0xA0, 0xA0},
                                     {0x1680, 0x1680},
                                     {0x2000, 0x200A},
                                     {0x2028, 0x2029},
                                     {0x202F, 0x202F},
                                     {0x205F, 0x205F},
                                     {0x3000, 0x3000},
                                     {0xFEFF, 0xFEFF}});
  return r;
}

std::string utf8(uint32_t cp) {
  std::string s;
  unicode::append_utf8(s, cp);
  return s;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// One escape or character inside or outside a class: a single code point, or a set (\d ...).
struct ClassAtom {
  bool is_set = false;
  uint32_t cp = 0;
  Ranges set;
};

// One top-level alternative's anchors (only tracked at nesting depth 0).
struct Branch {
  Expr body;
  bool anchored_start = false;
  bool anchored_end = false;
};

class Parser {
 public:
  Parser(std::string_view p, const RegexOptions& opts) : p_(p), opts_(opts) {}

  Result<Expr> parse() {
    std::vector<Branch> branches;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(Branch b, parse_alternative(/*top=*/true));
      branches.push_back(std::move(b));
      if (at_end()) break;
      if (peek() == '|') {
        ++pos_;
        continue;
      }
      return err(pos_, "unmatched ')'");  // the only other way an alternative stops
    }
    std::vector<Expr> alts;
    for (Branch& b : branches)
      alts.push_back(opts_.search ? searchable(std::move(b)) : std::move(b.body));
    if (alts.size() == 1) return std::move(alts[0]);
    return Expr::alt(std::move(alts));
  }

 private:
  // Search semantics for one top-level alternative: .* on every unanchored side.
  static Expr searchable(Branch b) {
    const bool empty = b.body.kind == Expr::Kind::kEmpty;
    if (empty && !b.anchored_start && !b.anchored_end) return Expr::star(Expr::any_char());
    std::vector<Expr> kids;
    if (!b.anchored_start) kids.push_back(Expr::star(Expr::any_char()));
    if (!empty) kids.push_back(std::move(b.body));
    if (!b.anchored_end) kids.push_back(Expr::star(Expr::any_char()));
    if (kids.empty()) return Expr::empty();
    if (kids.size() == 1) return std::move(kids[0]);
    return Expr::seq(std::move(kids));
  }

  template <class... Args>
  Error err(size_t at, Args&&... args) const {
    return make_error("regex: ", std::forward<Args>(args)..., " at offset ", at);
  }

  bool at_end() const { return pos_ >= p_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }
  bool has(size_t ahead) const { return pos_ + ahead < p_.size(); }

  // Disjunction inside a group: alternatives separated by '|', up to ')' or the end.
  Result<Expr> parse_disjunction() {
    std::vector<Expr> alts;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(Branch b, parse_alternative(/*top=*/false));
      alts.push_back(std::move(b.body));
      if (!at_end() && peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return Expr::alt(std::move(alts));
  }

  // Terms up to '|', ')' or the end. At the top level a leading '^' and a trailing '$' are
  // recorded as anchors; anywhere else they are errors.
  Result<Branch> parse_alternative(bool top) {
    Branch b;
    const size_t start = pos_;
    std::vector<Expr> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      const char c = peek();
      if (c == '^') {
        if (!top || pos_ != start) {
          return err(pos_,
                     "anchor '^' is only supported at the start of the pattern or of a "
                     "top-level alternative");
        }
        b.anchored_start = true;
        ++pos_;
        continue;
      }
      if (c == '$') {
        const bool ends_branch = !has(1) || peek(1) == '|';
        if (!top || !ends_branch) {
          return err(pos_,
                     "anchor '$' is only supported at the end of the pattern or of a "
                     "top-level alternative");
        }
        b.anchored_end = true;
        ++pos_;
        continue;
      }
      SLUICE_ASSIGN_OR_RETURN(Expr atom, parse_atom());
      SLUICE_ASSIGN_OR_RETURN(Expr term, parse_quantifiers(std::move(atom)));
      if (term.kind == Expr::Kind::kEmpty) continue;
      // Adjacent unquantified literals become one literal (quantifiers were applied first).
      if (term.kind == Expr::Kind::kLiteral && !items.empty() &&
          items.back().kind == Expr::Kind::kLiteral) {
        items.back().text += term.text;
        continue;
      }
      items.push_back(std::move(term));
    }
    if (items.empty()) {
      b.body = Expr::empty();
    } else if (items.size() == 1) {
      b.body = std::move(items[0]);
    } else {
      b.body = Expr::seq(std::move(items));
    }
    return b;
  }

  // Reads a decimal number for {n,m}; values above max_repeat are an error.
  Result<int32_t> parse_count() {
    const size_t at = pos_;
    int64_t v = 0;
    while (!at_end() && is_digit(peek())) {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), int64_t(1) << 40);
      ++pos_;
    }
    if (v > opts_.max_repeat) {
      return err(at, "repeat count ", v, " is above the limit ", opts_.max_repeat);
    }
    return int32_t(v);
  }

  // {n} {n,} {n,m} at pos_ (which is '{'). Anything else is an error: a literal brace must be
  // escaped (ECMAScript's web-compat reading of a lone '{' as a literal is not supported).
  Result<std::pair<int32_t, int32_t>> parse_braces() {
    const size_t at = pos_;
    auto malformed = [&] {
      return err(at, "malformed quantifier '{' (write \\{ for a literal brace)");
    };
    ++pos_;
    if (!is_digit(peek())) return malformed();
    SLUICE_ASSIGN_OR_RETURN(int32_t lo, parse_count());
    int32_t hi = lo;
    if (peek() == ',') {
      ++pos_;
      if (is_digit(peek())) {
        SLUICE_ASSIGN_OR_RETURN(hi, parse_count());
      } else {
        hi = kUnbounded;
      }
    }
    if (peek() != '}') return malformed();
    ++pos_;
    if (hi != kUnbounded && lo > hi) {
      return err(at, "quantifier {", lo, ",", hi, "} has min > max");
    }
    return std::pair{lo, hi};
  }

  Result<Expr> parse_quantifiers(Expr atom) {
    if (at_end()) return atom;
    const size_t at = pos_;
    int32_t lo, hi;
    switch (peek()) {
      case '*':
        lo = 0, hi = kUnbounded, ++pos_;
        break;
      case '+':
        lo = 1, hi = kUnbounded, ++pos_;
        break;
      case '?':
        lo = 0, hi = 1, ++pos_;
        break;
      case '{': {
        SLUICE_ASSIGN_OR_RETURN(auto b, parse_braces());
        lo = b.first, hi = b.second;
        break;
      }
      default:
        return atom;
    }
    if (!at_end() && peek() == '?') ++pos_;  // lazy: same language
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      return err(pos_, "nothing to repeat: '", std::string(1, peek()),
                 "' follows the quantifier at offset ", at);
    }
    if (lo == 1 && hi == 1) return atom;
    if (hi == 0 || atom.kind == Expr::Kind::kEmpty) return Expr::empty();
    return Expr::repeat(std::move(atom), lo, hi);
  }

  Result<Expr> parse_atom() {
    const size_t at = pos_;
    const char c = peek();
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return Expr::cls(complement({{'\n', '\n'}, {'\r', '\r'}}));
      case '\\': {
        SLUICE_ASSIGN_OR_RETURN(ClassAtom a, parse_escape(/*in_class=*/false));
        if (a.is_set) return Expr::cls(std::move(a.set));
        return Expr::lit(utf8(a.cp));
      }
      case '*':
      case '+':
      case '?':
        return err(at, "nothing to repeat before '", std::string(1, c), "'");
      case '{':
        return err(at, "nothing to repeat before '{' (write \\{ for a literal brace)");
      default:
        break;
    }
    // A literal character: the pattern is valid UTF-8 (checked up front).
    const unicode::DecodedCp d = unicode::decode_utf8(p_, pos_);
    pos_ += d.len;
    return Expr::lit(std::string(p_.substr(at, d.len)));
  }

  Result<Expr> parse_group() {
    const size_t open = pos_;
    if (++depth_ > kMaxDepth) {
      return err(open, "groups nested deeper than ", kMaxDepth);
    }
    ++pos_;
    if (peek() == '?') {
      const std::string_view rest = p_.substr(pos_);
      if (rest.starts_with("?:")) {
        pos_ += 2;
      } else if (rest.starts_with("?=") || rest.starts_with("?!")) {
        return err(open, "unsupported lookahead '(", rest.substr(0, 2), "'");
      } else if (rest.starts_with("?<=") || rest.starts_with("?<!")) {
        return err(open, "unsupported lookbehind '(", rest.substr(0, 3), "'");
      } else if (rest.starts_with("?<")) {
        pos_ += 2;
        const size_t name_at = pos_;
        while (!at_end() && (std::isalnum(uint8_t(peek())) || peek() == '_' || peek() == '$')) {
          ++pos_;
        }
        if (pos_ == name_at || peek() != '>' || is_digit(p_[name_at])) {
          return err(name_at, "invalid group name in '(?<name>...)'");
        }
        ++pos_;
      } else {
        return err(open, "unsupported group syntax '(", rest.substr(0, has(1) ? 2 : 1),
                   "' (inline flags and modifiers are not supported)");
      }
    }
    SLUICE_ASSIGN_OR_RETURN(Expr inner, parse_disjunction());
    if (at_end() || peek() != ')') return err(open, "unclosed group '('");
    ++pos_;
    --depth_;
    return inner;
  }

  Result<uint32_t> parse_hex(size_t n, size_t at, std::string_view what) {
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      const int h = hex_digit_value(peek());
      if (h < 0 || at_end()) return err(at, "'", what, "' needs ", n, " hex digits");
      v = v * 16 + uint32_t(h);
      ++pos_;
    }
    return v;
  }

  // \uHHHH (a surrogate pair of two such escapes is one code point) or \u{H...}.
  Result<uint32_t> parse_unicode_escape(size_t at) {
    if (peek() == '{') {
      ++pos_;
      uint64_t v = 0;
      size_t n = 0;
      while (!at_end() && hex_digit_value(peek()) >= 0) {
        v = std::min<uint64_t>(v * 16 + uint64_t(hex_digit_value(peek())), uint64_t(1) << 32);
        ++pos_, ++n;
      }
      if (n == 0 || peek() != '}') return err(at, "malformed '\\u{...}' escape");
      ++pos_;
      if (v > kMaxCodepoint) return err(at, "'\\u{...}' escape above U+10FFFF");
      if (v >= kSurrogateLo && v <= kSurrogateHi) {
        return err(at, "'\\u{...}' escape names a lone surrogate");
      }
      return uint32_t(v);
    }
    SLUICE_ASSIGN_OR_RETURN(uint32_t v, parse_hex(4, at, "\\u"));
    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      const size_t save = pos_;
      pos_ += 2;
      auto lo = parse_hex(4, save, "\\u");
      if (lo.ok() && *lo >= 0xDC00 && *lo <= 0xDFFF) {
        return 0x10000 + ((v - 0xD800) << 10) + (*lo - 0xDC00);
      }
      pos_ = save;
    }
    if (v >= kSurrogateLo && v <= kSurrogateHi) {
      return err(at, "'\\u", p_.substr(at + 2, 4), "' is a lone surrogate (not valid in UTF-8)");
    }
    return v;
  }

  // At '\\'. Inside a class \b is backspace; outside it is a (refused) word boundary.
  Result<ClassAtom> parse_escape(bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (at_end()) return err(at, "trailing backslash");
    const char c = peek();
    ++pos_;
    ClassAtom a;
    auto set = [&](const Ranges& r, bool negate) {
      a.is_set = true;
      a.set = negate ? complement(r) : r;
      return a;
    };
    auto cp = [&](uint32_t v) {
      a.cp = v;
      return a;
    };
    switch (c) {
      case 'd':
        return set(digit_ranges(), false);
      case 'D':
        return set(digit_ranges(), true);
      case 'w':
        return set(word_ranges(), false);
      case 'W':
        return set(word_ranges(), true);
      case 's':
        return set(space_ranges(), false);
      case 'S':
        return set(space_ranges(), true);
      case 'n':
        return cp('\n');
      case 't':
        return cp('\t');
      case 'r':
        return cp('\r');
      case 'f':
        return cp('\f');
      case 'v':
        return cp('\v');
      case '0':
        if (is_digit(peek())) return err(at, "octal escapes ('\\0", peek(), "') are not supported");
        return cp(0);
      case 'b':
        if (in_class) return cp(0x08);
        return err(at, "unsupported word boundary '\\b'");
      case 'B':
        return err(at, "unsupported word boundary '\\B'");
      case 'x': {
        SLUICE_ASSIGN_OR_RETURN(uint32_t v, parse_hex(2, at, "\\x"));
        return cp(v);
      }
      case 'u': {
        SLUICE_ASSIGN_OR_RETURN(uint32_t v, parse_unicode_escape(at));
        return cp(v);
      }
      case 'k':
        return err(at, "unsupported named backreference '\\k'");
      case 'p':
      case 'P':
        return err(at, "unsupported Unicode property escape '\\", c, "'");
      case 'c':
        return err(at, "unsupported control escape '\\c'");
      default:
        break;
    }
    if (c >= '1' && c <= '9') return err(at, "unsupported backreference '\\", c, "'");
    // Identity escapes: any ASCII punctuation (none has a special escaped meaning).
    if (uint8_t(c) < 0x80 && std::ispunct(uint8_t(c))) return cp(uint8_t(c));
    if (uint8_t(c) < 0x80) return err(at, "unknown escape '\\", c, "'");
    return err(at, "unknown escape '\\' before a non-ASCII character");
  }

  // One class member at pos_: an escape or a (UTF-8) character.
  Result<ClassAtom> parse_class_atom() {
    if (peek() == '\\') return parse_escape(/*in_class=*/true);
    const unicode::DecodedCp d = unicode::decode_utf8(p_, pos_);
    pos_ += d.len;
    ClassAtom a;
    a.cp = d.cp;
    return a;
  }

  Result<Expr> parse_class() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges r;
    while (true) {
      if (at_end()) return err(open, "unclosed class '['");
      if (peek() == ']') break;
      const size_t atom_at = pos_;
      SLUICE_ASSIGN_OR_RETURN(ClassAtom lo, parse_class_atom());
      if (peek() == '-' && has(1) && peek(1) != ']') {
        ++pos_;
        SLUICE_ASSIGN_OR_RETURN(ClassAtom hi, parse_class_atom());
        if (lo.is_set || hi.is_set) {
          return err(atom_at, "class escape (\\d \\w \\s ...) used as a range bound");
        }
        if (lo.cp > hi.cp) return err(atom_at, "class range out of order");
        r.emplace_back(lo.cp, hi.cp);
        continue;
      }
      if (lo.is_set) {
        r.insert(r.end(), lo.set.begin(), lo.set.end());
      } else {
        r.emplace_back(lo.cp, lo.cp);
      }
    }
    ++pos_;
    r = normalize(std::move(r));
    if (negated) r = complement(r);
    if (r.empty()) return err(open, "class matches no character");
    return Expr::cls(std::move(r));
  }

  std::string_view p_;
  size_t pos_ = 0;
  RegexOptions opts_;
  int depth_ = 0;
};

}  // namespace

Result<Expr> regex_to_expr(std::string_view pattern, const RegexOptions& opts) {
  for (size_t i = 0; i < pattern.size();) {
    const unicode::DecodedCp d = unicode::decode_utf8(pattern, i);
    if (!d.valid) return make_error("regex: invalid UTF-8 at offset ", i);
    i += d.len;
  }
  return Parser(pattern, opts).parse();
}

}  // namespace sluice::grammar
