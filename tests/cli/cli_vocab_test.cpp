// `sluice vocab import`: a tokenizer.json becomes a vocab-only GGUF that `sluice tokenize`
// reads; bad input fails with the file and the reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

// Byte-level BPE with Qwen2's regex: "a", "b", "Ġ", merges "a b" and "Ġ ab".
constexpr const char* kTokenizerJson = R"json({
  "added_tokens": [{"id": 5, "content": "<|im_end|>", "special": true}],
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex":
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "use_regex": false}]},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4},
            "merges": ["a b", "\u0120 ab"]}
})json";

TEST(CliVocab, ImportThenTokenize) {
  test::TempDir dir;
  test::write_text(dir.path("tokenizer.json"), kTokenizerJson);
  test::write_text(dir.path("tokenizer_config.json"), R"({"eos_token": "<|im_end|>"})");
  auto r = test::run_sluice("vocab import " + dir.path("tokenizer.json") + " " +
                            dir.path("v.gguf") + " --name tiny");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model gpt2, pre qwen2, 6 tokens, 2 merges"), std::string::npos) << r.out;
  r = test::run_sluice("tokenize " + dir.path("v.gguf") +
                       " --ids --special --text 'ab ab<|im_end|>'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "3 4 5\n");
}

TEST(CliVocab, BadInputFailsWithTheReason) {
  test::TempDir dir;
  test::write_text(dir.path("tokenizer.json"), R"({"model": {"type": "Unigram", "vocab": []}})");
  auto r =
      test::run_sluice("vocab import " + dir.path("tokenizer.json") + " " + dir.path("v.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("sluice vocab import: error: '" + dir.path("tokenizer.json") +
                       "': tokenizer.json model type 'Unigram' is not supported"),
            std::string::npos)
      << r.err;
  test::write_text(dir.path("tokenizer.json"), "{\"model\": ");
  r = test::run_sluice("vocab import " + dir.path("tokenizer.json") + " " + dir.path("v.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tokenizer.json is not valid JSON"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice
