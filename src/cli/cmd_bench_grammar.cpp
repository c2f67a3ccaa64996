// `sluice bench grammar [--vocab V.gguf] [--schema S.json]`: what structured output costs on
// one core, without a model:
//   compile   JSON schema -> GrammarSpec -> lower(), p50 over --reps; and p50 / p99 / max over
//             every schema of the JSON Schema test suite (--suite) that compiles
//   masks     random valid instances of the schema, tokenized with the vocabulary's
//             tokenizer and fed token by token; TokenMatcher::fill_mask before every token
//             (and once after the last, where only stop tokens remain). The first pass runs
//             on a fresh MaskCache (cold: a position's first mask computes its entry), later
//             passes over the same documents on the warm one, and a last pass over as many
//             other documents (warm cache, but new repeat levels and positions). Every mask is
//             checked to allow the next token.
//   cache     MaskCache::precompute_all on a fresh cache: seconds, entries, leftovers
// Defaults: the Llama 3 vocabulary (128256 tokens) and the suite from ../shared/testdata
// ($SLUICE_SHARED or ../shared from the working directory), the built-in nested schema
// (grammar/schema_instances.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"
#include "grammar/constraint.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/schema_instances.h"
#include "grammar/token_mask.h"
#include "server/openai_structured.h"
#include "template/reasoning.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct GrammarBenchOptions {
  std::string vocab;   // GGUF with a tokenizer ("": the shared llama-bpe vocabulary)
  std::string schema;  // JSON schema file ("": the built-in nested schema)
  std::string suite;   // directory of JSON-Schema-Test-Suite files ("": the shared one)
  bool no_suite = false;
  bool no_precompute = false;
  int docs = 16;
  int passes = 3;  // 1 cold + (passes - 1) warm
  int reps = 20;
  uint64_t seed = 1;
  std::string output_format = "md";
  bool json = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Pct {
  double p50 = 0, p99 = 0, max = 0, mean = 0;
  size_t n = 0;
};

Pct percentiles(std::vector<double> v) {
  Pct p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double idx = q * double(v.size() - 1);
    const size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
    return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
  };
  p.p50 = at(0.5);
  p.p99 = at(0.99);
  p.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / double(v.size());
  return p;
}

ojson pct_json(const Pct& p, double scale) {
  return {{"n", p.n},
          {"p50", p.p50 * scale},
          {"p99", p.p99 * scale},
          {"max", p.max * scale},
          {"mean", p.mean * scale}};
}

// $SLUICE_SHARED or ../shared, for the default data; "" when neither exists.
std::string shared_file(const std::string& rel) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SLUICE_SHARED"); env && *env) dirs.push_back(env);
  dirs.push_back("../shared");
  for (const std::string& d : dirs)
    if (std::filesystem::exists(d + "/" + rel)) return d + "/" + rel;
  return "";
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error("cannot read '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CompileTimes {
  double front = 0, lower = 0;  // seconds
};

Result<std::shared_ptr<const grammar::Grammar>> compile(const ojson& schema, CompileTimes* t) {
  const auto t0 = Clock::now();
  SLUICE_ASSIGN_OR_RETURN(grammar::GrammarSpec spec, grammar::schema_grammar(schema));
  const auto t1 = Clock::now();
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> g, grammar::lower(spec));
  if (t) {
    t->front = std::chrono::duration<double>(t1 - t0).count();
    t->lower = seconds_since(t1);
  }
  return g;
}

struct SuiteResult {
  int schemas = 0, compiled = 0;
  Pct seconds;  // per schema: the median of 3 compiles
  std::string slowest;
};

Result<SuiteResult> bench_suite(const std::string& dir) {
  SuiteResult r;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<double> times;
  double worst = -1;
  for (const auto& f : files) {
    SLUICE_ASSIGN_OR_RETURN(std::string text, read_text(f.string()));
    const ojson groups = ojson::parse(text, nullptr, false);
    if (!groups.is_array()) return make_error("'", f.string(), "' is not a test-suite file");
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!groups[i].is_object() || !groups[i].contains("schema")) continue;
      ++r.schemas;
      std::vector<double> reps;
      bool ok = true;
      for (int k = 0; k < 3 && ok; ++k) {
        const auto t0 = Clock::now();
        ok = compile(groups[i]["schema"], nullptr).ok();
        reps.push_back(seconds_since(t0));
      }
      if (!ok) continue;
      ++r.compiled;
      std::sort(reps.begin(), reps.end());
      times.push_back(reps[1]);
      if (reps[1] > worst) {
        worst = reps[1];
        r.slowest = f.filename().string() + "#" + std::to_string(i) + " (" +
                    groups[i].value("description", std::string()) + ")";
      }
    }
  }
  r.seconds = percentiles(std::move(times));
  return r;
}

bool get_bit(const std::vector<uint64_t>& m, int32_t t) {
  return (m[size_t(t) >> 6] >> (t & 63)) & 1;
}

// `text` split greedily into the longest tokens of `vocab` (for a tokenizer whose pieces do
// not spell the text back: SentencePiece adds a space in front); empty if some byte has no
// token.
std::vector<int32_t> longest_match(const grammar::TokenVocab& vocab, std::string_view text) {
  const grammar::TokenVocab::Trie& t = vocab.trie();
  std::vector<int32_t> out;
  for (size_t at = 0; at < text.size();) {
    int32_t best = -1;
    size_t best_len = 0;
    // Children of a node are the nodes from node + 1 on, each skipping its subtree.
    size_t node = 0, end = t.size();
    for (size_t d = 0; at + d < text.size() && node < end;) {
      if (t.byte[node] != uint8_t(text[at + d])) {
        node = t.end[node];
        continue;
      }
      ++d;
      if (t.tok_begin[node] < t.tok_begin[node + 1]) {
        best = t.tokens[t.tok_begin[node]];
        best_len = d;
      }
      end = t.end[node];
      ++node;
    }
    if (best < 0) return {};
    out.push_back(best);
    at += best_len;
  }
  return out;
}

// Token sequences to feed: tokenized random instances, or (for a schema the generator does
// not know) random walks through the grammar's masks of at most 256 tokens.
struct Docs {
  std::vector<std::vector<int32_t>> tokens;
  bool random_walks = false;
  bool longest_match = false;  // the tokenizer's ids did not spell the text (SentencePiece)
  size_t bytes = 0;
};

Result<Docs> make_docs(const GrammarBenchOptions& o, uint64_t seed, const ojson& schema,
                       const Tokenizer& tok,
                       const std::shared_ptr<const grammar::CompiledGrammar>& cg) {
  Docs d;
  std::mt19937_64 rng(seed);
  EncodeOptions eo;
  eo.add_special = false;
  for (int i = 0; i < o.docs; ++i) {
    std::optional<ojson> v = grammar::random_instance(schema, rng);
    if (!v) break;
    const std::string text = grammar::instance_text(*v, i % 2 == 1);
    d.bytes += text.size();
    SLUICE_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tok.encode(text, eo));
    std::string spelled;
    for (TokenId id : ids) spelled += cg->vocab->bytes(id);
    if (spelled == text) {
      d.tokens.emplace_back(ids.begin(), ids.end());
      continue;
    }
    d.tokens.push_back(longest_match(*cg->vocab, text));
    d.longest_match = true;
    if (d.tokens.back().empty())
      return make_error("the vocabulary cannot spell document ", i, ": ", text);
  }
  if (int(d.tokens.size()) == o.docs) return d;
  d.tokens.clear();
  d.random_walks = true;
  d.bytes = 0;
  // A throwaway copy of the grammar's cache, so that the timed cold pass starts cold.
  auto walk_cg = grammar::CompiledGrammar::make(cg->grammar, cg->vocab);
  std::vector<uint64_t> mask(cg->vocab->n_words());
  std::vector<int32_t> allowed;
  for (int i = 0; i < o.docs; ++i) {
    grammar::TokenMatcher m(walk_cg);
    std::vector<int32_t> doc;
    while (doc.size() < 256) {
      m.fill_mask(mask);
      allowed.clear();
      for (int32_t t = 0; t < int32_t(cg->vocab->size()); ++t)
        if (get_bit(mask, t) && !cg->vocab->is_stop(t)) allowed.push_back(t);
      if (allowed.empty() || (m.can_end() && rng() % 8 == 0)) break;
      const int32_t t = allowed[rng() % allowed.size()];
      m.accept_token(t);
      doc.push_back(t);
      d.bytes += cg->vocab->bytes(t).size();
    }
    d.tokens.push_back(std::move(doc));
  }
  return d;
}

// One pass over the docs; appends each fill_mask time (seconds).
Status mask_pass(const std::shared_ptr<const grammar::CompiledGrammar>& cg, const Docs& d,
                 std::vector<double>& times) {
  std::vector<uint64_t> mask(cg->vocab->n_words());
  for (size_t di = 0; di < d.tokens.size(); ++di) {
    grammar::TokenMatcher m(cg);
    const std::vector<int32_t>& doc = d.tokens[di];
    for (size_t i = 0; i <= doc.size(); ++i) {
      const auto t0 = Clock::now();
      m.fill_mask(mask);
      times.push_back(seconds_since(t0));
      if (i == doc.size()) break;
      if (!get_bit(mask, doc[i]) || !m.accept_token(doc[i])) {
        return make_error("document ", di, " token ", i, " (", doc[i], " '",
                          std::string(cg->vocab->bytes(doc[i])),
                          "'): the mask does not allow it (a bug in the grammar or the mask)");
      }
    }
  }
  return {};
}

// What reasoning adds per generated token: a message of ~1000 thinking tokens, "</think>", then
// a schema instance. The MessageParser over every token's text, and the reasoning grammar
// (openai_structured.h: the thinking unconstrained, the schema after it): while thinking, what
// the sampler does for a token it drew unmasked (is_allowed + accept_token); in the answer, a
// mask per token as for the schema alone.
struct ReasoningCost {
  size_t think_tokens = 0, answer_tokens = 0;
  double parser_ns_per_token = 0;  // median of 5 passes
  Pct think_us;                    // is_allowed + accept_token, per thinking token
  Pct answer_mask_us;              // fill_mask + accept_token, per answer token
};

Result<ReasoningCost> bench_reasoning(const ojson& schema, const Tokenizer& tok,
                                      const std::shared_ptr<const grammar::TokenVocab>& vocab,
                                      const Docs& docs) {
  ReasoningCost r;
  EncodeOptions eo;
  eo.add_special = false;
  std::string thinking;
  const std::string paragraph =
      "Let me think about this step by step. The user wants the answer as JSON, so first I "
      "check which fields the schema requires, then what each value should be; <b> tags and "
      "</thin words must not confuse me. ";
  std::vector<int32_t> think;
  while (think.size() < 1000) {
    thinking += paragraph;
    SLUICE_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tok.encode(thinking, eo));
    think.assign(ids.begin(), ids.end());
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<TokenId> close, tok.encode("\n</think>\n\n", eo));
  think.insert(think.end(), close.begin(), close.end());
  const std::vector<int32_t>& answer = docs.tokens.front();
  r.think_tokens = think.size();
  r.answer_tokens = answer.size();
  std::vector<std::string_view> pieces;
  for (int32_t t : think) pieces.push_back(vocab->bytes(t));
  for (int32_t t : answer) pieces.push_back(vocab->bytes(t));

  std::vector<double> per_token;
  for (int pass = 0; pass < 5; ++pass) {
    MessageParser parser(ReasoningFormat::kThink, /*opens=*/true, ToolCallFormat::kHermes, 1);
    size_t n_events = 0;
    const auto t0 = Clock::now();
    for (std::string_view p : pieces) n_events += parser.feed(p).size();
    n_events += parser.finish().size();
    per_token.push_back(seconds_since(t0) / double(pieces.size()));
    if (n_events == 0) return make_error("the parser found nothing");
  }
  r.parser_ns_per_token = percentiles(per_token).p50 * 1e9;

  SLUICE_ASSIGN_OR_RETURN(grammar::GrammarSpec spec, grammar::schema_grammar(schema));
  SLUICE_ASSIGN_OR_RETURN(
      std::shared_ptr<const grammar::Grammar> g,
      grammar::lower(server::reasoning_grammar(std::move(spec), ReasoningFormat::kThink, true)));
  auto cg = grammar::CompiledGrammar::make(g, vocab);
  grammar::TokenMatcher m(cg);
  std::vector<double> think_t, answer_t;
  for (int32_t t : think) {
    const auto t0 = Clock::now();
    const bool ok = m.is_allowed(t) && m.accept_token(t);
    think_t.push_back(seconds_since(t0));
    if (!ok) return make_error("the reasoning grammar refused thinking token ", t);
  }
  std::vector<uint64_t> mask(vocab->n_words());
  for (int32_t t : answer) {
    const auto t0 = Clock::now();
    m.fill_mask(mask);
    const bool ok = get_bit(mask, t) && m.accept_token(t);
    answer_t.push_back(seconds_since(t0));
    if (!ok) return make_error("the reasoning grammar refused answer token ", t);
  }
  r.think_us = percentiles(think_t);
  r.answer_mask_us = percentiles(answer_t);
  return r;
}

Status run_bench_grammar(GrammarBenchOptions o) {
  if (o.docs < 1 || o.passes < 2 || o.reps < 1)
    return make_error("need --docs >= 1, --passes >= 2 (one cold, one warm), --reps >= 1");
  if (o.json) o.output_format = "json";
  const std::string vocab_rel = "testdata/tokenizer/ggml-vocab-llama-bpe.gguf";
  std::string vocab_path = o.vocab.empty() ? shared_file(vocab_rel) : o.vocab;
  if (vocab_path.empty())
    return make_error("no --vocab given and ../shared/", vocab_rel,
                      " not found (set SLUICE_SHARED or pass --vocab FILE.gguf)");
  auto t0 = Clock::now();
  SLUICE_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(vocab_path));
  std::shared_ptr<const grammar::TokenVocab> vocab =
      make_grammar_vocab(tok, tok.vocab().n_tokens());
  const double vocab_s = seconds_since(t0);

  std::string schema_text(grammar::nested_bench_schema());
  if (!o.schema.empty()) {
    SLUICE_ASSIGN_OR_RETURN(schema_text, read_text(o.schema));
  }
  const ojson schema = ojson::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return make_error("'", o.schema, "' is not JSON");

  // Compile times.
  std::vector<double> front, low, total;
  std::shared_ptr<const grammar::Grammar> g;
  for (int r = 0; r < o.reps; ++r) {
    CompileTimes ct;
    Result<std::shared_ptr<const grammar::Grammar>> c = compile(schema, &ct);
    if (!c.ok()) return make_error("the schema does not compile: ", c.message());
    g = *c;
    front.push_back(ct.front);
    low.push_back(ct.lower);
    total.push_back(ct.front + ct.lower);
  }
  const Pct front_p = percentiles(front), lower_p = percentiles(low), total_p = percentiles(total);

  std::optional<SuiteResult> suite;
  std::string suite_dir = o.suite;
  if (suite_dir.empty() && !o.no_suite)
    suite_dir = shared_file("testdata/json_schema_suite/draft2020-12");
  if (!suite_dir.empty() && !o.no_suite) {
    SLUICE_ASSIGN_OR_RETURN(suite, bench_suite(suite_dir));
  }

  // Masks: one cold pass, then warm passes, on one CompiledGrammar.
  auto cg = grammar::CompiledGrammar::make(g, vocab);
  SLUICE_ASSIGN_OR_RETURN(Docs docs, make_docs(o, o.seed, schema, tok, cg));
  // Other documents of the same schema: what a warm cache meets in service (a new string
  // length reaches repeat levels no earlier document did, whose entries it computes).
  SLUICE_ASSIGN_OR_RETURN(Docs unseen, make_docs(o, o.seed + 0x9E3779B9u, schema, tok, cg));
  size_t n_tokens = 0;
  for (const auto& d : docs.tokens) n_tokens += d.size();
  std::vector<double> cold, warm;
  t0 = Clock::now();
  SLUICE_RETURN_IF_ERROR(mask_pass(cg, docs, cold));
  const double cold_s = seconds_since(t0);
  const double cold_build_s = cg->cache->build_seconds();
  const size_t cold_entries = cg->cache->n_entries();
  const size_t cold_bytes = cg->cache->memory_bytes();
  t0 = Clock::now();
  for (int p = 1; p < o.passes; ++p) SLUICE_RETURN_IF_ERROR(mask_pass(cg, docs, warm));
  const double warm_s = seconds_since(t0);
  std::vector<double> fresh_docs;
  SLUICE_RETURN_IF_ERROR(mask_pass(cg, unseen, fresh_docs));
  const Pct cold_p = percentiles(cold), warm_p = percentiles(warm),
            unseen_p = percentiles(fresh_docs);

  std::optional<ReasoningCost> reasoning;
  if (!docs.random_walks && !docs.tokens.empty()) {
    SLUICE_ASSIGN_OR_RETURN(reasoning, bench_reasoning(schema, tok, vocab, docs));
  }

  // The whole cache, precomputed on a fresh one.
  auto fresh = grammar::CompiledGrammar::make(g, vocab);
  t0 = Clock::now();
  if (!o.no_precompute) fresh->cache->precompute_all();
  const double pre_s = seconds_since(t0);
  size_t leftovers = 0, positions = 0;
  for (uint32_t p = 0; p < g->n_elems(); ++p) {
    if (g->kind(p) != grammar::Grammar::kBytes) continue;
    ++positions;
    if (!o.no_precompute) leftovers += fresh->cache->entry(p).uncertain.size();
  }

  if (o.output_format == "json") {
    ojson j = {
        {"vocab", vocab_path},
        {"n_vocab", vocab->size()},
        {"vocab_seconds", vocab_s},
        {"schema", o.schema.empty() ? "builtin:nested" : o.schema},
        {"grammar",
         {{"rules", g->n_rules()}, {"elements", g->n_elems()}, {"byte_positions", positions}}},
        {"compile_ms",
         {{"front_p50", front_p.p50 * 1e3},
          {"lower_p50", lower_p.p50 * 1e3},
          {"total_p50", total_p.p50 * 1e3},
          {"reps", o.reps}}},
        {"docs",
         {{"n", docs.tokens.size()},
          {"kind", docs.random_walks ? "random_walks" : "instances"},
          {"tokenization", docs.longest_match ? "longest_match" : "tokenizer"},
          {"tokens", n_tokens},
          {"bytes", docs.bytes}}},
        {"mask_us",
         {{"cold", pct_json(cold_p, 1e6)},
          {"warm", pct_json(warm_p, 1e6)},
          {"warm_unseen_docs", pct_json(unseen_p, 1e6)}}},
        {"cold_pass",
         {{"seconds", cold_s},
          {"cache_build_seconds", cold_build_s},
          {"cache_entries", cold_entries},
          {"cache_bytes", cold_bytes}}},
        {"warm_passes", {{"passes", o.passes - 1}, {"seconds", warm_s}}},
        {"precompute_all",
         {{"seconds", pre_s},
          {"entries", fresh->cache->n_entries()},
          {"leftovers", leftovers},
          {"automaton_states", fresh->cache->n_automaton_states()},
          {"automaton_edges", fresh->cache->n_automaton_edges()},
          {"cache_bytes", fresh->cache->memory_bytes()}}}};
    if (suite) {
      j["suite"] = {{"dir", suite_dir},
                    {"schemas", suite->schemas},
                    {"compiled", suite->compiled},
                    {"compile_ms", pct_json(suite->seconds, 1e3)},
                    {"slowest", suite->slowest}};
    }
    if (reasoning) {
      j["reasoning"] = {{"think_tokens", reasoning->think_tokens},
                        {"answer_tokens", reasoning->answer_tokens},
                        {"parser_ns_per_token", reasoning->parser_ns_per_token},
                        {"think_grammar_us", pct_json(reasoning->think_us, 1e6)},
                        {"answer_mask_us", pct_json(reasoning->answer_mask_us, 1e6)}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return {};
  }
  std::printf("vocabulary: %s (%zu tokens, %.0f ms to load)\n", vocab_path.c_str(), vocab->size(),
              vocab_s * 1e3);
  std::printf("schema: %s -> %zu rules, %zu elements, %zu byte positions\n",
              o.schema.empty() ? "built-in nested schema" : o.schema.c_str(), g->n_rules(),
              g->n_elems(), positions);
  std::printf("\n| compile (p50 of %d) | front end ms | lower ms | total ms |\n|---|---|---|---|\n",
              o.reps);
  std::printf("| schema | %.3f | %.3f | %.3f |\n", front_p.p50 * 1e3, lower_p.p50 * 1e3,
              total_p.p50 * 1e3);
  if (suite) {
    std::printf(
        "\nsuite %s: %d of %d schemas compile; ms per schema p50 %.3f, p99 %.3f, max %.3f "
        "(%s)\n",
        suite_dir.c_str(), suite->compiled, suite->schemas, suite->seconds.p50 * 1e3,
        suite->seconds.p99 * 1e3, suite->seconds.max * 1e3, suite->slowest.c_str());
  }
  std::printf(
      "\ndocuments: %zu %s, %zu tokens%s, %zu bytes\n", docs.tokens.size(),
      docs.random_walks ? "random walks (the generator does not know this schema)"
                        : "random instances (compact and pretty)",
      n_tokens,
      docs.longest_match ? " (longest-match: the tokenizer's ids do not spell the text)" : "",
      docs.bytes);
  std::printf("\n| fill_mask us | masks | p50 | p99 | max | mean |\n|---|---|---|---|---|---|\n");
  std::printf("| cold (first pass) | %zu | %.1f | %.1f | %.1f | %.1f |\n", cold_p.n,
              cold_p.p50 * 1e6, cold_p.p99 * 1e6, cold_p.max * 1e6, cold_p.mean * 1e6);
  std::printf("| warm (%d passes) | %zu | %.1f | %.1f | %.1f | %.1f |\n", o.passes - 1, warm_p.n,
              warm_p.p50 * 1e6, warm_p.p99 * 1e6, warm_p.max * 1e6, warm_p.mean * 1e6);
  std::printf("| warm cache, %zu other documents | %zu | %.1f | %.1f | %.1f | %.1f |\n",
              unseen.tokens.size(), unseen_p.n, unseen_p.p50 * 1e6, unseen_p.p99 * 1e6,
              unseen_p.max * 1e6, unseen_p.mean * 1e6);
  if (reasoning) {
    std::printf(
        "\nreasoning (%zu thinking tokens, then a %zu-token instance): MessageParser %.0f ns per "
        "token; reasoning grammar while thinking (is_allowed + accept) p50 %.2f us, p99 %.2f "
        "us, mean %.2f us; its answer masks p50 %.1f us, mean %.1f us\n",
        reasoning->think_tokens, reasoning->answer_tokens, reasoning->parser_ns_per_token,
        reasoning->think_us.p50 * 1e6, reasoning->think_us.p99 * 1e6,
        reasoning->think_us.mean * 1e6, reasoning->answer_mask_us.p50 * 1e6,
        reasoning->answer_mask_us.mean * 1e6);
  }
  std::printf(
      "\ncold pass: %.1f ms, of which %.1f ms building %zu cache entries (%.1f MB)\n"
      "precompute_all (fresh cache): %.1f ms, %zu entries, %zu leftovers, automaton of %zu "
      "states and %zu transitions, %.1f MB\n",
      cold_s * 1e3, cold_build_s * 1e3, cold_entries, double(cold_bytes) / 1e6, pre_s * 1e3,
      fresh->cache->n_entries(), leftovers, fresh->cache->n_automaton_states(),
      fresh->cache->n_automaton_edges(), double(fresh->cache->memory_bytes()) / 1e6);
  return {};
}

}  // namespace

void register_bench_grammar(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<GrammarBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "grammar", "Structured output on one core: schema compile time and token-mask time");
  cmd->add_option("--vocab", o->vocab,
                  "GGUF file with a tokenizer (default: ../shared's Llama 3 vocabulary)");
  cmd->add_option("--schema", o->schema, "JSON schema file (default: a built-in nested schema)");
  cmd->add_option("--suite", o->suite,
                  "Directory of JSON Schema Test Suite files to time compiles over (default: "
                  "../shared/testdata/json_schema_suite/draft2020-12)");
  cmd->add_flag("--no-suite", o->no_suite, "Skip the test-suite compile times");
  cmd->add_flag("--no-precompute", o->no_precompute,
                "Skip MaskCache::precompute_all (seconds on large grammars)");
  cmd->add_option("--docs", o->docs, "Random documents per pass")->capture_default_str();
  cmd->add_option("--passes", o->passes, "Passes over the documents (the first is cold)")
      ->capture_default_str();
  cmd->add_option("-r,--reps", o->reps, "Compiles of the schema to time")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random documents")->capture_default_str();
  cmd->add_option("--output-format", o->output_format, "md or json")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Same as --output-format json");
  cmd->callback([o, &exit_code] {
    Status st = run_bench_grammar(*o);
    if (!st.ok()) exit_code = report_error("bench grammar", st.message());
  });
}

}  // namespace sluice::cli
