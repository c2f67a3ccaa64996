// hf_import.h on small hand-written tokenizer.json files (no npm needed; the real gpt-oss,
// Gemma 3 and Qwen tokenizers are tokenizer_hf_reference's job): what each flavour becomes,
// the vocab-only GGUF round trip, and the errors bad input gives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using HfIds = std::vector<TokenId>;

// Byte-level BPE with Qwen3.5's Split regex: the GPT-2 alphabet for "a", "b", " " ("Ġ"),
// merges "a b" and "Ġ ab", added tokens <|im_end|> (special) and <think> (not).
constexpr const char* kByteLevelJson = R"json({
  "added_tokens": [
    {"id": 6, "content": "<|im_end|>", "special": true},
    {"id": 7, "content": "<think>", "special": false}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex":
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4},
            "merges": ["a b", ["\u0120", "ab"]]}
})json";

constexpr const char* kByteLevelConfig =
    R"json({"eos_token": "<|im_end|>", "bos_token": null, "add_bos_token": false})json";

// SentencePiece-style BPE as Gemma 3: ' ' -> '▁', byte fallback, <unk>/<bos>/<eos>.
constexpr const char* kSpmJson = R"json({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<bos>", "special": true},
    {"id": 2, "content": "<eos>", "special": true},
    {"id": 9, "content": "\n\n", "special": false}
  ],
  "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
  "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"},
  "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
            "vocab": {"<unk>": 0, "<bos>": 1, "<eos>": 2, "<0x0A>": 3, "<0x21>": 4,
                      "\u2581": 5, "h": 6, "i": 7, "hi": 8, "\n\n": 9, "\u2581hi": 10},
            "merges": ["h i", "\u2581 hi"]}
})json";

constexpr const char* kSpmConfig =
    R"json({"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": true,
            "add_eos_token": false})json";

Tokenizer make_hf(VocabSpec spec) {
  Result<Vocab> v = Vocab::from_spec(std::move(spec));
  EXPECT_TRUE(v.ok()) << v.message();
  Result<Tokenizer> t = Tokenizer::create(std::move(v).value());
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

HfIds encode_hf(const Tokenizer& tok, std::string_view text) {
  EncodeOptions o;
  o.add_special = false;
  o.parse_special = true;
  Result<HfIds> ids = tok.encode(text, o);
  EXPECT_TRUE(ids.ok()) << ids.message();
  return ids.ok() ? *ids : HfIds{};
}

TEST(TokenizerHfImport, ByteLevelBecomesGpt2WithPreFromTheRegex) {
  Result<VocabSpec> spec = vocab_spec_from_hf_json(kByteLevelJson, kByteLevelConfig);
  ASSERT_TRUE(spec.ok()) << spec.message();
  EXPECT_EQ(spec->model, "gpt2");
  EXPECT_EQ(spec->pre, "qwen35");
  EXPECT_EQ(spec->merges, (std::vector<std::string>{"a b", "\xC4\xA0 ab"}));
  ASSERT_EQ(spec->tokens.size(), 8u);
  EXPECT_EQ(spec->tokens[5], "[PAD5]");  // an id neither list uses
  EXPECT_EQ(spec->token_types[5], int32_t(GgufTokenType::kUnused));
  EXPECT_EQ(spec->token_types[6], int32_t(GgufTokenType::kControl));
  EXPECT_EQ(spec->token_types[7], int32_t(GgufTokenType::kUserDefined));
  EXPECT_EQ(spec->token_types[3], int32_t(GgufTokenType::kNormal));
  EXPECT_EQ(spec->eos_id, 6);
  EXPECT_FALSE(spec->bos_id.has_value());
  EXPECT_EQ(spec->add_bos, false);

  const Tokenizer tok = make_hf(*spec);
  EXPECT_EQ(encode_hf(tok, "ab ab<|im_end|><think>"), (HfIds{3, 4, 6, 7}));
  DecodeOptions d;
  d.render_special = true;
  EXPECT_EQ(tok.decode(HfIds{3, 4, 6, 7}, d), "ab ab<|im_end|><think>");
}

TEST(TokenizerHfImport, SentencePieceStyleBecomesSpmWithScoresFromMerges) {
  Result<VocabSpec> spec = vocab_spec_from_hf_json(kSpmJson, kSpmConfig);
  ASSERT_TRUE(spec.ok()) << spec.message();
  EXPECT_EQ(spec->model, "llama");
  EXPECT_TRUE(spec->merges.empty());
  EXPECT_EQ(spec->add_space_prefix, false);  // no Prepend/Metaspace: Gemma 3
  EXPECT_EQ(spec->token_types[0], int32_t(GgufTokenType::kUnknown));
  EXPECT_EQ(spec->token_types[1], int32_t(GgufTokenType::kControl));
  EXPECT_EQ(spec->token_types[3], int32_t(GgufTokenType::kByte));
  EXPECT_EQ(spec->token_types[9], int32_t(GgufTokenType::kUserDefined));
  EXPECT_EQ(spec->scores[8], 0.0f);    // "hi": merge 0
  EXPECT_EQ(spec->scores[10], -1.0f);  // "▁hi": merge 1
  EXPECT_LT(spec->scores[6], -1.0f);   // "h": no merge makes it
  EXPECT_EQ(spec->bos_id, 1);
  EXPECT_EQ(spec->eos_id, 2);
  EXPECT_EQ(spec->add_bos, true);

  const Tokenizer tok = make_hf(*spec);
  // "hi hi\n\n!\n": words, the user-defined "\n\n", byte fallback for '!' and '\n'.
  EXPECT_EQ(encode_hf(tok, "hi hi\n\n!\n"), (HfIds{8, 10, 9, 4, 3}));
  EXPECT_EQ(tok.decode(HfIds{8, 10, 9, 4, 3}), "hi hi\n\n!\n");
}

TEST(TokenizerHfImport, VocabGgufRoundTrips) {
  Result<VocabSpec> spec = vocab_spec_from_hf_json(kSpmJson, kSpmConfig);
  ASSERT_TRUE(spec.ok()) << spec.message();
  test::TempDir dir;
  const std::string path = dir.path("vocab.gguf");
  ASSERT_TRUE(write_vocab_gguf(*spec, path).ok());
  Result<Tokenizer> tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->vocab().n_tokens(), 11);
  EXPECT_EQ(tok->vocab().bos(), 1);
  EXPECT_TRUE(tok->vocab().add_bos());
  EXPECT_FALSE(tok->vocab().add_space_prefix());
  EXPECT_EQ(tok->vocab().token(10).score, -1.0f);
  EXPECT_EQ(encode_hf(*tok, "hi hi\n\n!\n"), (HfIds{8, 10, 9, 4, 3}));
}

// Each bad input names what is wrong.
TEST(TokenizerHfImport, Errors) {
  auto error_of = [](std::string_view json) {
    Result<VocabSpec> r = vocab_spec_from_hf_json(json);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.message();
  };
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", )").find("tokenizer.json is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of(R"([1, 2])").find("no \"model\" object"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})")
                .find("model type 'Unigram' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})").find("'WordPiece'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}},
                         "pre_tokenizer": {"type": "ByteLevel"}})")
                .find("model.merges is missing"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": []},
                         "pre_tokenizer": {"type": "ByteLevel"}})")
                .find("model.merges is missing or empty"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]},
                         "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"},
                                           "behavior": "Isolated"}})")
                .find("neither byte-level"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]},
                         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                           {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"},
                           {"type": "ByteLevel", "use_regex": false}]}})")
                .find("no tokenizer.ggml.pre that sluice knows has these pre-tokenizer regexes"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": [7]},
                         "pre_tokenizer": {"type": "ByteLevel"}})")
                .find("model.merges[0] is neither"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0},
                                   "merges": ["a a"]}})")
                .find("makes 'aa', which is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"normalizer": {"type": "Lowercase"},
                         "model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]},
                         "pre_tokenizer": {"type": "ByteLevel"}})")
                .find("normalizer {\"type\":\"Lowercase\"} is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": 7, "vocab": {"a": 0}, "merges": ["a a"]}})")
                .find("has a value of the wrong type"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]},
                         "pre_tokenizer": {"type": "Split", "pattern": {"Regex": 5},
                                           "behavior": "Isolated"}})")
                .find("neither byte-level"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 2000000000},
                                   "merges": ["a a"]}, "pre_tokenizer": {"type": "ByteLevel"}})")
                .find("token id 2000000000 is far beyond the 2 tokens listed"),
            std::string::npos);
  Result<VocabSpec> missing = vocab_spec_from_hf_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot open '/nonexistent/tokenizer.json'"), std::string::npos);
}

}  // namespace
}  // namespace sluice
