// eval/: the windows of a perplexity run, the statistics (against values computed by hand), and
// the saved-logits file (round trip; a damaged, truncated or foreign file is refused).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/crc32c.h"
#include "eval/logits_file.h"
#include "eval/perplexity.h"
#include "test_util.h"

namespace sluice::eval {
namespace {

TEST(EvalWindows, NonOverlappingScoreTheSecondHalfAsLlamaCpp) {
  auto p = plan_windows(1000, 128, 128);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->n_windows, 7);      // 1000 / 128, the partial last window left out
  EXPECT_EQ(p->first_scored, 65);  // tokens 65..127: logits rows 64..126
  EXPECT_EQ(p->n_scored(), 63);    // n_ctx - 1 - n_ctx / 2
  EXPECT_EQ(p->start(3), 384);
  auto odd = plan_windows(10, 7, 7);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->first_scored, 4);
  EXPECT_EQ(odd->n_scored(), 3);
}

TEST(EvalWindows, StridedWindowsScoreEachLaterTokenOnce) {
  auto p = plan_windows(100, 16, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_windows, 22);  // (100 - 16) / 4 + 1
  EXPECT_EQ(p->first_scored, 12);
  std::vector<int> scored(100, 0);
  for (int32_t w = 0; w < p->n_windows; ++w) {
    for (int32_t q = p->first_scored; q < p->n_ctx; ++q) ++scored[size_t(p->start(w) + q)];
  }
  for (int t = 0; t < 100; ++t) EXPECT_EQ(scored[size_t(t)], t >= 12 ? 1 : 0) << t;
}

TEST(EvalWindows, ClearErrors) {
  auto short_text = plan_windows(100, 128, 128);
  ASSERT_FALSE(short_text.ok());
  EXPECT_NE(short_text.message().find("100 tokens, fewer than one window of 128"),
            std::string::npos)
      << short_text.message();
  EXPECT_FALSE(plan_windows(100, 2, 2).ok());
  EXPECT_FALSE(plan_windows(100, 16, 0).ok());
  EXPECT_FALSE(plan_windows(100, 16, 17).ok());
}

TEST(EvalWindows, FirstTokenBecomesBos) {
  const std::vector<int32_t> t = {1, 10, 11, 12, 13, 14, 15, 16};
  auto p = plan_windows(int64_t(t.size()), 4, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(window_tokens(t, *p, 1, 1), (std::vector<int32_t>{1, 14, 15, 16}));
  EXPECT_EQ(window_tokens(t, *p, 1, -1), (std::vector<int32_t>{13, 14, 15, 16}));
}

TEST(EvalStats, LogSoftmaxAndMeanAgainstHandValues) {
  const std::vector<float> row = {1.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(log_sum_exp(row), lse, 1e-12);
  std::vector<float> lp(3);
  log_softmax(row, lp);
  EXPECT_NEAR(lp[0], 1.0 - lse, 1e-6);
  EXPECT_EQ(argmax(row), 2);
  EXPECT_EQ(argmax(std::vector<float>{5, 5, 1}), 0);  // the first of equal ones
  // Huge logits stay finite.
  EXPECT_NEAR(log_sum_exp(std::vector<float>{1000.0f, 1000.0f}), 1000 + std::log(2.0), 1e-9);

  MeanStats m;
  for (double x : {1.0, 2.0, 3.0, 4.0}) m.add(x);
  EXPECT_DOUBLE_EQ(m.mean(), 2.5);
  // Population variance 1.25, standard error sqrt(1.25 / 3).
  EXPECT_NEAR(m.std_error(), std::sqrt(1.25 / 3), 1e-12);
  const PerplexityResult r = perplexity_of(m);
  EXPECT_NEAR(r.ppl, std::exp(2.5), 1e-9);
  EXPECT_NEAR(r.ppl_error, std::exp(2.5) * std::sqrt(1.25 / 3), 1e-9);
  EXPECT_EQ(r.n_tokens, 4);

  const std::vector<float> sorted = {0, 1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(quantile_sorted(sorted, 0.5), 2);
  EXPECT_NEAR(quantile_sorted(sorted, 0.99), 3.96, 1e-12);
  EXPECT_DOUBLE_EQ(quantile_sorted(std::vector<float>{1, 2}, 0.5), 1.5);  // even: the midpoint
}

TEST(EvalStats, KlOfAModelAgainstItselfIsZero) {
  KlStats s;
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<float> lp(4);
  log_softmax(logits, lp);
  for (int32_t t = 0; t < 4; ++t) s.add(lp, logits, t);
  const KlStats::Report r = s.report();
  EXPECT_NEAR(r.kld_mean, 0, 1e-7);
  EXPECT_NEAR(r.kld_max, 0, 1e-7);
  EXPECT_DOUBLE_EQ(r.top1_agreement, 1);
  EXPECT_NEAR(r.delta_ppl, 0, 1e-6);
  EXPECT_NEAR(r.ln_ppl_ratio, 0, 1e-7);
  EXPECT_NEAR(r.ppl.ppl, r.ppl_base.ppl, 1e-6);
  EXPECT_NEAR(r.rms_delta_p, 0, 1e-7);
}

TEST(EvalStats, KlAgainstHandValues) {
  // Base p = (0.75, 0.25), model q = (0.5, 0.5): KL = 0.75 ln 1.5 + 0.25 ln 0.5.
  const std::vector<float> base = {float(std::log(0.75)), float(std::log(0.25))};
  const std::vector<float> model_a = {0.0f, 0.0f};
  // Model q = (0.2, 0.8): top-1 differs; KL = 0.75 ln(0.75/0.2) + 0.25 ln(0.25/0.8).
  const std::vector<float> model_b = {float(std::log(0.2)), float(std::log(0.8))};
  KlStats s;
  s.add(base, model_a, 0);
  s.add(base, model_b, 1);
  const KlStats::Report r = s.report();
  const double k1 = 0.75 * std::log(1.5) + 0.25 * std::log(0.5);
  const double k2 = 0.75 * std::log(0.75 / 0.2) + 0.25 * std::log(0.25 / 0.8);
  EXPECT_NEAR(r.kld_mean, (k1 + k2) / 2, 1e-6);
  EXPECT_NEAR(r.kld_max, k2, 1e-6);
  EXPECT_NEAR(r.kld_median, (k1 + k2) / 2, 1e-6);
  EXPECT_DOUBLE_EQ(r.top1_agreement, 0.5);  // model_a's tie picks token 0, as the base does
  // NLLs: model -ln 0.5, -ln 0.8; base -ln 0.75, -ln 0.25.
  const double nll = (-std::log(0.5) - std::log(0.8)) / 2;
  const double nll_base = (-std::log(0.75) - std::log(0.25)) / 2;
  EXPECT_NEAR(r.ln_ppl_ratio, nll - nll_base, 1e-6);
  EXPECT_NEAR(r.delta_ppl, std::exp(nll) - std::exp(nll_base), 1e-5);
  EXPECT_NEAR(r.rms_delta_p,
              std::sqrt(((0.5 - 0.75) * (0.5 - 0.75) + (0.8 - 0.25) * (0.8 - 0.25)) / 2), 1e-6);
}

LogitsFileHeader small_header() {
  LogitsFileHeader h;
  h.n_vocab = 5;
  h.plan = *plan_windows(20, 8, 8);  // 2 windows, 3 scored each
  h.bos = 1;
  h.vocab_fingerprint = vocab_fingerprint(std::vector<std::string>{"a", "b", "c", "d", "e"});
  for (int32_t i = 0; i < 20; ++i) h.tokens.push_back(i % 5);
  h.label = "tiny.gguf";
  return h;
}

std::vector<float> window_values(int w) {
  std::vector<float> v(15);
  for (size_t i = 0; i < v.size(); ++i) v[i] = -float(i) * 0.25f - float(w);
  return v;
}

TEST(EvalLogitsFile, RoundTrip) {
  test::TempDir dir;
  const std::string path = dir.path("base.logits");
  const LogitsFileHeader h = small_header();
  {
    auto w = LogitsWriter::create(path, h);
    ASSERT_TRUE(w.ok()) << w.message();
    EXPECT_FALSE(w->write_window(std::vector<float>(14)).ok());  // not a window's size
    ASSERT_TRUE(w->write_window(window_values(0)).ok());
    EXPECT_FALSE(w->close().ok());  // one of two windows
    ASSERT_TRUE(w->write_window(window_values(1)).ok());
    EXPECT_FALSE(w->write_window(window_values(2)).ok());  // a third
    ASSERT_TRUE(w->close().ok());
  }
  auto r = LogitsReader::open(path);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->header().n_vocab, 5);
  EXPECT_EQ(r->header().plan.n_ctx, 8);
  EXPECT_EQ(r->header().plan.n_windows, 2);
  EXPECT_EQ(r->header().plan.first_scored, 5);
  EXPECT_EQ(r->header().bos, 1);
  EXPECT_EQ(r->header().vocab_fingerprint, h.vocab_fingerprint);
  EXPECT_EQ(r->header().tokens, h.tokens);
  EXPECT_EQ(r->header().label, "tiny.gguf");
  std::vector<float> v;
  ASSERT_TRUE(r->read_window(v).ok());
  EXPECT_EQ(v, window_values(0));
  ASSERT_TRUE(r->read_window(v).ok());
  EXPECT_EQ(v, window_values(1));
  EXPECT_FALSE(r->read_window(v).ok());
  EXPECT_NE(vocab_fingerprint(std::vector<std::string>{"ab", "c"}),
            vocab_fingerprint(std::vector<std::string>{"a", "bc"}));
}

// Writes a good file, then damages a copy with `edit` and returns the reader's error (or "").
template <class Edit>
std::string open_damaged(Edit edit) {
  test::TempDir dir;
  const std::string path = dir.path("x.logits");
  {
    auto w = LogitsWriter::create(path, small_header());
    EXPECT_TRUE(w.ok());
    EXPECT_TRUE(w->write_window(window_values(0)).ok());
    EXPECT_TRUE(w->write_window(window_values(1)).ok());
    EXPECT_TRUE(w->close().ok());
  }
  std::string bytes = test::read_file(path);
  edit(bytes);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  auto r = LogitsReader::open(path);
  if (!r.ok()) return r.message();
  std::vector<float> v;
  for (int w = 0; w < 2; ++w) {
    if (Status st = r->read_window(v); !st.ok()) return st.message();
  }
  return "";
}

TEST(EvalLogitsFile, DamagedTruncatedAndForeignFilesAreRefused) {
  EXPECT_EQ(open_damaged([](std::string&) {}), "");
  EXPECT_NE(open_damaged([](std::string& b) { b[9] ^= 1; }).find("corrupt (header checksum)"),
            std::string::npos);
  EXPECT_NE(open_damaged([](std::string& b) { b[60] ^= 1; }).find("corrupt"),
            std::string::npos);  // the label
  EXPECT_NE(open_damaged([](std::string& b) {
              b[b.size() - 10] ^= 4;
            }).find("corrupt (checksum of window 1)"),
            std::string::npos);
  EXPECT_NE(open_damaged([](std::string& b) { b.resize(b.size() - 7); }).find("truncated"),
            std::string::npos);
  EXPECT_NE(open_damaged([](std::string& b) { b += "x"; }).find("its header says"),
            std::string::npos);
  EXPECT_NE(open_damaged([](std::string& b) {
              b = "GGUF and more bytes than a header needs at all "
                  "............";
            }).find("not a logits file"),
            std::string::npos);
  EXPECT_NE(open_damaged([](std::string& b) { b.clear(); }).find("not a logits file"),
            std::string::npos);
  // A header with a valid checksum but sizes no file of ours has (a crafted file): refused
  // before anything is allocated for them.
  const auto with_field = [](size_t offset, uint32_t value) {
    return [offset, value](std::string& b) {
      std::memcpy(b.data() + offset, &value, 4);
      const uint32_t crc = crc32c(b.data(), 52);
      std::memcpy(b.data() + 52, &crc, 4);
    };
  };
  for (auto [offset, value] : {std::pair<size_t, uint32_t>{8, 0x7fffffffu},
                               {12, 0x40000000u},
                               {24, 0x7fffffffu},
                               {20, 0u},
                               {44, 0x100u}}) {
    EXPECT_NE(open_damaged(with_field(offset, value)).find("inconsistent header"),
              std::string::npos)
        << offset;
  }
  auto missing = LogitsReader::open("/nonexistent/base.logits");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot open logits file '/nonexistent/base.logits'"),
            std::string::npos);
}

}  // namespace
}  // namespace sluice::eval
