// lower(): GrammarSpec -> Grammar (byte sets, rule references, tail calls), and its checks.
#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace sluice::grammar {

namespace {

constexpr int kMaxExprDepth =
    512;  // nesting of expressions (a hostile spec must not overflow the stack)

using Elem = uint32_t;  // Grammar::Kind << 30 | arg
using Seq = std::vector<Elem>;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Elem make_elem(Grammar::Kind k, uint32_t arg) {
  return uint32_t(k) << 30 | arg;
}
Grammar::Kind elem_kind(Elem e) {
  return Grammar::Kind(e >> 30);
}
uint32_t elem_arg(Elem e) {
  return e & 0x3FFFFFFF;
}

// Sorted, merged, inclusive ranges; `negated` complements them over [0, max_value].
Ranges normalize(Ranges r, bool negated, uint32_t max_value) {
  std::sort(r.begin(), r.end());
  Ranges m;
  for (auto [lo, hi] : r) {
    if (!m.empty() && lo <= m.back().second + 1)
      m.back().second = std::max(m.back().second, hi);
    else
      m.push_back({lo, hi});
  }
  if (!negated) return m;
  Ranges c;
  uint32_t next = 0;
  for (auto [lo, hi] : m) {
    if (lo > next) c.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= max_value) c.push_back({next, max_value});
  return c;
}

void encode_utf8(uint32_t cp, uint8_t* out, int n) {
  if (n == 1) {
    out[0] = uint8_t(cp);
    return;
  }
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = uint8_t(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = uint8_t(kLead[n] | cp);
}

// Code points [lo, hi] of one encoded length n -> byte-range sequences whose concatenation
// is exactly their UTF-8 encodings: split until, for every continuation depth, the range
// either shares the higher bits or spans all values of the lower ones (then each byte varies
// independently).
void utf8_sequences(uint32_t lo, uint32_t hi, int n,
                    std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (int i = 1; i < n; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, n, out);
        utf8_sequences((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, n, out);
        utf8_sequences(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode_utf8(lo, a, n);
  encode_utf8(hi, b, n);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

// Builds the rules, then checks and flattens them.
class Lowering {
 public:
  Lowering(const GrammarSpec& spec, const LowerLimits& limits) : spec_(spec), limits_(limits) {}

  Result<std::shared_ptr<const Grammar>> run() {
    for (const auto& [name, e] : spec_.rules) {
      if (by_name_.count(name)) return make_error("grammar: rule '", name, "' is defined twice");
      by_name_[name] = new_rule(name);
      bodies_[name] = &e;
    }
    auto root = by_name_.find(spec_.root);
    if (root == by_name_.end()) return make_error("grammar: no rule named '", spec_.root, "'");
    for (bool changed = true; changed;) {  // which rules can match the empty string
      changed = false;
      for (const auto& [name, e] : spec_.rules)
        if (!nullable_rules_.count(name) && nullable(e, 0))
          changed = nullable_rules_.insert(name).second;
    }
    for (size_t i = 0; i < spec_.rules.size(); ++i) {
      std::vector<Seq> alts;
      SLUICE_RETURN_IF_ERROR(alts_of(spec_.rules[i].second, alts, 0));
      rules_[i] = std::move(alts);
    }
    // Non-empty variants of rules made by strip_empty(), lowered as they are discovered.
    while (!pending_.empty()) {
      auto [r, e] = std::move(pending_.back());
      pending_.pop_back();
      std::vector<Seq> alts;
      SLUICE_RETURN_IF_ERROR(alts_of(*e, alts, 0));
      rules_[r] = std::move(alts);
    }
    for (const auto& [name, check] : spec_.checked) {
      auto it = by_name_.find(name);
      if (it == by_name_.end())
        return make_error("grammar: no rule named '", name, "' (a checked rule)");
      checked_[it->second] = check;
    }
    inline_small_rules();
    SLUICE_RETURN_IF_ERROR(check_left_recursion());
    return flatten(root->second);
  }

 private:
  uint32_t new_rule(std::string name) {
    rules_.emplace_back();
    names_.push_back(std::move(name));
    return uint32_t(rules_.size() - 1);
  }
  uint32_t helper_rule(std::vector<Seq> alts) {
    uint32_t r = new_rule("_h" + std::to_string(rules_.size()));
    rules_[r] = std::move(alts);
    return r;
  }
  Elem set_elem(const ByteSet& s) {
    auto [it, fresh] = set_ids_.try_emplace(s.w, uint32_t(sets_.size()));
    if (fresh) sets_.push_back(s);
    return make_elem(Grammar::kBytes, it->second);
  }
  Status count(int64_t n) {
    n_elems_ += n;
    if (n_elems_ > limits_.max_elements)
      return make_error("grammar: too large (more than ", limits_.max_elements,
                        " elements after expanding repeats)");
    return {};
  }

  Status class_elems(const Expr& e, Seq& out) {
    for (auto [lo, hi] : e.ranges)
      if (lo > hi) return make_error("grammar: inverted class range ", lo, "-", hi);
    bool bytes = e.kind == Expr::Kind::kByteClass;
    uint32_t max_value = bytes ? 255 : kMaxCodepoint;
    Ranges r;
    for (auto [lo, hi] : e.ranges) {
      if (lo > max_value) continue;
      r.push_back({lo, std::min(hi, max_value)});
    }
    r = normalize(std::move(r), e.negated, max_value);
    if (bytes) {
      ByteSet s;
      for (auto [lo, hi] : r) s.add_range(lo, hi);
      if (s == ByteSet{}) return make_error("grammar: a byte class that matches nothing");
      out.push_back(set_elem(s));
      return count(1);
    }
    std::string key;
    for (auto [lo, hi] : r) key += std::to_string(lo) + "-" + std::to_string(hi) + ",";
    if (auto it = class_rules_.find(key); it != class_rules_.end()) {
      out.push_back(it->second);
      return count(1);
    }
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    static constexpr uint32_t kLenEnd[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
    for (auto [lo, hi] : r) {
      for (int n = 1; n <= 4; ++n) {
        uint32_t start = n == 1 ? 0 : kLenEnd[n - 2] + 1;
        uint32_t a = std::max(lo, start), b = std::min(hi, kLenEnd[n - 1]);
        if (a > b) continue;
        if (n == 3) {  // no surrogates
          if (a < 0xD800) utf8_sequences(a, std::min(b, 0xD7FFu), 3, seqs);
          if (b > 0xDFFF) utf8_sequences(std::max(a, 0xE000u), b, 3, seqs);
        } else {
          utf8_sequences(a, b, n, seqs);
        }
      }
    }
    if (seqs.empty()) return make_error("grammar: a character class that matches nothing");
    // The one-byte sequences (ASCII) as one byte set: one alternative, not one per range, so
    // that a class like JSON's string character [ -!#-[\]-\x7F] is a single element that
    // later inlining can put into the enclosing loop's frame.
    std::vector<Seq> alts;
    ByteSet ascii;
    for (const auto& s : seqs)
      if (s.size() == 1) ascii.add_range(s[0].first, s[0].second);
    if (ascii != ByteSet{}) alts.push_back({set_elem(ascii)});
    for (const auto& s : seqs) {
      if (s.size() == 1) continue;
      Seq q;
      for (auto [lo, hi] : s) {
        ByteSet set;
        set.add_range(lo, hi);
        q.push_back(set_elem(set));
      }
      alts.push_back(std::move(q));
    }
    SLUICE_RETURN_IF_ERROR(count(int64_t(seqs.size()) * 2));
    Elem el;
    if (alts.size() == 1 && alts[0].size() == 1) {
      el = alts[0][0];
      out.push_back(el);
    } else {
      el = make_elem(Grammar::kRule, helper_rule(std::move(alts)));
      out.push_back(el);
    }
    class_rules_[key] = el;
    return {};
  }

  Status seq_of(const Expr& e, Seq& out, int depth) {
    if (depth > kMaxExprDepth)
      return make_error("grammar: expression nested deeper than ", kMaxExprDepth);
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return {};
      case Expr::Kind::kLiteral:
        for (unsigned char c : e.text) {
          ByteSet s;
          s.add(c);
          out.push_back(set_elem(s));
        }
        return count(int64_t(e.text.size()));
      case Expr::Kind::kClass:
      case Expr::Kind::kByteClass:
        return class_elems(e, out);
      case Expr::Kind::kRef: {
        auto it = by_name_.find(e.text);
        if (it == by_name_.end())
          return make_error("grammar: reference to undefined rule '", e.text, "'");
        out.push_back(make_elem(Grammar::kRule, it->second));
        return count(1);
      }
      case Expr::Kind::kSeq:
        for (const Expr& k : e.kids) SLUICE_RETURN_IF_ERROR(seq_of(k, out, depth + 1));
        return {};
      case Expr::Kind::kAlt: {
        if (e.kids.size() == 1) return seq_of(e.kids[0], out, depth + 1);
        std::vector<Seq> alts;
        SLUICE_RETURN_IF_ERROR(alts_of(e, alts, depth + 1));
        if (alts.empty()) return make_error("grammar: an alternation with no alternatives");
        out.push_back(make_elem(Grammar::kRule, helper_rule(std::move(alts))));
        return count(1);
      }
      case Expr::Kind::kRepeat:
        return repeat_of(e, out, depth);
    }
    return {};
  }

  // Can `e` match the empty string (rules per nullable_rules_, a fixpoint in run())?
  bool nullable(const Expr& e, int depth) const {
    if (depth > kMaxExprDepth) return false;  // seq_of() reports the depth
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return true;
      case Expr::Kind::kLiteral:
        return e.text.empty();
      case Expr::Kind::kClass:
      case Expr::Kind::kByteClass:
        return false;
      case Expr::Kind::kRef:
        return nullable_rules_.count(e.text) > 0;
      case Expr::Kind::kSeq:
        return std::all_of(e.kids.begin(), e.kids.end(),
                           [&](const Expr& k) { return nullable(k, depth + 1); });
      case Expr::Kind::kAlt:
        return std::any_of(e.kids.begin(), e.kids.end(),
                           [&](const Expr& k) { return nullable(k, depth + 1); });
      case Expr::Kind::kRepeat:
        return e.min == 0 || (!e.kids.empty() && nullable(e.kids[0], depth + 1));
    }
    return false;
  }

  // An expression for L(e) minus the empty string; nullopt when that is empty. A repeat of
  // something that can be empty is rewritten with it ((x?)+ is ([x])*), because nested such
  // repeats make the closure explore exponentially many stacks (found by gbnf_fuzz:
  // `"x" [ ]?++++++++++++++++++`).
  std::optional<Expr> strip_empty(const Expr& e, int depth) {
    if (depth > kMaxExprDepth) return e;
    if (!nullable(e, depth)) return e;
    switch (e.kind) {
      case Expr::Kind::kEmpty:
      case Expr::Kind::kLiteral:  // nullable only when empty
        return std::nullopt;
      case Expr::Kind::kRef: {
        const std::string name = e.text + "\\e";  // not a name any front end can write
        if (!by_name_.count(name)) {
          std::optional<Expr> body = strip_empty(*bodies_.at(e.text), depth + 1);
          if (!body) return std::nullopt;
          stripped_.push_back(std::make_unique<Expr>(std::move(*body)));
          uint32_t r = new_rule(name);
          by_name_[name] = r;
          pending_.emplace_back(r, stripped_.back().get());
        }
        return Expr::ref(name);
      }
      case Expr::Kind::kAlt: {
        std::vector<Expr> kids;
        for (const Expr& k : e.kids)
          if (auto s = strip_empty(k, depth + 1)) kids.push_back(std::move(*s));
        if (kids.empty()) return std::nullopt;
        return kids.size() == 1 ? std::move(kids[0]) : Expr::alt(std::move(kids));
      }
      case Expr::Kind::kSeq: {
        // (a rest) minus "" = (a minus "") rest | rest minus ""   (a is nullable here)
        std::vector<Expr> alts;
        for (size_t i = 0; i < e.kids.size(); ++i) {
          auto head = strip_empty(e.kids[i], depth + 1);
          if (head) {
            std::vector<Expr> seq{std::move(*head)};
            seq.insert(seq.end(), e.kids.begin() + ptrdiff_t(i) + 1, e.kids.end());
            alts.push_back(Expr::seq(std::move(seq)));
          }
        }
        if (alts.empty()) return std::nullopt;
        return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
      }
      case Expr::Kind::kRepeat: {
        if (e.kids.empty() || e.max == 0) return std::nullopt;
        auto x = strip_empty(e.kids[0], depth + 1);
        if (!x) return std::nullopt;
        return Expr::repeat(std::move(*x), 1, e.max);
      }
      default:
        return e;
    }
  }

  Status repeat_of(const Expr& e, Seq& out, int depth) {
    if (e.kids.size() != 1) return make_error("grammar: a repeat needs exactly one operand");
    int32_t lo = e.min, hi = e.max;
    if (lo < 0 || (hi != kUnbounded && hi < lo))
      return make_error("grammar: invalid repeat bounds {", lo, ",", hi, "}");
    if (lo > limits_.max_repeat || hi > limits_.max_repeat)
      return make_error("grammar: repeat bound above the limit of ", limits_.max_repeat);
    if (nullable(e.kids[0], depth + 1)) {
      // x{lo,hi} with x nullable = (x minus ""){0,hi}.
      auto stripped = strip_empty(e.kids[0], depth + 1);
      if (!stripped) return {};
      return repeat_of(Expr::repeat(std::move(*stripped), 0, hi), out, depth + 1);
    }
    Seq x;
    SLUICE_RETURN_IF_ERROR(seq_of(e.kids[0], x, depth + 1));
    if (x.empty()) return {};  // a repeat of the empty string is the empty string
    // Copies of a long operand share one rule.
    if (x.size() > 4 && (lo > 1 || hi != lo)) x = {make_elem(Grammar::kRule, helper_rule({x}))};
    // What may follow the lo required copies: S ::= x S | "" (unbounded), or hi - lo optional
    // copies O_1 ::= x | "", O_k ::= x O_(k-1) | "".
    Seq tail;
    if (hi == kUnbounded) {
      uint32_t s = new_rule("_h" + std::to_string(rules_.size()));
      Seq loop = x;
      loop.push_back(make_elem(Grammar::kRule, s));
      rules_[s] = {loop, Seq{}};
      tail.push_back(make_elem(Grammar::kRule, s));
      SLUICE_RETURN_IF_ERROR(count(int64_t(x.size()) + 2));
    } else if (hi > lo) {
      uint32_t prev = 0;
      for (int32_t k = 1; k <= hi - lo; ++k) {
        Seq body = x;
        if (k > 1) body.push_back(make_elem(Grammar::kRule, prev));
        prev = helper_rule({body, Seq{}});
        SLUICE_RETURN_IF_ERROR(count(int64_t(x.size()) + 2));
      }
      tail.push_back(make_elem(Grammar::kRule, prev));
    }
    SLUICE_RETURN_IF_ERROR(count(int64_t(lo) * int64_t(x.size() + 1)));
    if (lo >= 1 && elem_kind(x[0]) == Grammar::kRule && (lo > 1 || !tail.empty())) {
      // x starts with a rule: the required copies as a chain C_1 ::= x tail, C_k ::= x C_(k-1)
      // whose rules all start with x, so that inlining (inline_small_rules) puts x's bytes in
      // one frame with the rest of the repeat. Inline copies (`char char O_k`) would each be
      // a frame of one character, and the mask cache would leave every longer token to the
      // run-time sweep.
      Seq body = x;
      body.insert(body.end(), tail.begin(), tail.end());
      uint32_t c = helper_rule({body});
      for (int32_t k = 2; k <= lo; ++k) {
        body = x;
        body.push_back(make_elem(Grammar::kRule, c));
        c = helper_rule({body});
      }
      out.push_back(make_elem(Grammar::kRule, c));
      return {};
    }
    for (int32_t i = 0; i < lo; ++i) out.insert(out.end(), x.begin(), x.end());
    out.insert(out.end(), tail.begin(), tail.end());
    return {};
  }

  Status alts_of(const Expr& e, std::vector<Seq>& out, int depth) {
    if (depth > kMaxExprDepth)
      return make_error("grammar: expression nested deeper than ", kMaxExprDepth);
    if (e.kind == Expr::Kind::kAlt) {
      for (const Expr& k : e.kids) SLUICE_RETURN_IF_ERROR(alts_of(k, out, depth + 1));
      return {};
    }
    Seq s;
    SLUICE_RETURN_IF_ERROR(seq_of(e, s, depth + 1));
    out.push_back(std::move(s));
    return {};
  }

  // A small rule referenced first in an alternative is substituted there: the matcher's
  // top frame then spans the enclosing loop (`S ::= char S | ""` becomes `S ::= [a-z] S |
  // [xC3][x80-xBF] S | ... | ""`), which is what makes the per-position token-mask cache
  // (token_mask.h) decide most tokens without knowing the context below. Repeated (up to
  // kInlineRounds) so that a small rule that itself starts with one (JSON's `char` starts with
  // the UTF-8 sequences of `char-high`) is flattened all the way.
  void inline_small_rules() {
    constexpr int kInlineRounds = 4;
    const size_t n = rules_.size();
    const uint32_t root = by_name_[spec_.root];
    std::vector<bool> small(n);
    std::vector<std::vector<Seq>> small_body(n);  // the small rules as the round began
    for (int round = 0; round < kInlineRounds; ++round) {
      int64_t total = 0;
      for (size_t r = 0; r < n; ++r) {
        size_t elems = 0;
        bool self = false;
        for (const Seq& a : rules_[r]) {
          elems += a.size() + 1;
          for (Elem e : a) self |= elem_kind(e) == Grammar::kRule && elem_arg(e) == r;
        }
        total += int64_t(elems);
        small[r] = !self && !rules_[r].empty() && rules_[r].size() <= 16 && elems <= 112 &&
                   r != root && !checked_.count(uint32_t(r));  // a checked rule keeps its frame
        small_body[r] = small[r] ? rules_[r] : std::vector<Seq>{};
      }
      // Inlining copies elements: it stops where the grammar would outgrow the limit.
      int64_t budget = limits_.max_elements - total;
      auto inlined_here = [&](const Seq& a, uint32_t r) {
        return !a.empty() && elem_kind(a[0]) == Grammar::kRule && small[elem_arg(a[0])] &&
               elem_arg(a[0]) != r;
      };
      bool any = false;
      for (uint32_t r = 0; r < n; ++r) {
        if (std::none_of(rules_[r].begin(), rules_[r].end(),
                         [&](const Seq& a) { return inlined_here(a, r); }))
          continue;
        std::vector<Seq> out;
        for (Seq& a : rules_[r]) {
          const std::vector<Seq>* sub = inlined_here(a, r) ? &small_body[elem_arg(a[0])] : nullptr;
          int64_t cost = 0;
          if (sub)
            for (const Seq& q : *sub) cost += int64_t(q.size() + a.size());
          if (!sub || cost > budget) {
            out.push_back(std::move(a));
            continue;
          }
          budget -= cost;
          for (const Seq& q : *sub) {
            Seq x = q;
            x.insert(x.end(), a.begin() + 1, a.end());
            out.push_back(std::move(x));
          }
          any = true;
        }
        rules_[r] = std::move(out);
      }
      if (!any) break;
    }
  }

  // A rule that can reach itself without consuming a byte, through a reference that is not a
  // tail call, would grow the stack forever in the closure: refused. (Cycles of tail calls
  // only re-create the same stacks, which the closure's visited set stops.)
  Status check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& a : rules_[r]) {
          bool all = std::all_of(a.begin(), a.end(), [&](Elem e) {
            return elem_kind(e) == Grammar::kRule && nullable[elem_arg(e)];
          });
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    struct Edge {
      uint32_t to;
      bool tail;
    };
    std::vector<std::vector<Edge>> edges(n);
    for (size_t r = 0; r < n; ++r)
      for (const Seq& a : rules_[r])
        for (size_t i = 0; i < a.size(); ++i) {
          if (elem_kind(a[i]) != Grammar::kRule) break;
          edges[r].push_back({elem_arg(a[i]), i + 1 == a.size()});
          if (!nullable[elem_arg(a[i])]) break;
        }
    // Tarjan's strongly connected components, iteratively.
    std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
    std::vector<bool> on(n);
    std::vector<uint32_t> stack;
    int32_t next = 0, n_comp = 0;
    for (uint32_t s = 0; s < n; ++s) {
      if (index[s] >= 0) continue;
      std::vector<std::pair<uint32_t, size_t>> work{{s, 0}};
      index[s] = low[s] = next++;
      stack.push_back(s);
      on[s] = true;
      while (!work.empty()) {
        auto& [v, i] = work.back();
        if (i < edges[v].size()) {
          uint32_t w = edges[v][i++].to;
          if (index[w] < 0) {
            index[w] = low[w] = next++;
            stack.push_back(w);
            on[w] = true;
            work.push_back({w, 0});
          } else if (on[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          uint32_t w;
          do {
            w = stack.back();
            stack.pop_back();
            on[w] = false;
            comp[w] = n_comp;
          } while (w != v);
          ++n_comp;
        }
        uint32_t done = v;
        work.pop_back();
        if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
      }
    }
    for (size_t r = 0; r < n; ++r)
      for (const Edge& e : edges[r])
        if (!e.tail && comp[e.to] == comp[r])
          return make_error("grammar: rule '", display_name(uint32_t(r)),
                            "' is left-recursive (it can reach '", display_name(e.to),
                            "' again without consuming input)");
    return {};
  }

  std::string display_name(uint32_t r) const {
    return names_[r].starts_with("_h") ? "a repetition or group inside another rule" : names_[r];
  }

  Result<std::shared_ptr<const Grammar>> flatten(uint32_t root) {
    auto g = std::make_shared<Grammar>();
    g->sets_ = sets_;
    g->names_ = names_;
    g->root_ = root;
    g->alts_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Seq& a : rules_[r]) {
        g->alts_[r].push_back(uint32_t(g->elems_.size()));
        g->elems_.insert(g->elems_.end(), a.begin(), a.end());
        g->elems_.push_back(make_elem(Grammar::kEnd, 0));
      }
    if (!checked_.empty()) {
      g->check_ret_.assign(g->elems_.size(), 0);
      for (size_t p = 0; p + 1 < g->elems_.size(); ++p) {
        const Elem e = g->elems_[p];
        if (elem_kind(e) != Grammar::kRule) continue;
        auto it = checked_.find(elem_arg(e));
        if (it == checked_.end()) continue;
        if (elem_kind(g->elems_[p + 1]) == Grammar::kEnd)
          return make_error("grammar: the checked rule '", names_[it->first],
                            "' ends an alternative (its text could not be told apart)");
        g->check_ret_[p + 1] = uint8_t(it->second);
      }
    }
    return std::shared_ptr<const Grammar>(std::move(g));
  }

  const GrammarSpec& spec_;
  LowerLimits limits_;
  std::unordered_map<std::string, const Expr*> bodies_;  // spec rule name -> its expression
  std::unordered_set<std::string> nullable_rules_;
  std::vector<std::unique_ptr<Expr>> stripped_;            // bodies of the "minus empty" rules
  std::vector<std::pair<uint32_t, const Expr*>> pending_;  // such rules still to lower
  std::vector<std::vector<Seq>> rules_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> by_name_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
  std::unordered_map<std::string, Elem> class_rules_;
  std::unordered_map<uint32_t, StringCheck> checked_;  // rule -> its check
  int64_t n_elems_ = 0;
};

Result<std::shared_ptr<const Grammar>> lower(const GrammarSpec& spec, const LowerLimits& limits) {
  return Lowering(spec, limits).run();
}

std::string Grammar::dump() const {
  auto hex = [](uint32_t b) {
    static const char* d = "0123456789ABCDEF";
    return std::string{'x', d[b >> 4], d[b & 15]};
  };
  std::string out;
  for (size_t r = 0; r < alts_.size(); ++r) {
    out += names_[r] + " ::=";
    for (size_t a = 0; a < alts_[r].size(); ++a) {
      out += a ? " |" : "";
      for (uint32_t p = alts_[r][a]; kind(p) != kEnd; ++p) {
        if (kind(p) == kRule) {
          out += " " + names_[arg(p)];
          continue;
        }
        out += " [";
        const ByteSet& s = bytes(p);
        for (uint32_t b = 0; b < 256; ++b) {
          if (!s.has(uint8_t(b))) continue;
          uint32_t e = b;
          while (e + 1 < 256 && s.has(uint8_t(e + 1))) ++e;
          out += hex(b) + (e > b ? "-" + hex(e) : "");
          b = e;
        }
        out += "]";
      }
      if (kind(alts_[r][a]) == kEnd) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace sluice::grammar
