// Encoding cost must grow linearly with the input, also for adversarial input: 1 MiB of one
// repeated character (one giant pre-tokenized word) and 1 MiB of random bytes. Checked with
// the encoder's work counters (doubling the input must about double the work), plus a
// generous wall-clock bound that catches regex backtracking the counters cannot see.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "base/unicode.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

constexpr size_t kHalf = 512 * 1024;
constexpr size_t kFull = 1024 * 1024;
constexpr double kMaxSeconds = 30;  // per 1 MiB encode; sanitizer builds are slow

uint64_t work(const EncodeStats& s) {
  return s.regex_matches + s.words + s.symbols + s.heap_pops + s.lookups + s.special_steps;
}

struct Run {
  uint64_t work = 0;
  double seconds = 0;
};

Run encode_run(const Tokenizer& tok, const std::string& text) {
  EncodeOptions opts;
  opts.add_special = false;
  std::vector<TokenId> ids;
  EncodeStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = tok.encode_into(text, opts, ids, &stats);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(st.ok()) << st.message();
  return {work(stats), std::chrono::duration<double>(t1 - t0).count()};
}

std::string repeated(const std::string& unit, size_t bytes) {
  std::string s;
  while (s.size() + unit.size() <= bytes) s += unit;
  return s;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

// Doubling the input must roughly double the work; 1 MiB must finish in bounded time.
void expect_linear(const Tokenizer& tok, const std::string& unit, const char* what) {
  const Run half = encode_run(tok, unit.empty() ? random_bytes(kHalf, 1) : repeated(unit, kHalf));
  const Run full = encode_run(tok, unit.empty() ? random_bytes(kFull, 2) : repeated(unit, kFull));
  ASSERT_GT(half.work, 0u) << what;
  const double ratio = double(full.work) / double(half.work);
  EXPECT_GT(ratio, 1.6) << what;
  EXPECT_LT(ratio, 2.4) << what << ": work " << half.work << " -> " << full.work;
  EXPECT_LT(full.seconds, kMaxSeconds) << what;
}

TEST(TokenizerScaling, SyntheticBpeLongWord) {
  // a, aa, aaaa, ... 64 a's: one 1 MiB word merges all the way up.
  VocabSpec s;
  s.model = "gpt2";
  s.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) s.tokens.emplace_back(unicode::byte_to_gpt2_utf8(uint8_t(b)));
  for (std::string piece = "a"; piece.size() < 64; piece += piece) {
    std::string merge = piece;
    merge.append(" ").append(piece);
    s.merges.push_back(merge);
    s.tokens.push_back(piece + piece);
  }
  Result<Vocab> v = Vocab::from_spec(std::move(s));
  ASSERT_TRUE(v.ok()) << v.message();
  Result<Tokenizer> tok = Tokenizer::create(std::move(v).value());
  ASSERT_TRUE(tok.ok()) << tok.message();
  expect_linear(*tok, "a", "1 MiB of 'a'");
  expect_linear(*tok, "", "1 MiB of random bytes");
}

class TokenizerScalingVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerScalingVocab, AdversarialInputs) {
  SLUICE_REQUIRE_SHARED(path, std::string("testdata/tokenizer/ggml-vocab-") + GetParam() + ".gguf");
  Result<Tokenizer> tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.message();
  expect_linear(*tok, "a", "repeated 'a'");
  expect_linear(*tok, " ", "repeated ' '");
  expect_linear(*tok, "\n", "repeated newline");
  expect_linear(*tok, "7", "repeated digit");
  expect_linear(*tok, "!", "repeated '!'");
  expect_linear(*tok, "\xF0\x9F\xA6\x99", "repeated emoji");
  expect_linear(*tok, "", "random bytes");
}

INSTANTIATE_TEST_SUITE_P(Vocabs, TokenizerScalingVocab,
                         ::testing::Values("llama-bpe", "llama-spm", "gpt-2", "deepseek-llm",
                                           "bert-bge"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace sluice
