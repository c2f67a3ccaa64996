// The streaming decoder: never emits part of a UTF-8 character, reassembles byte-fallback
// pieces, strips the SPM leading space once, and agrees with whole decoding.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/unicode.h"
#include "test_util.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using Ids = std::vector<TokenId>;
const std::string kSp = "\xE2\x96\x81";  // ▁
constexpr TokenId kByte0 = 3;            // <0x00> in the vocabulary below

// <unk> <s> </s>, the 256 byte tokens, "▁", "▁Hello", "a".
Tokenizer spm_tokenizer() {
  VocabSpec s;
  s.model = "llama";
  auto add = [&](std::string text, int32_t type, float score = 0) {
    s.tokens.push_back(std::move(text));
    s.token_types.push_back(type);
    s.scores.push_back(score);
  };
  add("<unk>", int32_t(GgufTokenType::kUnknown));
  add("<s>", int32_t(GgufTokenType::kControl));
  add("</s>", int32_t(GgufTokenType::kControl));
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    std::string t = "<0x";
    t.push_back(kHex[b >> 4]);
    t.push_back(kHex[b & 15]);
    t.push_back('>');
    add(t, int32_t(GgufTokenType::kByte));
  }
  add(kSp, int32_t(GgufTokenType::kNormal), -1);
  std::string hello = kSp;
  hello.append("Hello");
  add(hello, int32_t(GgufTokenType::kNormal), -0.5f);
  add("a", int32_t(GgufTokenType::kNormal), -2);
  Result<Vocab> v = Vocab::from_spec(std::move(s));
  EXPECT_TRUE(v.ok()) << v.message();
  Result<Tokenizer> t = Tokenizer::create(std::move(v).value());
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

std::vector<std::string> stream(const Tokenizer& tok, const Ids& ids,
                                std::string* flushed = nullptr, DecodeOptions opts = {}) {
  StreamingDecoder dec(tok, opts);
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(dec.push(id));
  const std::string rest = dec.flush();
  if (flushed) *flushed = rest;
  return out;
}

TEST(TokenizerStream, ByteFallbackCharacterIsHeldUntilComplete) {
  Tokenizer tok = spm_tokenizer();
  const TokenId sp = tok.vocab().find(kSp);
  // "▁€": the euro sign as <0xE2><0x82><0xAC>.
  const Ids ids = {sp, kByte0 + 0xE2, kByte0 + 0x82, kByte0 + 0xAC};
  EXPECT_EQ(stream(tok, ids), (std::vector<std::string>{"", "", "", "\xE2\x82\xAC"}));
  EXPECT_EQ(tok.decode(ids), "\xE2\x82\xAC");
}

TEST(TokenizerStream, EmojiAcrossFourByteTokens) {
  Tokenizer tok = spm_tokenizer();
  const Ids encoded = *tok.encode("\xF0\x9F\xA6\x99 a");  // 🦙 a (not in the vocabulary)
  std::string flushed;
  const std::vector<std::string> out = stream(tok, encoded, &flushed);
  std::string all;
  for (const std::string& s : out) {
    EXPECT_TRUE(unicode::is_valid_utf8(s)) << s;
    all += s;
  }
  EXPECT_EQ(all, "\xF0\x9F\xA6\x99 a");
  EXPECT_TRUE(flushed.empty());
  // The four bytes complete on the fourth one.
  const Ids bytes = {kByte0 + 0xF0, kByte0 + 0x9F, kByte0 + 0xA6, kByte0 + 0x99};
  EXPECT_EQ(stream(tok, bytes), (std::vector<std::string>{"", "", "", "\xF0\x9F\xA6\x99"}));
}

TEST(TokenizerStream, LeadingSpaceRemovedOnce) {
  Tokenizer tok = spm_tokenizer();
  const TokenId hello = tok.vocab().find(kSp + "Hello");
  EXPECT_EQ(stream(tok, {1, hello, hello}), (std::vector<std::string>{"", "Hello", " Hello"}));
  DecodeOptions render;
  render.render_special = true;
  EXPECT_EQ(stream(tok, {1, hello}, nullptr, render), (std::vector<std::string>{"<s>", " Hello"}));
  StreamingDecoder dec(tok);
  EXPECT_EQ(dec.push(hello), "Hello");
  dec.reset();
  EXPECT_EQ(dec.push(hello), "Hello");
}

TEST(TokenizerStream, InvalidSequencesBecomeReplacementCharacters) {
  Tokenizer tok = spm_tokenizer();
  const std::string fffd = "\xEF\xBF\xBD";
  // A lead byte followed by ASCII: the lead byte can never complete.
  EXPECT_EQ(stream(tok, {kByte0 + 0xE2, kByte0 + 'A'}), (std::vector<std::string>{"", fffd + "A"}));
  // A stray continuation byte.
  EXPECT_EQ(stream(tok, {kByte0 + 0x80}), (std::vector<std::string>{fffd}));
  // Truncated at the end of the stream: flush() reports it.
  std::string flushed;
  EXPECT_EQ(stream(tok, {kByte0 + 0xE2, kByte0 + 0x82}, &flushed),
            (std::vector<std::string>{"", ""}));
  EXPECT_EQ(flushed, fffd);
}

TEST(TokenizerStream, ControlTokensHiddenUnlessRendered) {
  Tokenizer tok = spm_tokenizer();
  EXPECT_EQ(stream(tok, {2}), (std::vector<std::string>{""}));
  DecodeOptions render;
  render.render_special = true;
  EXPECT_EQ(stream(tok, {2}, nullptr, render), (std::vector<std::string>{"</s>"}));
}

// Real vocabularies: every push is valid UTF-8 and the stream equals the text.
void check_stream_round_trip(const std::string& path, const std::string& text) {
  Result<Tokenizer> tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EncodeOptions eo;
  eo.add_special = false;
  const Ids ids = *tok->encode(text, eo);
  StreamingDecoder dec(*tok);
  std::string all;
  size_t n_held = 0;
  for (TokenId id : ids) {
    const std::string s = dec.push(id);
    EXPECT_TRUE(unicode::is_valid_utf8(s));
    if (dec.n_pending() > 0) ++n_held;
    all += s;
  }
  all += dec.flush();
  EXPECT_EQ(all, text);
  EXPECT_GT(n_held, 0u) << "expected some characters to span tokens";
}

const std::string kMixed =
    "Hello \xF0\x9F\xA6\x99 llama! \xE2\x98\x83 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C "
    "\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F \xE1\x9E\x80\xE1\x9E\xB6";

TEST(TokenizerStream, LlamaBpeEmoji) {
  SLUICE_REQUIRE_SHARED(path, "testdata/tokenizer/ggml-vocab-llama-bpe.gguf");
  check_stream_round_trip(path, kMixed);
}

TEST(TokenizerStream, LlamaSpmByteFallback) {
  SLUICE_REQUIRE_SHARED(path, "testdata/tokenizer/ggml-vocab-llama-spm.gguf");
  check_stream_round_trip(path, kMixed);
}

}  // namespace
}  // namespace sluice
