// libFuzzer target for the GBNF front end: the input is GBNF source.
// Checks: parse_gbnf never crashes or hangs; when it succeeds, to_gbnf's text parses back to
// the same trees (round trip), lower() under tight limits ends in a grammar or an error, and a
// grammar runs matches() on a few slices of the input.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON
//   -DSLUICE_SANITIZE=address ninja -C build-fuzz gbnf_fuzz
//   build-fuzz/fuzz/gbnf_fuzz -max_len=4096 -timeout=10 -rss_limit_mb=2048 CORPUS_DIR
// A good seed corpus: a few .gbnf files (llama.cpp-style json, arithmetic, list grammars).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"

namespace {

using sluice::grammar::Expr;
using sluice::grammar::GrammarSpec;

bool same_tree(const Expr& a, const Expr& b) {
  if (a.kind != b.kind || a.text != b.text || a.ranges != b.ranges || a.negated != b.negated ||
      a.min != b.min || a.max != b.max || a.kids.size() != b.kids.size()) {
    return false;
  }
  for (size_t i = 0; i < a.kids.size(); ++i) {
    if (!same_tree(a.kids[i], b.kids[i])) return false;
  }
  return true;
}

bool same_spec(const GrammarSpec& a, const GrammarSpec& b) {
  if (a.root != b.root || a.rules.size() != b.rules.size()) return false;
  for (size_t i = 0; i < a.rules.size(); ++i) {
    if (a.rules[i].first != b.rules[i].first) return false;
    if (!same_tree(a.rules[i].second, b.rules[i].second)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::grammar;
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  auto spec = parse_gbnf(src);
  if (!spec.ok()) return 0;

  const std::string printed = to_gbnf(*spec);
  auto again = parse_gbnf(printed);
  if (!again.ok() || !same_spec(*spec, *again)) __builtin_trap();  // round trip broken

  LowerLimits limits;
  limits.max_elements = 100'000;
  limits.max_repeat = 64;
  auto g = lower(*spec, limits);
  if (!g.ok()) return 0;
  // A few texts drawn from the input itself (its string literals are often inside).
  for (size_t len : {size_t(0), size_t(1), size_t(8), size_t(32)}) {
    (void)matches(*g, src.substr(0, std::min(len, src.size())));
    if (size > len) (void)matches(*g, src.substr(size - len));
  }
  return 0;
}
