// Synthetic prompts (lengths, shared prefix, range ratio, exact counts with a real tokenizer),
// JSONL datasets, and the reports (markdown rows, JSON fields, SVG structure).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loadgen/dataset.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice::loadgen {
namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

TEST(LoadgenDataset, SyntheticWordsPrefixAndRanges) {
  SyntheticParams p;
  p.n_prompts = 50;
  p.input_len = 40;
  p.output_len = 20;
  p.prefix_len = 10;
  p.range_ratio = 0.5;
  p.seed = 9;
  auto d = make_synthetic(p, nullptr);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_FALSE(d->exact_token_counts);
  ASSERT_EQ(d->requests.size(), 50u);
  const std::vector<std::string> first = words(d->requests[0].prompt);
  bool lengths_vary = false;
  for (const RequestSpec& r : d->requests) {
    const std::vector<std::string> w = words(r.prompt);
    EXPECT_EQ(int64_t(w.size()), r.input_tokens);  // 1 word = 1 token without a tokenizer
    EXPECT_GE(r.input_tokens, 20);
    EXPECT_LE(r.input_tokens, 60);
    EXPECT_GE(r.output_tokens, 10);
    EXPECT_LE(r.output_tokens, 30);
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 10, w.begin())) << r.prompt;
    lengths_vary = lengths_vary || r.input_tokens != d->requests[0].input_tokens;
  }
  EXPECT_TRUE(lengths_vary);
  // Seeded.
  auto again = make_synthetic(p, nullptr);
  EXPECT_EQ(again->requests[7].prompt, d->requests[7].prompt);
  p.seed = 10;
  EXPECT_NE(make_synthetic(p, nullptr)->requests[7].prompt, d->requests[7].prompt);
}

TEST(LoadgenDataset, DrawLengthBounds) {
  std::mt19937_64 rng(1);
  int64_t lo = 1 << 30, hi = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t n = draw_length(100, 0.1, rng);
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  EXPECT_EQ(lo, 90);
  EXPECT_EQ(hi, 110);
  EXPECT_EQ(draw_length(5, 0, rng), 5);
  EXPECT_GE(draw_length(1, 0.9, rng), 1);
}

TEST(LoadgenDataset, SyntheticRejectsBadParameters) {
  SyntheticParams p;
  p.prefix_len = 200;  // longer than --input-len 128
  EXPECT_FALSE(make_synthetic(p, nullptr).ok());
  p.prefix_len = 0;
  p.range_ratio = 1.5;
  EXPECT_FALSE(make_synthetic(p, nullptr).ok());
  p.range_ratio = 0;
  p.input_len = 0;
  EXPECT_FALSE(make_synthetic(p, nullptr).ok());
}

TEST(LoadgenDataset, ExactLengthsWithATokenizer) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto tok = Tokenizer::load(model);
  ASSERT_TRUE(tok.ok()) << tok.message();
  SyntheticParams p;
  p.n_prompts = 20;
  p.input_len = 64;
  p.prefix_len = 16;
  auto d = make_synthetic(p, &*tok);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_TRUE(d->exact_token_counts);
  EncodeOptions eo;
  eo.add_special = false;
  std::vector<TokenId> prefix;
  for (const RequestSpec& r : d->requests) {
    const std::vector<TokenId> ids = *tok->encode(r.prompt, eo);
    EXPECT_EQ(int64_t(ids.size()), 64) << r.prompt;
    EXPECT_EQ(r.input_tokens, 64);
    if (prefix.empty()) prefix.assign(ids.begin(), ids.begin() + 16);
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), ids.begin())) << r.prompt;
  }
}

TEST(LoadgenDataset, Jsonl) {
  test::TempDir tmp;
  const std::string path = tmp.path("d.jsonl");
  {
    std::ofstream f(path);
    f << R"({"prompt": "one two three", "output_len": 5})"
      << "\n\n"
      << R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]})"
      << "\n";
  }
  auto d = load_jsonl(path, 5, 9, nullptr);
  ASSERT_TRUE(d.ok()) << d.message();
  ASSERT_EQ(d->requests.size(), 5u);  // cycles over the two lines
  EXPECT_EQ(d->requests[0].prompt, "one two three");
  EXPECT_EQ(d->requests[0].input_tokens, 3);
  EXPECT_EQ(d->requests[0].output_tokens, 5);
  EXPECT_TRUE(d->requests[0].messages.is_null());
  EXPECT_EQ(d->requests[1].messages.size(), 2u);
  EXPECT_EQ(d->requests[1].prompt, "be brief\nhi there");
  EXPECT_EQ(d->requests[1].input_tokens, 4);
  EXPECT_EQ(d->requests[1].output_tokens, 9);  // the default
  EXPECT_EQ(d->requests[4].prompt, "one two three");

  auto bad = [&](const std::string& line) {
    std::ofstream(tmp.path("bad.jsonl")) << R"({"prompt": "ok"})"
                                         << "\n"
                                         << line << "\n";
    return load_jsonl(tmp.path("bad.jsonl"), 1, 1, nullptr);
  };
  auto r = bad("{nope");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("bad.jsonl:2: not a JSON object"), std::string::npos) << r.message();
  EXPECT_NE(bad(R"({"text": "x"})").message().find("needs 'prompt' or 'messages'"),
            std::string::npos);
  EXPECT_NE(bad(R"({"prompt": "x", "output_len": 0})").message().find("output_len"),
            std::string::npos);
  EXPECT_NE(bad(R"({"messages": [{"role": "user"}]})").message().find("content"),
            std::string::npos);
  EXPECT_FALSE(load_jsonl(tmp.path("missing.jsonl"), 1, 1, nullptr).ok());
}

RunResult fake_run(double rate, double tok_s, double tpot_p50) {
  RunResult r;
  r.info.url = "http://x";
  r.info.endpoint = "completions";
  r.info.model = "m<1>";
  r.info.dataset = "synthetic";
  r.info.rate = rate;
  r.info.num_prompts = 2;
  r.summary.completed = 2;
  r.summary.duration_s = 1;
  r.summary.output_throughput = tok_s;
  r.summary.tpot_ms.median = tpot_p50;
  r.summary.tpot_ms.p99 = tpot_p50 * 2;
  r.summary.ttft_ms.p99 = tpot_p50 * 10;
  RequestRecord q;
  q.ok = true;
  q.ttft_s = 0.1;
  q.itl_s = {0.01, 0.02};
  q.output_tokens = 3;
  q.e2el_s = 0.2;
  r.records = {q, RequestRecord{}};
  r.records[1].error = "HTTP 503: busy";
  r.summary.failed = 1;
  r.summary.errors = {{"HTTP 503: busy", 1}};
  return r;
}

TEST(LoadgenReport, MarkdownJsonAndSvg) {
  const std::vector<RunResult> runs = {fake_run(2, 100, 5), fake_run(kInfiniteRate, 300, 20)};
  const std::string md = markdown_report(runs);
  EXPECT_NE(md.find("| metric | rate 2 | rate inf |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Output token throughput (tok/s) | 100.00 | 300.00 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| Median TPOT (ms) | 5.00 | 20.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("- 1 x HTTP 503: busy"), std::string::npos) << md;
  EXPECT_EQ(md.find("goodput"), std::string::npos);  // no SLO given

  const nlohmann::ordered_json j = json_report(runs, true);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["request_rate"], 2.0);
  EXPECT_EQ(j["runs"][1]["request_rate"], "inf");
  EXPECT_EQ(j["runs"][0]["errors"][0]["message"], "HTTP 503: busy");
  const auto& q = j["runs"][0]["requests"][0];
  EXPECT_NEAR(q["ttft_ms"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(q["tpot_ms"].get<double>(), 50, 1e-9);  // (200 - 100) / 2
  EXPECT_EQ(q["itl_ms"].size(), 2u);
  EXPECT_FALSE(json_report(runs, false)["runs"][0].contains("requests"));

  const std::string svg = sweep_svg(runs);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1))
    ++polylines;
  EXPECT_EQ(polylines, 3u);                              // TPOT p50, TPOT p99, TTFT p99
  EXPECT_NE(svg.find("m&lt;1&gt;"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("rate inf"), std::string::npos);
}

}  // namespace
}  // namespace sluice::loadgen
