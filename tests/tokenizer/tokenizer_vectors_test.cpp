// Golden vectors from llama.cpp's models/ggml-vocab-*.gguf.{inp,out} (test-tokenizer-0):
// every string must tokenize to exactly the expected ids with add_special = false and
// parse_special = false. Also: decode(encode(s)) == s where the tokenizer is lossless, and
// the streaming decoder agrees with whole decoding.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

struct Vectors {
  std::vector<std::string> texts;
  std::vector<std::vector<TokenId>> ids;
};

// .inp: each string followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per string.
Vectors read_vectors(const std::string& gguf_path) {
  Vectors v;
  const std::string inp = test::read_file(gguf_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    v.texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(test::read_file(gguf_path + ".out"));
  std::string line;
  while (v.ids.size() < v.texts.size() && std::getline(out, line)) {
    std::istringstream ls(line);
    std::vector<TokenId> ids;
    TokenId id;
    while (ls >> id) ids.push_back(id);
    v.ids.push_back(std::move(ids));
  }
  return v;
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

void check_vocab(const std::string& path, bool lossless) {
  Result<Tokenizer> tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.message();
  const Vectors v = read_vectors(path);
  ASSERT_GT(v.texts.size(), 10u);
  ASSERT_EQ(v.texts.size(), v.ids.size()) << "the .out file has fewer lines than tests";

  EncodeOptions enc;
  enc.add_special = false;
  enc.parse_special = false;
  DecodeOptions dec;
  dec.clean_spaces = false;
  size_t n_bad = 0;
  for (size_t i = 0; i < v.texts.size(); ++i) {
    Result<std::vector<TokenId>> ids = tok->encode(v.texts[i], enc);
    ASSERT_TRUE(ids.ok()) << ids.message();
    if (*ids != v.ids[i]) {
      ++n_bad;
      ADD_FAILURE() << "test " << i << " '" << v.texts[i] << "'\n  expected:" << show(v.ids[i])
                    << "\n  got:     " << show(*ids);
      continue;
    }
    const std::string whole = tok->decode(*ids, dec);
    if (lossless) {
      EXPECT_EQ(whole, v.texts[i]) << "round trip of test " << i;
    }
    StreamingDecoder stream(*tok, dec);
    std::string streamed;
    for (TokenId id : *ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, whole) << "streaming decode of test " << i;
  }
  EXPECT_EQ(n_bad, 0u) << "of " << v.texts.size() << " vectors";
}

#define SLUICE_VOCAB_TEST(test_name, file, lossless)         \
  TEST(TokenizerVectors, test_name) {                        \
    SLUICE_REQUIRE_SHARED(path, "testdata/tokenizer/" file); \
    check_vocab(path, lossless);                             \
  }

SLUICE_VOCAB_TEST(LlamaSpm, "ggml-vocab-llama-spm.gguf", true)
SLUICE_VOCAB_TEST(Phi3, "ggml-vocab-phi-3.gguf", true)
SLUICE_VOCAB_TEST(LlamaBpe, "ggml-vocab-llama-bpe.gguf", true)
SLUICE_VOCAB_TEST(Gpt2, "ggml-vocab-gpt-2.gguf", true)
SLUICE_VOCAB_TEST(DeepseekLlm, "ggml-vocab-deepseek-llm.gguf", true)
SLUICE_VOCAB_TEST(DeepseekCoder, "ggml-vocab-deepseek-coder.gguf", true)
SLUICE_VOCAB_TEST(Falcon, "ggml-vocab-falcon.gguf", true)
SLUICE_VOCAB_TEST(Starcoder, "ggml-vocab-starcoder.gguf", true)
SLUICE_VOCAB_TEST(Mpt, "ggml-vocab-mpt.gguf", true)
SLUICE_VOCAB_TEST(Refact, "ggml-vocab-refact.gguf", true)
SLUICE_VOCAB_TEST(BertBge, "ggml-vocab-bert-bge.gguf", false)  // lowercases, drops spaces

}  // namespace
}  // namespace sluice
