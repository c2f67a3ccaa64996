// libFuzzer target for the regex front end.
//   byte 0: options (bit 0: search mode); the rest: the pattern.
// Checks: regex_to_expr never crashes or hangs; a tree it builds prints as GBNF and parses back
// to the same tree (so both front ends agree on every construct), lowers under tight limits to a
// grammar or an error, and a grammar runs matches() on a few slices of the pattern.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON
//   -DSLUICE_SANITIZE=address ninja -C build-fuzz regex_fuzz
//   build-fuzz/fuzz/regex_fuzz -max_len=1024 -timeout=10 -rss_limit_mb=2048 CORPUS_DIR
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace {

using sluice::grammar::Expr;

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::grammar;
  if (size == 0) return 0;
  RegexOptions opts;
  opts.search = data[0] & 1;
  opts.max_repeat = 64;
  const std::string_view pattern(reinterpret_cast<const char*>(data + 1), size - 1);
  auto e = regex_to_expr(pattern, opts);
  if (!e.ok()) return 0;

  GrammarSpec spec;
  spec.rules.emplace_back("root", std::move(e).value());
  auto printed = parse_gbnf(to_gbnf(spec));
  if (!printed.ok() || printed->rules.size() != 1 ||
      !same_tree(spec.rules[0].second, printed->rules[0].second)) {
    __builtin_trap();  // the GBNF view of a regex tree must read back as the same tree
  }

  LowerLimits limits;
  limits.max_elements = 100'000;
  limits.max_repeat = 64;
  auto g = lower(spec, limits);
  if (!g.ok()) return 0;
  for (size_t len : {size_t(0), size_t(1), size_t(8), size_t(32)}) {
    (void)matches(*g, pattern.substr(0, std::min(len, pattern.size())));
    if (pattern.size() > len) (void)matches(*g, pattern.substr(pattern.size() - len));
  }
  return 0;
}
