// The lexical layer of the JSON Schema compiler: spelled strings and decimal ranges.
#include "grammar/json_schema_lex.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <map>

#include "base/unicode.h"

namespace sluice::grammar::json_lex {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

Expr digit_class(int lo, int hi) {
  return Expr::cls({{uint32_t('0' + lo), uint32_t('0' + hi)}});
}
Expr any_digit() {
  return digit_class(0, 9);
}

// One hex digit value in [lo, hi] (0..15), letters in either case.
Expr hex_class(int lo, int hi) {
  Ranges r;
  if (lo <= 9) r.push_back({uint32_t('0' + lo), uint32_t('0' + std::min(hi, 9))});
  if (hi >= 10) {
    int a = std::max(lo, 10) - 10, b = hi - 10;
    r.push_back({uint32_t('a' + a), uint32_t('a' + b)});
    r.push_back({uint32_t('A' + a), uint32_t('A' + b)});
  }
  if (r.size() == 1 && r[0].first == r[0].second) return lit(std::string(1, char(r[0].first)));
  return Expr::cls(std::move(r));
}

// Fixed-length digit strings (most significant first) between lo and hi inclusive, in `base`;
// `cls(a, b)` is one digit in [a, b]. Classic range-to-regex split on the first digit that
// differs: O(length) alternatives.
Expr digits_between(const std::vector<int>& lo, const std::vector<int>& hi, size_t at, int base,
                    const std::function<Expr(int, int)>& cls) {
  if (at == lo.size()) return Expr::empty();
  auto all = [&](const std::vector<int>& v, int d) {
    for (size_t i = at + 1; i < v.size(); ++i)
      if (v[i] != d) return false;
    return true;
  };
  auto rest_any = [&] {
    return repeat_of(cls(0, base - 1), int32_t(lo.size() - at - 1), int32_t(lo.size() - at - 1));
  };
  int a = lo[at], b = hi[at];
  if (a == b) return seq_of({cls(a, a), digits_between(lo, hi, at + 1, base, cls)});
  std::vector<int> top(lo.size(), base - 1), bottom(lo.size(), 0);
  std::vector<Expr> alts;
  int mid_lo = a + 1, mid_hi = b - 1;
  if (all(lo, 0)) {
    mid_lo = a;
  } else {
    alts.push_back(seq_of({cls(a, a), digits_between(lo, top, at + 1, base, cls)}));
  }
  bool hi_full = all(hi, base - 1);
  if (hi_full) mid_hi = b;
  if (mid_lo <= mid_hi) alts.push_back(seq_of({cls(mid_lo, mid_hi), rest_any()}));
  if (!hi_full) alts.push_back(seq_of({cls(b, b), digits_between(bottom, hi, at + 1, base, cls)}));
  return alt_of(std::move(alts));
}

std::vector<int> digits_of(const std::string& s) {
  std::vector<int> v;
  for (char c : s) v.push_back(c - '0');
  return v;
}

Expr dec_between(const std::string& lo, const std::string& hi) {
  return digits_between(digits_of(lo), digits_of(hi), 0, 10, digit_class);
}

// "\u" + 4 hex digits with value in [a, b] (a <= b <= 0xFFFF).
Expr hex4_between(uint32_t a, uint32_t b) {
  auto v = [](uint32_t x) {
    return std::vector<int>{int(x >> 12), int((x >> 8) & 15), int((x >> 4) & 15), int(x & 15)};
  };
  return seq_of({lit("\\u"), digits_between(v(a), v(b), 0, 16, hex_class)});
}

int cmp_uint(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

std::string inc(std::string s) {
  int i = int(s.size()) - 1;
  while (i >= 0 && s[size_t(i)] == '9') s[size_t(i--)] = '0';
  if (i < 0) return "1" + s;
  ++s[size_t(i)];
  return s;
}
// s - 1 for s >= 1.
std::string dec(std::string s) {
  int i = int(s.size()) - 1;
  while (s[size_t(i)] == '0') s[size_t(i--)] = '9';
  --s[size_t(i)];
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

// Canonical unsigned integers (no leading zeros) in [lo, hi] (hi absent: no bound) with at
// most kMaxIntDigits digits.
Expr uint_range(const std::string& lo, std::optional<std::string> hi) {
  if (int(lo.size()) > kMaxIntDigits) return never();
  if (hi && int(hi->size()) > kMaxIntDigits) hi.reset();
  if (hi && cmp_uint(lo, *hi) > 0) return never();
  size_t last = hi ? hi->size() : size_t(kMaxIntDigits);
  std::vector<Expr> alts;
  size_t full_from = 0, full_to = 0;  // a run of lengths whose range is every L-digit number
  auto flush = [&] {
    if (full_from == 0) return;
    alts.push_back(seq_of(
        {digit_class(1, 9), repeat_of(any_digit(), int32_t(full_from - 1), int32_t(full_to - 1))}));
    full_from = 0;
  };
  for (size_t len = lo.size(); len <= last; ++len) {
    std::string a = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
    std::string b = hi && len == hi->size() ? *hi : std::string(len, '9');
    bool full = len >= 2 && a == "1" + std::string(len - 1, '0') && b == std::string(len, '9');
    if (full) {
      if (full_from == 0) full_from = len;
      full_to = len;
      continue;
    }
    flush();
    alts.push_back(dec_between(a, b));
  }
  flush();
  return alt_of(std::move(alts));
}

// A bound on a fraction's digits T (value 0.T): the canonical digits (no trailing zeros, "" is
// zero), or nullopt for "no bound".
using FracBound = std::optional<std::string>;

// Fraction digit strings T (value 0.T) of length (nonempty ? 1 : 0)..budget with
// lo <= 0.T <= hi (strict: < / >). Recursion on the first digit: a digit strictly between the
// bounds' digits frees the rest, a digit equal to one bound's digit carries that bound on.
Expr frac_tail(FracBound lo, bool lo_strict, FracBound hi, bool hi_strict, int budget,
               bool nonempty) {
  if (lo && lo->empty() && !lo_strict) lo.reset();  // T >= 0 always holds
  if (!lo && !hi) return repeat_of(any_digit(), nonempty ? 1 : 0, budget);
  bool zero_ok = !lo && (!hi || !hi->empty() || !hi_strict);
  std::vector<Expr> alts;
  if (!nonempty && zero_ok) alts.push_back(Expr::empty());
  int tight_lo = lo ? (lo->empty() ? 0 : (*lo)[0] - '0') : -1;
  int tight_hi = hi ? (hi->empty() ? 0 : (*hi)[0] - '0') : 10;
  if (budget > 0 && tight_lo <= tight_hi) {
    auto rest = [](const FracBound& b) -> FracBound {
      return b->empty() ? std::string() : b->substr(1);
    };
    if (tight_lo + 1 <= tight_hi - 1)
      alts.push_back(
          seq_of({digit_class(tight_lo + 1, tight_hi - 1), repeat_of(any_digit(), 0, budget - 1)}));
    if (tight_lo == tight_hi) {
      alts.push_back(
          seq_of({digit_class(tight_lo, tight_lo),
                  frac_tail(rest(lo), lo_strict, rest(hi), hi_strict, budget - 1, false)}));
    } else {
      if (tight_lo >= 0)
        alts.push_back(
            seq_of({digit_class(tight_lo, tight_lo),
                    frac_tail(rest(lo), lo_strict, std::nullopt, false, budget - 1, false)}));
      if (tight_hi <= 9)
        alts.push_back(
            seq_of({digit_class(tight_hi, tight_hi),
                    frac_tail(std::nullopt, false, rest(hi), hi_strict, budget - 1, false)}));
    }
  }
  return alt_of(std::move(alts));
}

// "" or "." + fraction digits, the fraction's value within the bounds.
Expr fraction(FracBound lo, bool lo_strict, FracBound hi, bool hi_strict) {
  if (lo && lo->empty() && !lo_strict) lo.reset();
  bool zero_ok = !lo && (!hi || !hi->empty() || !hi_strict);
  return alt_of(
      {zero_ok ? Expr::empty() : never(),
       seq_of({lit("."), frac_tail(lo, lo_strict, hi, hi_strict, kMaxFracDigits, true)})});
}

Expr any_fraction() {
  return repeat_of(seq_of({lit("."), repeat_of(any_digit(), 1, kMaxFracDigits)}), 0, 1);
}
Expr zero_fraction() {
  return repeat_of(seq_of({lit("."), repeat_of(lit("0"), 1, kMaxFracDigits)}), 0, 1);
}

// Unsigned number texts (no exponent) with value in [lo, hi] (hi absent: no bound); lo >= 0.
Expr magnitude(const Bound& lo, const std::optional<Bound>& hi, bool integer_only) {
  if (integer_only) {
    std::string a = lo.v.is_integer() && !lo.strict ? lo.v.ip : inc(lo.v.ip);
    std::optional<std::string> b;
    if (hi) {
      if (hi->v.is_integer() && hi->strict) {
        if (hi->v.ip == "0") return never();
        b = dec(hi->v.ip);
      } else {
        b = hi->v.ip;
      }
    }
    return seq_of({uint_range(a, b), zero_fraction()});
  }
  const std::string& li = lo.v.ip;
  if (int(li.size()) > kMaxIntDigits) return never();
  FracBound lf = lo.v.fp;
  if (!hi || int(hi->v.ip.size()) > kMaxIntDigits) {
    return alt_of({seq_of({lit(li), fraction(lf, lo.strict, std::nullopt, false)}),
                   seq_of({uint_range(inc(li), std::nullopt), any_fraction()})});
  }
  const std::string& hi_ip = hi->v.ip;
  if (li == hi_ip) return seq_of({lit(li), fraction(lf, lo.strict, hi->v.fp, hi->strict)});
  std::vector<Expr> alts;
  alts.push_back(seq_of({lit(li), fraction(lf, lo.strict, std::nullopt, false)}));
  std::string mid_lo = inc(li), mid_hi = dec(hi_ip);
  if (cmp_uint(mid_lo, mid_hi) <= 0)
    alts.push_back(seq_of({uint_range(mid_lo, mid_hi), any_fraction()}));
  alts.push_back(seq_of({lit(hi_ip), fraction(std::nullopt, false, hi->v.fp, hi->strict)}));
  return alt_of(std::move(alts));
}

Decimal negate(Decimal d) {
  if (!d.is_zero()) d.neg = !d.neg;
  return d;
}

bool contains(const Ranges& r, uint32_t cp) {
  for (auto [lo, hi] : r)
    if (lo <= cp && cp <= hi) return true;
  return false;
}

Ranges intersect(const Ranges& r, uint32_t lo, uint32_t hi) {
  Ranges out;
  for (auto [a, b] : r) {
    uint32_t x = std::max(a, lo), y = std::min(b, hi);
    if (x <= y) out.push_back({x, y});
  }
  return out;
}

}  // namespace

Expr never() {
  return Expr::alt({});
}
bool is_never(const Expr& e) {
  return e.kind == Expr::Kind::kAlt && e.kids.empty();
}

Expr lit(std::string_view bytes) {
  return Expr::lit(std::string(bytes));
}

Expr seq_of(std::vector<Expr> kids) {
  std::vector<Expr> out;
  for (Expr& k : kids) {
    if (is_never(k)) return never();
    if (k.kind == Expr::Kind::kEmpty) continue;
    if (k.kind == Expr::Kind::kSeq) {
      for (Expr& g : k.kids) {
        if (g.kind == Expr::Kind::kLiteral && !out.empty() &&
            out.back().kind == Expr::Kind::kLiteral) {
          out.back().text += g.text;
        } else {
          out.push_back(std::move(g));
        }
      }
      continue;
    }
    if (k.kind == Expr::Kind::kLiteral && !out.empty() && out.back().kind == Expr::Kind::kLiteral) {
      out.back().text += k.text;
      continue;
    }
    out.push_back(std::move(k));
  }
  if (out.empty()) return Expr::empty();
  if (out.size() == 1) return std::move(out[0]);
  return Expr::seq(std::move(out));
}

Expr alt_of(std::vector<Expr> kids) {
  std::vector<Expr> out;
  for (Expr& k : kids) {
    if (k.kind == Expr::Kind::kAlt) {
      for (Expr& g : k.kids) out.push_back(std::move(g));
    } else {
      out.push_back(std::move(k));
    }
  }
  if (out.size() == 1) return std::move(out[0]);
  return Expr::alt(std::move(out));  // empty: never
}

Expr seq2(Expr a, Expr b) {
  std::vector<Expr> kids;
  kids.push_back(std::move(a));
  kids.push_back(std::move(b));
  return seq_of(std::move(kids));
}

Expr repeat_of(Expr kid, int32_t min, int32_t max) {
  if (is_never(kid)) return min == 0 ? Expr::empty() : never();
  if (max == 0 || kid.kind == Expr::Kind::kEmpty) return Expr::empty();
  if (min == 1 && max == 1) return kid;
  return Expr::repeat(std::move(kid), min, max);
}

Ranges normalize(Ranges r, bool negated) {
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (auto [lo, hi] : r) {
    if (lo > hi || lo > kMaxCodepoint) continue;
    hi = std::min(hi, kMaxCodepoint);
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  if (negated) {
    Ranges comp;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) comp.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= kMaxCodepoint) comp.push_back({next, kMaxCodepoint});
    merged = std::move(comp);
  }
  Ranges out;
  for (auto [lo, hi] : merged) {
    if (lo < kSurrogateLo) out.push_back({lo, std::min(hi, kSurrogateLo - 1)});
    if (hi > kSurrogateHi) out.push_back({std::max(lo, kSurrogateHi + 1), hi});
  }
  return out;
}

Expr spell_class(const Ranges& r, const Expr* high) {
  if (high) {
    const Ranges all_high = normalize({{0x80, kMaxCodepoint}}, false);
    if (intersect(r, 0x80, kMaxCodepoint) == all_high) {
      Expr low = spell_class(intersect(r, 0, 0x7F), nullptr);
      return alt_of({std::move(low), *high});
    }
  }
  std::vector<Expr> alts;
  // Raw: anything but '"', '' and control characters.
  Ranges raw;
  for (auto [lo, hi] : std::array<std::pair<uint32_t, uint32_t>, 3>{
           {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}}}) {
    Ranges part = intersect(r, lo, hi);
    raw.insert(raw.end(), part.begin(), part.end());
  }
  if (!raw.empty()) alts.push_back(Expr::cls(std::move(raw)));
  // Two-character escapes.
  static constexpr std::pair<uint32_t, char> kEscapes[] = {{0x22, '"'}, {0x5C, '\\'}, {0x2F, '/'},
                                                           {0x08, 'b'}, {0x0C, 'f'},  {0x0A, 'n'},
                                                           {0x0D, 'r'}, {0x09, 't'}};
  Ranges esc;
  for (auto [cp, c] : kEscapes)
    if (contains(r, cp)) esc.push_back({uint32_t(uint8_t(c)), uint32_t(uint8_t(c))});
  if (!esc.empty()) alts.push_back(seq_of({lit("\\"), Expr::cls(normalize(esc, false))}));
  // \uXXXX for the basic plane (surrogates are not in r).
  for (auto [lo, hi] : intersect(r, 0, 0xFFFF)) alts.push_back(hex4_between(lo, hi));
  // Surrogate pairs for the supplementary planes, split at high-surrogate boundaries.
  for (auto [lo, hi] : intersect(r, 0x10000, kMaxCodepoint)) {
    uint32_t ha = 0xD800 + ((lo - 0x10000) >> 10), la = 0xDC00 + ((lo - 0x10000) & 0x3FF);
    uint32_t hb = 0xD800 + ((hi - 0x10000) >> 10), lb = 0xDC00 + ((hi - 0x10000) & 0x3FF);
    if (ha == hb) {
      alts.push_back(seq_of({hex4_between(ha, ha), hex4_between(la, lb)}));
      continue;
    }
    alts.push_back(seq_of({hex4_between(ha, ha), hex4_between(la, 0xDFFF)}));
    if (ha + 1 <= hb - 1)
      alts.push_back(seq_of({hex4_between(ha + 1, hb - 1), hex4_between(0xDC00, 0xDFFF)}));
    alts.push_back(seq_of({hex4_between(hb, hb), hex4_between(0xDC00, lb)}));
  }
  return alt_of(std::move(alts));
}

Expr spell_char(uint32_t cp) {
  return spell_class({{cp, cp}});
}

Result<std::u32string> decode(std::string_view utf8) {
  std::u32string out;
  for (size_t i = 0; i < utf8.size();) {
    unicode::DecodedCp d = unicode::decode_utf8(utf8, i);
    if (!d.valid) return make_error("invalid UTF-8 at byte ", i);
    out.push_back(d.cp);
    i += d.len;
  }
  return out;
}

Result<Expr> spell_string(std::string_view utf8) {
  SLUICE_ASSIGN_OR_RETURN(std::u32string cps, decode(utf8));
  std::vector<Expr> parts;
  for (char32_t c : cps) parts.push_back(spell_char(uint32_t(c)));
  return seq_of(std::move(parts));
}

// One level of a trie over `here`: whether one of them ends at `depth`, and the others grouped
// by their code point there.
std::pair<bool, std::map<uint32_t, std::vector<const std::u32string*>>> trie_level(
    const std::vector<const std::u32string*>& here, size_t depth) {
  bool terminal = false;
  std::map<uint32_t, std::vector<const std::u32string*>> kids;
  for (const std::u32string* s : here) {
    if (s->size() == depth) {
      terminal = true;
    } else {
      kids[uint32_t((*s)[depth])].push_back(s);
    }
  }
  return {terminal, std::move(kids)};
}

Expr spell_one_of(const std::vector<std::u32string>& values) {
  std::function<Expr(const std::vector<const std::u32string*>&, size_t)> node =
      [&](const std::vector<const std::u32string*>& here, size_t depth) -> Expr {
    auto [terminal, kids] = trie_level(here, depth);
    std::vector<Expr> alts;
    if (terminal) alts.push_back(Expr::empty());
    for (const auto& [cp, sub] : kids) alts.push_back(seq2(spell_char(cp), node(sub, depth + 1)));
    return alt_of(std::move(alts));
  };
  std::vector<const std::u32string*> all;
  for (const auto& v : values) all.push_back(&v);
  return node(all, 0);
}

Expr spell_not_in(const std::vector<std::u32string>& names, const Expr& any_chars,
                  const Expr* high) {
  // Trie walk over the names' code points: at a node, the content may end (unless the node
  // spells a name), continue into a child, or leave the trie with any other code point.
  std::function<Expr(const std::vector<const std::u32string*>&, size_t)> node =
      [&](const std::vector<const std::u32string*>& here, size_t depth) -> Expr {
    auto [terminal, kids] = trie_level(here, depth);
    std::vector<Expr> alts;
    if (!terminal) alts.push_back(Expr::empty());
    Ranges taken;
    for (const auto& [cp, sub] : kids) {
      alts.push_back(seq2(spell_char(cp), node(sub, depth + 1)));
      taken.push_back({cp, cp});
    }
    Ranges other = normalize(taken, true);
    if (!other.empty()) alts.push_back(seq2(spell_class(other, high), any_chars));
    return alt_of(std::move(alts));
  };
  std::vector<const std::u32string*> all;
  for (const auto& n : names) all.push_back(&n);
  return node(all, 0);
}

Result<Expr> spell_regex(const Expr& e, const Expr* high) {
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      return Expr::empty();
    case Expr::Kind::kLiteral: {
      auto s = spell_string(e.text);
      if (!s.ok()) return make_error("pattern literal: ", s.message());
      return std::move(s).value();
    }
    case Expr::Kind::kClass:
      return spell_class(normalize(e.ranges, e.negated), high);
    case Expr::Kind::kByteClass:
    case Expr::Kind::kRef:
      return make_error("pattern: byte classes and rule references are not regex output");
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt: {
      std::vector<Expr> kids;
      for (const Expr& k : e.kids) {
        SLUICE_ASSIGN_OR_RETURN(Expr s, spell_regex(k, high));
        kids.push_back(std::move(s));
      }
      return e.kind == Expr::Kind::kSeq ? seq_of(std::move(kids)) : alt_of(std::move(kids));
    }
    case Expr::Kind::kRepeat: {
      SLUICE_ASSIGN_OR_RETURN(Expr k, spell_regex(e.kids.at(0), high));
      return repeat_of(std::move(k), e.min, e.max);
    }
  }
  return make_error("pattern: unknown expression kind");
}

Result<std::pair<int64_t, int64_t>> length_range(const Expr& e) {
  using R = std::pair<int64_t, int64_t>;
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      return R{0, 0};
    case Expr::Kind::kLiteral: {
      SLUICE_ASSIGN_OR_RETURN(std::u32string cps, decode(e.text));
      return R{int64_t(cps.size()), int64_t(cps.size())};
    }
    case Expr::Kind::kClass:
    case Expr::Kind::kByteClass:
      return R{1, 1};
    case Expr::Kind::kRef:
      return make_error("length of a rule reference");
    case Expr::Kind::kSeq: {
      R r{0, 0};
      for (const Expr& k : e.kids) {
        SLUICE_ASSIGN_OR_RETURN(R x, length_range(k));
        r.first += x.first;
        r.second = (r.second < 0 || x.second < 0) ? -1 : r.second + x.second;
      }
      return r;
    }
    case Expr::Kind::kAlt: {
      if (e.kids.empty()) return R{0, 0};
      R r{INT64_MAX, 0};
      for (const Expr& k : e.kids) {
        SLUICE_ASSIGN_OR_RETURN(R x, length_range(k));
        r.first = std::min(r.first, x.first);
        r.second = (r.second < 0 || x.second < 0) ? -1 : std::max(r.second, x.second);
      }
      return r;
    }
    case Expr::Kind::kRepeat: {
      SLUICE_ASSIGN_OR_RETURN(R x, length_range(e.kids.at(0)));
      int64_t hi = -1;
      if (x.second == 0) {
        hi = 0;
      } else if (e.max != kUnbounded && x.second > 0) {
        hi = x.second * e.max;
      }
      return R{x.first * e.min, hi};
    }
  }
  return make_error("length of an unknown expression kind");
}

Result<Decimal> parse_decimal(std::string_view t) {
  Decimal d;
  size_t i = 0;
  bool neg = i < t.size() && t[i] == '-';
  if (neg) ++i;
  std::string digits;
  int64_t point = -1;  // digits before the decimal point
  for (; i < t.size() && (std::isdigit(uint8_t(t[i])) || t[i] == '.'); ++i) {
    if (t[i] == '.') {
      if (point >= 0) return make_error("bad number '", t, "'");
      point = int64_t(digits.size());
    } else {
      digits += t[i];
    }
  }
  if (digits.empty()) return make_error("bad number '", t, "'");
  if (point < 0) point = int64_t(digits.size());
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool eneg = i < t.size() && t[i] == '-';
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
    int64_t e = 0;
    size_t start = i;
    for (; i < t.size() && std::isdigit(uint8_t(t[i])); ++i)
      e = std::min<int64_t>(e * 10 + (t[i] - '0'), 100000);
    if (i == start) return make_error("bad number '", t, "'");
    point += eneg ? -e : e;
  }
  if (i != t.size()) return make_error("bad number '", t, "'");
  if (point < -100000 || point > 100000) return make_error("number '", t, "' out of range");
  // Place the point: pad with zeros on either side.
  if (point < 0) {
    digits.insert(0, size_t(-point), '0');
    point = 0;
  }
  if (point > int64_t(digits.size())) digits.append(size_t(point - int64_t(digits.size())), '0');
  d.ip = digits.substr(0, size_t(point));
  d.fp = digits.substr(size_t(point));
  size_t nz = d.ip.find_first_not_of('0');
  d.ip = nz == std::string::npos ? "0" : d.ip.substr(nz);
  size_t last = d.fp.find_last_not_of('0');
  d.fp = last == std::string::npos ? "" : d.fp.substr(0, last + 1);
  d.neg = neg && !d.is_zero();
  return d;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  int m = cmp_uint(a.ip, b.ip);
  if (m == 0) m = a.fp < b.fp ? -1 : (a.fp == b.fp ? 0 : 1);
  return a.neg ? -m : m;
}

std::string to_string(const Decimal& d) {
  return (d.neg ? "-" : "") + d.ip + (d.fp.empty() ? "" : "." + d.fp);
}

Expr number_range(const std::optional<Bound>& lo, const std::optional<Bound>& hi,
                  bool integer_only) {
  if (lo && hi) {
    int c = compare(lo->v, hi->v);
    if (c > 0 || (c == 0 && (lo->strict || hi->strict))) return never();
  }
  std::vector<Expr> alts;
  // Texts without '-': the value is the magnitude M, M in [max(lo, 0), hi].
  if (!hi || !hi->v.neg) {
    Bound mlo = lo && !lo->v.neg ? *lo : Bound{};
    alts.push_back(magnitude(mlo, hi, integer_only));
  }
  // Texts with '-': the value is -M, so M in [max(-hi, 0), -lo] ("-0" is 0).
  if (!lo || lo->v.neg || lo->v.is_zero()) {
    Bound mlo = hi && (hi->v.neg || hi->v.is_zero()) ? Bound{negate(hi->v), hi->strict} : Bound{};
    std::optional<Bound> mhi;
    if (lo) mhi = Bound{negate(lo->v), lo->strict};
    alts.push_back(seq_of({lit("-"), magnitude(mlo, mhi, integer_only)}));
  }
  return alt_of(std::move(alts));
}

Expr scientific(const Decimal& d) {
  if (d.is_zero()) return never();
  std::string sig;
  int64_t exp;
  if (d.ip != "0") {
    exp = int64_t(d.ip.size()) - 1;
    sig = d.ip + d.fp;
  } else {
    size_t z = d.fp.find_first_not_of('0');
    exp = -int64_t(z) - 1;
    sig = d.fp.substr(z);
  }
  while (sig.size() > 1 && sig.back() == '0') sig.pop_back();
  std::string e = std::to_string(exp < 0 ? -exp : exp);
  if (exp == 0 || int(e.size()) > kMaxExpDigits || int(sig.size()) - 1 > kMaxFracDigits)
    return never();
  Decimal m;
  m.ip = sig.substr(0, 1);
  m.fp = sig.substr(1);
  Expr mantissa = number_range(Bound{m, false}, Bound{m, false}, false);
  Expr sign = exp < 0 ? lit("-") : repeat_of(lit("+"), 0, 1);
  return seq_of({d.neg ? lit("-") : Expr::empty(), std::move(mantissa),
                 Expr::cls({{'e', 'e'}, {'E', 'E'}}), std::move(sign),
                 repeat_of(lit("0"), 0, kMaxExpDigits - int32_t(e.size())), lit(e)});
}

Expr any_number() {
  Expr ip =
      alt_of({lit("0"), seq_of({digit_class(1, 9), repeat_of(any_digit(), 0, kMaxIntDigits - 1)})});
  Expr exp = repeat_of(seq_of({Expr::cls({{'e', 'e'}, {'E', 'E'}}),
                               repeat_of(Expr::cls({{'+', '+'}, {'-', '-'}}), 0, 1),
                               repeat_of(any_digit(), 1, kMaxExpDigits)}),
                       0, 1);
  return seq_of({repeat_of(lit("-"), 0, 1), std::move(ip), any_fraction(), std::move(exp)});
}

Expr any_integer() {
  Expr ip =
      alt_of({lit("0"), seq_of({digit_class(1, 9), repeat_of(any_digit(), 0, kMaxIntDigits - 1)})});
  return seq_of({repeat_of(lit("-"), 0, 1), std::move(ip), zero_fraction()});
}

Expr any_non_integer() {
  Expr ip =
      alt_of({lit("0"), seq_of({digit_class(1, 9), repeat_of(any_digit(), 0, kMaxIntDigits - 1)})});
  return seq_of({repeat_of(lit("-"), 0, 1), std::move(ip),
                 fraction(std::string(), true, std::nullopt, false)});
}

Expr whitespace(int32_t max_indent) {
  return alt_of({Expr::empty(), lit(" "),
                 seq_of({lit("\n"), repeat_of(Expr::cls({{' ', ' '}, {'\t', '\t'}}), 0,
                                              std::max(max_indent, 0))})});
}

Expr multiple_of(int64_t m, const std::function<std::string(Expr)>& add_rule) {
  // States (remainder r, digits left): R(r, k) ::= [d] R((10r+d)%m, k-1) | "" if r == 0.
  // Built from k = 0 upward so every reference names an existing rule.
  std::vector<std::string> prev(static_cast<size_t>(m)), cur(static_cast<size_t>(m));
  auto tail = [&](int64_t r) { return r == 0 ? Expr::empty() : never(); };
  for (int k = 1; k <= kMaxIntDigits - 1; ++k) {
    for (int64_t r = 0; r < m; ++r) {
      std::vector<Expr> alts = {tail(r)};
      for (int d = 0; d <= 9; ++d) {
        int64_t nr = (10 * r + d) % m;
        if (k > 1 && prev[size_t(nr)].empty()) continue;  // a dead state
        Expr next = k == 1 ? tail(nr) : Expr::ref(prev[size_t(nr)]);
        if (is_never(next)) continue;
        alts.push_back(seq_of({lit(std::string(1, char('0' + d))), std::move(next)}));
      }
      Expr body = alt_of(std::move(alts));
      cur[size_t(r)] = is_never(body) ? std::string() : add_rule(body);
    }
    prev.swap(cur);
  }
  std::vector<Expr> first;
  for (int d = 1; d <= 9; ++d)
    if (!prev[size_t(d % m)].empty())
      first.push_back(seq_of({lit(std::string(1, char('0' + d))), Expr::ref(prev[size_t(d % m)])}));
  Expr magnitude = alt_of({lit("0"), alt_of(std::move(first))});
  return seq_of({repeat_of(lit("-"), 0, 1), std::move(magnitude),
                 repeat_of(seq_of({lit("."), repeat_of(lit("0"), 1, kMaxFracDigits)}), 0, 1)});
}

}  // namespace sluice::grammar::json_lex
