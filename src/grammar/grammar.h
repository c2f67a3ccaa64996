// Byte-level grammars and the matcher that walks them.
//
// lower() turns a GrammarSpec (expr.h) into a Grammar: rules whose alternatives are sequences
// of byte sets and rule references, in one flat array. Code point classes become UTF-8 byte
// sequences, repeats become helper rules, so the matcher knows nothing but bytes and rules.
//
//   elems_: [B0 R3 B1 END | B2 END | R5 END | ...]      B = byte set, R = rule ref
//            ^alt 0 of rule 0  ^alt 1   ^alt 0 of rule 1
//
// A Matcher is a pushdown automaton over that grammar: its state is a set of stacks, each
// stack a path of positions (the innermost rule's next element on top). Stacks are persistent
// linked lists interned in a StackStore, so equal stacks are one id, advancing a stack shares
// its tail, and a state is a small sorted vector of ids (cheap to copy, compare and roll
// back). A reference that ends an alternative is a tail call (the frame is replaced, not
// pushed), so right recursion (`list ::= item list | ""`) runs in constant stack depth.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/expr.h"
#include "grammar/string_checks.h"

namespace sluice::grammar {

// 256-bit set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint32_t lo, uint32_t hi) {
    for (uint32_t b = lo; b <= hi && b < 256; ++b) add(uint8_t(b));
  }
  bool operator==(const ByteSet&) const = default;
};

// Limits that keep a hostile grammar from exhausting memory or time (compile errors, not
// crashes). Defaults fit every schema and GBNF file seen in practice.
struct LowerLimits {
  int64_t max_elements = 2'000'000;  // flat elements over all rules
  int32_t max_repeat = 10'000;       // bounded repeat counts ({m,n}, maxLength ...)
};

// A lowered grammar. Immutable; shared by every matcher (and thread) that uses it.
class Grammar {
 public:
  enum Kind : uint32_t { kBytes = 0, kRule = 1, kEnd = 2 };

  Kind kind(uint32_t pos) const { return Kind(elems_[pos] >> 30); }
  uint32_t arg(uint32_t pos) const { return elems_[pos] & 0x3FFFFFFF; }
  const ByteSet& bytes(uint32_t pos) const { return sets_[arg(pos)]; }
  // First element of each alternative of rule `r`.
  const std::vector<uint32_t>& alts(uint32_t r) const { return alts_[r]; }
  uint32_t root() const { return root_; }
  size_t n_rules() const { return alts_.size(); }
  size_t n_elems() const { return elems_.size(); }
  const std::string& rule_name(uint32_t r) const { return names_[r]; }
  // Checked rules (GrammarSpec::checked): a stack whose top is `check_at(pos) != kNone` has
  // just finished such a rule's text; one with such a frame below its top is inside it. The
  // matcher runs the check on the text since the string's opening quote.
  bool has_checks() const { return !check_ret_.empty(); }
  StringCheck check_at(uint32_t pos) const {
    return check_ret_.empty() ? StringCheck::kNone : StringCheck(check_ret_[pos]);
  }
  // A readable dump (GBNF-like, bytes as [xx-yy]) for debugging and error messages.
  std::string dump() const;

 private:
  friend class Lowering;
  std::vector<uint32_t> elems_;              // kind << 30 | arg
  std::vector<ByteSet> sets_;                // distinct byte sets
  std::vector<std::vector<uint32_t>> alts_;  // [rule] -> alternative starts in elems_
  std::vector<std::string> names_;           // [rule]
  std::vector<uint8_t> check_ret_;           // [element] StringCheck after a checked rule; or empty
  uint32_t root_ = 0;
};

// GrammarSpec -> Grammar. Errors: a reference to an undefined rule, no root rule, left
// recursion, a repeat with min > max or a bound above the limit, an empty or inverted class
// range, a grammar too large.
Result<std::shared_ptr<const Grammar>> lower(const GrammarSpec& spec,
                                             const LowerLimits& limits = {});

// Interned stack nodes: node id -> (position, parent id). kNoStack is the empty stack (the
// grammar is complete). Append-only; one store per matcher (not shared between threads).
class StackStore {
 public:
  static constexpr uint32_t kNoStack = 0xFFFFFFFFu;
  // A parent that stands for "unknown context" in the mask precomputation (token_mask.cpp).
  static constexpr uint32_t kBottom = 0xFFFFFFFEu;

  uint32_t intern(uint32_t pos, uint32_t parent);
  uint32_t pos(uint32_t id) const { return nodes_[id].pos; }
  uint32_t parent(uint32_t id) const { return nodes_[id].parent; }
  size_t size() const { return nodes_.size(); }

  // Scratch of the closure (matcher.cpp): ids still to expand, the epoch that last visited
  // each id. Lives here so that a closure allocates nothing once warm and needs no globals.
  struct Scratch {
    std::vector<uint32_t> work, stamp;
    uint32_t epoch = 0;
    bool saw_none = false, saw_bottom = false;
  };
  Scratch& scratch() { return scratch_; }

 private:
  struct Node {
    uint32_t pos, parent;
  };
  void grow();
  std::vector<Node> nodes_;
  std::vector<uint32_t> table_;  // open addressing: node id + 1, 0 = empty
  Scratch scratch_;
};

// Sorted, duplicate-free stack ids: what the matcher is after some bytes. Tops are byte-set
// positions, or kNoStack (the text so far is a complete sentence).
using StackSet = std::vector<uint32_t>;

// Closure: every stack reachable from `stack` without consuming a byte, whose top is a byte
// set (or kNoStack / kBottom when frames run out), appended to `out` (not sorted).
void expand(const Grammar& g, StackStore& store, uint32_t stack, StackSet& out);
// One byte: the stacks of `in` whose top accepts `b`, advanced and expanded, into `out`
// (sorted, unique; empty when `b` is rejected). kBottom in `in` is dropped.
void advance(const Grammar& g, StackStore& store, std::span<const uint32_t> in, uint8_t b,
             StackSet& out);
// The start state of `g`.
StackSet initial_state(const Grammar& g, StackStore& store);

// A position in one sentence of a grammar, advanced byte by byte, with rollback.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  // Consumes `bytes` if the grammar allows all of them from here; else false and no change.
  // Each successful call is one rollback step.
  bool accept(std::string_view bytes);
  // Would accept(bytes) succeed? (no change)
  bool can_accept(std::string_view bytes);
  // The text so far is a complete sentence (end of text allowed here).
  bool can_end() const;
  // Undo the last `n` successful accept() calls (n <= n_steps()).
  void rollback(size_t n);
  size_t n_steps() const { return history_.size() - 1; }
  void reset();

  const StackSet& state() const { return history_.back(); }
  // The bytes accepted so far.
  std::string_view text() const { return text_; }
  // The state's checked text, when a stack of the state is inside one (or has just finished
  // it): its check, decoded length (JSON escapes), whether an escape is still open at its end,
  // and whether every stack of the state is in it.
  struct CheckedText {
    StringCheck check = StringCheck::kNone;
    size_t length = 0;
    bool pending = false;
    bool every_stack = false;
  };
  bool checked_text(CheckedText& out);
  // With every stack in a checked text and no escape open: whether `chars` (no quote, no
  // backslash; the grammar allows them here) keep it valid. What accepting them would say,
  // without advancing the stacks: after plain characters a host name can always go on, so it
  // is the prefix check.
  bool checked_chars_ok(StringCheck c, std::string_view chars);
  StackStore& store() { return store_; }
  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }

 private:
  // Advances `from` over `bytes` into `to`; false when rejected.
  // `to` may be null (only the verdict is wanted).
  bool run(const StackSet& from, std::string_view bytes, StackSet* to);
  // Drops the stacks of `s` whose checked text fails its check; `fresh`: the bytes after
  // text_ that `s` has consumed.
  void apply_checks(StackSet& s, std::string_view fresh);
  // Which check a stack is in: kNone, or its check and whether its text is finished (top just
  // after the checked rule) or still open (a frame below the top).
  StringCheck check_of(uint32_t stack, bool& finished);

  std::shared_ptr<const Grammar> g_;
  StackStore store_;
  std::vector<StackSet> history_;  // [0] initial state; back() current
  StackSet tmp_a_, tmp_b_;
  std::string text_;              // accepted bytes (kept only for grammars with checks)
  std::vector<size_t> text_end_;  // [step] text_'s length after it
  // The checked text of the current state, decoded once for every candidate token.
  struct CheckBase {
    bool valid = false;
    size_t raw_done = 0;     // text_ decoded up to here (an open escape after it)
    std::string decoded;     // the text after the last quote, decoded
    size_t label_start = 0;  // decoded's last label starts here (every label before it is valid)
  };
  const CheckBase& check_base();
  StringChecker checker_;
  CheckBase base_;
  std::string tail_, raw_;           // apply_checks scratch
  std::vector<uint8_t> check_memo_;  // [stack id] check_of's verdict (0: not yet known)
  std::vector<uint32_t> path_;       // check_of scratch
};

// True when `text` is a complete sentence of `g` (accepted byte by byte, and may end there).
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text);

}  // namespace sluice::grammar
