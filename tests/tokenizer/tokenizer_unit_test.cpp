// Tokenizer behaviour on small hand-built vocabularies (no files needed): metadata defaults,
// merge order, byte fallback, special-token partitioning, BOS/EOS, EOG detection, errors,
// pre-tokenizer splits, detokenizer clean-up.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/unicode.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using Ids = std::vector<TokenId>;

// Concatenation by append (GCC 12 warns falsely about "lit" + std::string&&).
template <class... A>
std::string cat(const A&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

// The value of a Result that must be ok (Vocab and PreTokenizer are move-only).
template <class T>
T take(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.message();
  return std::move(r).value();
}
constexpr int32_t kNormal = int32_t(GgufTokenType::kNormal);
constexpr int32_t kControl = int32_t(GgufTokenType::kControl);
constexpr int32_t kUserDefined = int32_t(GgufTokenType::kUserDefined);
constexpr int32_t kByte = int32_t(GgufTokenType::kByte);
constexpr int32_t kUnknown = int32_t(GgufTokenType::kUnknown);

// Byte-level BPE: ids 0..255 are the GPT-2 alphabet in byte order, then `extra` tokens
// (with types), then merge results in merge order.
struct BpeBuilder {
  VocabSpec spec;
  explicit BpeBuilder(std::string pre = "gpt-2") {
    spec.model = "gpt2";
    spec.pre = std::move(pre);
    for (int b = 0; b < 256; ++b) add(std::string(unicode::byte_to_gpt2_utf8(uint8_t(b))));
  }
  TokenId add(const std::string& text, int32_t type = kNormal) {
    spec.tokens.push_back(text);
    spec.token_types.push_back(type);
    return TokenId(spec.tokens.size() - 1);
  }
  // `left right` in GPT-2 alphabet; the result becomes a token if it is not one.
  void merge(const std::string& left, const std::string& right) {
    spec.merges.push_back(cat(left, " ", right));
    const std::string joined = cat(left, right);
    for (const std::string& t : spec.tokens) {
      if (t == joined) return;
    }
    add(joined);
  }
  TokenId id(const std::string& text) const {
    for (size_t i = 0; i < spec.tokens.size(); ++i) {
      if (spec.tokens[i] == text) return TokenId(i);
    }
    return kNoToken;
  }
  Tokenizer build() const {
    Result<Tokenizer> t = Tokenizer::create(take(Vocab::from_spec(spec)));
    EXPECT_TRUE(t.ok()) << t.message();
    return std::move(t).value();
  }
};

// SPM: <unk> <s> </s>, 256 byte tokens, then scored pieces.
struct SpmBuilder {
  VocabSpec spec;
  SpmBuilder() {
    spec.model = "llama";
    add("<unk>", 0, kUnknown);
    add("<s>", 0, kControl);
    add("</s>", 0, kControl);
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char hex[2] = {kHex[b >> 4], kHex[b & 15]};
      add(cat("<0x", std::string_view(hex, 2), ">"), 0, kByte);
    }
  }
  TokenId add(const std::string& text, float score, int32_t type = kNormal) {
    spec.tokens.push_back(text);
    spec.scores.push_back(score);
    spec.token_types.push_back(type);
    return TokenId(spec.tokens.size() - 1);
  }
  Tokenizer build() const {
    Result<Vocab> v = Vocab::from_spec(spec);
    EXPECT_TRUE(v.ok()) << v.message();
    Result<Tokenizer> t = Tokenizer::create(std::move(v).value());
    EXPECT_TRUE(t.ok()) << t.message();
    return std::move(t).value();
  }
};

const std::string kUnitSp = "\xE2\x96\x81";  // ▁
const std::string kG = "\xC4\xA0";           // Ġ (GPT-2 space)

Ids encode(const Tokenizer& tok, std::string_view text, bool parse_special = false) {
  EncodeOptions o;
  o.add_special = false;
  o.parse_special = parse_special;
  Result<Ids> r = tok.encode(text, o);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : Ids{};
}

TEST(TokenizerVocab, SpmDefaults) {
  Tokenizer tok = SpmBuilder().build();
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.type(), VocabType::kSpm);
  EXPECT_EQ(v.bos(), 1);
  EXPECT_EQ(v.eos(), 2);
  EXPECT_EQ(v.unk(), 0);
  EXPECT_EQ(v.sep(), kNoToken);
  EXPECT_TRUE(v.add_bos());
  EXPECT_FALSE(v.add_eos());
  EXPECT_TRUE(v.add_space_prefix());
  EXPECT_TRUE(v.is_eog(2));
  EXPECT_EQ(v.byte_to_token(0x0A), 3 + 0x0A);
  EXPECT_EQ(v.token_to_byte(3 + 0xE2), 0xE2);
}

TEST(TokenizerVocab, BpeDefaultsAndMetadata) {
  BpeBuilder b("llama-bpe");
  b.merge("a", "b");
  {
    const Vocab v = take(Vocab::from_spec(b.spec));
    EXPECT_EQ(v.bos(), 11);  // llama.cpp's BPE default
    EXPECT_EQ(v.eos(), 11);
    EXPECT_TRUE(v.add_bos());  // llama3 family
    EXPECT_TRUE(v.ignore_merges());
    EXPECT_FALSE(v.add_space_prefix());
  }
  b.spec.bos_id = 5;
  b.spec.eos_id = 999999;  // out of range: ignored, default kept
  b.spec.add_bos = false;
  b.spec.add_eos = true;
  const Vocab v = take(Vocab::from_spec(b.spec));
  EXPECT_EQ(v.bos(), 5);
  EXPECT_EQ(v.eos(), 11);
  EXPECT_FALSE(v.add_bos());
  EXPECT_TRUE(v.add_eos());
}

TEST(TokenizerVocab, BertDefaults) {
  VocabSpec s;
  s.model = "bert";
  for (int i = 0; i < 110; ++i) s.tokens.push_back(cat("t", std::to_string(i)));
  const Vocab v = take(Vocab::from_spec(s));
  EXPECT_EQ(v.type(), VocabType::kWpm);
  EXPECT_EQ(v.bos(), 101);
  EXPECT_EQ(v.unk(), 100);
  EXPECT_EQ(v.sep(), 102);
  EXPECT_EQ(v.pad(), 0);
  EXPECT_EQ(v.mask(), 103);
  EXPECT_TRUE(v.add_sep());
}

TEST(TokenizerVocab, Errors) {
  BpeBuilder b("no-such-pre");
  b.merge("a", "b");
  Result<Vocab> r = Vocab::from_spec(b.spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no-such-pre"), std::string::npos) << r.message();

  VocabSpec t5;
  t5.model = "t5";
  t5.tokens = {"a"};
  EXPECT_FALSE(Vocab::from_spec(t5).ok());

  BpeBuilder nomerges;
  EXPECT_FALSE(Vocab::from_spec(nomerges.spec).ok());

  BpeBuilder dup;
  dup.merge("a", "b");
  dup.add("ab");
  EXPECT_NE(Vocab::from_spec(dup.spec).message().find("duplicate"), std::string::npos);

  BpeBuilder glm("chatglm-bpe");  // no BOS token
  glm.merge("a", "b");
  EXPECT_EQ(Vocab::from_spec(glm.spec)->bos(), kNoToken);
  glm.spec.add_bos = true;
  EXPECT_FALSE(Vocab::from_spec(glm.spec).ok());

  VocabSpec empty;
  empty.model = "llama";
  EXPECT_FALSE(Vocab::from_spec(empty).ok());
}

TEST(TokenizerVocab, EndOfGeneration) {
  BpeBuilder b;
  b.merge("a", "b");
  const TokenId eot = b.add("<|eot_id|>", kControl);
  const TokenId im_end = b.add("<|im_end|>", kControl);
  const TokenId end = b.add("<|end|>", kNormal);  // mistyped: becomes control
  const TokenId other = b.add("<|start|>", kControl);
  b.spec.eos_id = b.add("</eos>", kControl);
  const Vocab v = take(Vocab::from_spec(b.spec));
  EXPECT_EQ(v.eot(), eot);
  EXPECT_TRUE(v.is_eog(eot));
  EXPECT_TRUE(v.is_eog(im_end));
  EXPECT_TRUE(v.is_eog(end));
  EXPECT_TRUE(v.has_attr(end, kAttrControl));
  EXPECT_TRUE(v.is_eog(*b.spec.eos_id));
  EXPECT_FALSE(v.is_eog(other));
  EXPECT_FALSE(v.is_eog(b.id("a")));
}

TEST(TokenizerBpe, MergesLowestRankFirst) {
  BpeBuilder b;
  b.merge("b", "c");  // rank 0
  b.merge("a", "b");  // rank 1
  b.merge("ab", "c");
  Tokenizer tok = b.build();
  // (b c) outranks (a b); "a"+"bc" has no merge.
  EXPECT_EQ(encode(tok, "abc"), (Ids{b.id("a"), b.id("bc")}));

  BpeBuilder b2;
  b2.merge("a", "b");
  b2.merge("b", "c");
  b2.merge("ab", "c");
  Tokenizer tok2 = b2.build();
  EXPECT_EQ(encode(tok2, "abc"), (Ids{b2.id("abc")}));
}

TEST(TokenizerBpe, TiesGoLeftmost) {
  BpeBuilder b;
  b.merge("a", "a");
  b.merge("aa", "aa");
  Tokenizer tok = b.build();
  EXPECT_EQ(encode(tok, "aaa"), (Ids{b.id("aa"), b.id("a")}));
  EXPECT_EQ(encode(tok, "aaaaa"), (Ids{b.id("aaaa"), b.id("a")}));
}

TEST(TokenizerBpe, PreTokenizedWordsMergeSeparately) {
  BpeBuilder b;
  b.merge(kG, "a");
  b.merge("a", "a");
  Tokenizer tok = b.build();
  // GPT-2 splits "aa aa" into "aa" and " aa"; " a" merges before "a a" can cross words.
  EXPECT_EQ(encode(tok, "aa aa"), (Ids{b.id("aa"), b.id(cat(kG, "a")), b.id("a")}));
  DecodeOptions d;
  d.clean_spaces = false;
  EXPECT_EQ(tok.decode(encode(tok, "aa aa"), d), "aa aa");
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWords) {
  BpeBuilder b("llama-bpe");
  b.merge("x", "y");
  const TokenId xyz = b.add("xyz");  // reachable only as a whole word
  Tokenizer tok = b.build();
  EXPECT_EQ(encode(tok, "xyz"), (Ids{xyz}));
}

TEST(TokenizerBpe, InvalidUtf8IsLossless) {
  BpeBuilder b;
  b.merge("a", "b");
  Tokenizer tok = b.build();
  const std::string text = std::string("ab\xFF\xC3 \x80z\xE2\x82", 9);
  DecodeOptions d;
  d.clean_spaces = false;
  EXPECT_EQ(tok.decode(encode(tok, text), d), text);
}

TEST(TokenizerSpecial, ParseSpecialLongestFirst) {
  BpeBuilder b;
  b.merge("a", "b");
  const TokenId x = b.add("<|x|>", kControl);
  const TokenId xy = b.add("<|x|>y", kControl);
  const TokenId foo = b.add("foo", kUserDefined);
  Tokenizer tok = b.build();
  const TokenId lt = b.id("<");
  // Control tokens only with parse_special; the longer one wins.
  EXPECT_EQ(encode(tok, "<|x|>yab<|x|>", true), (Ids{xy, b.id("ab"), x}));
  const Ids plain = encode(tok, "<|x|>", false);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain[0], lt);
  // User-defined tokens are matched even without parse_special.
  EXPECT_EQ(encode(tok, "abfooab", false), (Ids{b.id("ab"), foo, b.id("ab")}));
}

TEST(TokenizerSpecial, Phi3RstripSwallowsWhitespace) {
  SpmBuilder s;
  s.spec.name = "Phi3";
  s.add(kUnitSp, -1);
  s.add("h", -2);
  s.add("i", -2);
  s.add("hi", -1);
  s.add(cat(kUnitSp, "hi"), -0.5f);
  const TokenId end = s.add("<|end|>", 0, kControl);
  Tokenizer tok = s.build();
  EXPECT_TRUE(tok.vocab().has_attr(end, kAttrRstrip));
  EXPECT_FALSE(tok.vocab().has_attr(1, kAttrRstrip));  // <s> excluded
  // The whitespace after <|end|> is dropped; the text after it gets the SPM space prefix.
  EXPECT_EQ(encode(tok, "<|end|> \n hi", true), (Ids{end, tok.vocab().find(cat(kUnitSp, "hi"))}));
}

TEST(TokenizerSpecial, BosEosOptions) {
  SpmBuilder s;
  const TokenId a = s.add(cat(kUnitSp, "a"), -1);
  Tokenizer tok = s.build();
  EXPECT_EQ(*tok.encode("a"), (Ids{1, a}));
  EncodeOptions o;
  o.add_bos = false;
  o.add_eos = true;
  EXPECT_EQ(*tok.encode("a", o), (Ids{a, 2}));
  o.add_special = false;
  EXPECT_EQ(*tok.encode("a", o), (Ids{a}));
  EXPECT_EQ(*tok.encode(""), (Ids{1}));  // like sentencepiece: BOS only

  BpeBuilder glm("chatglm-bpe");
  glm.merge("a", "b");
  Tokenizer g = glm.build();
  EncodeOptions force;
  force.add_bos = true;
  EXPECT_FALSE(g.encode("ab", force).ok());  // no BOS to add: an error, not a silent skip
}

TEST(TokenizerSpm, ScoreOrderAndByteFallback) {
  SpmBuilder s;
  s.add(kUnitSp, -1);
  s.add("a", -2);
  s.add("b", -3);
  s.add("ab", -1.5f);
  s.add(cat(kUnitSp, "a"), -1.2f);
  const TokenId sp_ab = s.add(cat(kUnitSp, "ab"), -0.5f);
  Tokenizer tok = s.build();
  EXPECT_EQ(encode(tok, "ab"), (Ids{sp_ab}));
  // "€" is not in the vocabulary: its three bytes as <0xNN> tokens.
  const Ids euro = encode(tok, "\xE2\x82\xAC");
  EXPECT_EQ(euro, (Ids{tok.vocab().find(kUnitSp), 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tok.decode(euro), "\xE2\x82\xAC");
  const Ids with_bos = *tok.encode("ab");
  EXPECT_EQ(tok.decode(with_bos), "ab");
  DecodeOptions r;
  r.render_special = true;
  EXPECT_EQ(tok.decode(with_bos, r), "<s> ab");
  r.remove_special = true;
  EXPECT_EQ(tok.decode(with_bos, r), "ab");
}

// BERT-style: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103; word starts marked "▁".
Tokenizer wpm_tokenizer(std::optional<bool> lowercase = std::nullopt) {
  VocabSpec s;
  s.model = "bert";
  for (int i = 0; i < 104; ++i) {
    s.tokens.push_back(i == 0     ? "[PAD]"
                       : i == 100 ? "[UNK]"
                       : i == 101 ? "[CLS]"
                       : i == 102 ? "[SEP]"
                       : i == 103 ? "[MASK]"
                                  : cat("[unused", std::to_string(i), "]"));
    s.token_types.push_back(i == 0 || i >= 100 ? kControl : kNormal);
  }
  for (const char* t : {"hello", "world", ",", "!", "cafe", "un", "\xE4\xBD\xA0", "\xE5\xA5\xBD"}) {
    s.tokens.push_back(cat(kUnitSp, t));
    s.token_types.push_back(kNormal);
  }
  for (const char* t : {"aff", "able"}) {
    s.tokens.push_back(t);
    s.token_types.push_back(kNormal);
  }
  s.normalizer_lowercase = lowercase;
  return take(Tokenizer::create(take(Vocab::from_spec(std::move(s)))));
}

TEST(TokenizerWpm, NormalizeSplitAndMatch) {
  Tokenizer tok = wpm_tokenizer();
  const Vocab& v = tok.vocab();
  auto id = [&](const char* t) { return v.find(t); };
  const TokenId hello = id("\xE2\x96\x81hello"), world = id("\xE2\x96\x81world");
  const TokenId comma = id("\xE2\x96\x81,"), bang = id("\xE2\x96\x81!");
  EXPECT_EQ(encode(tok, "Hello, WORLD!"), (Ids{hello, comma, world, bang}));
  EXPECT_EQ(encode(tok, "Caf\xC3\xA9"), (Ids{id("\xE2\x96\x81"
                                                "cafe")}));  // accent stripped
  EXPECT_EQ(encode(tok, "unaffable"), (Ids{id("\xE2\x96\x81un"), id("aff"), id("able")}));
  EXPECT_EQ(encode(tok, "hel\x01lo \xE2\x80\x8Bworld"), (Ids{hello, world}));  // Cc, Cf dropped
  EXPECT_EQ(encode(tok, "xyz hello"), (Ids{100, hello}));                      // unknown word
  EXPECT_EQ(encode(tok, "hellox"), (Ids{100}));                                // no partial match
  EXPECT_EQ(encode(tok, "\xE4\xBD\xA0\xE5\xA5\xBD"),                           // CJK: one word each
            (Ids{id("\xE2\x96\x81\xE4\xBD\xA0"), id("\xE2\x96\x81\xE5\xA5\xBD")}));
  EXPECT_EQ(*tok.encode("hello"), (Ids{101, hello, 102}));  // [CLS] ... [SEP]
  EXPECT_TRUE(encode(tok, " \t\n ").empty());

  Tokenizer cased = wpm_tokenizer(false);
  EXPECT_EQ(encode(cased, "Hello hello"), (Ids{100, hello}));
}

TEST(TokenizerPre, Llama3Splits) {
  PreTokenizer pre = take(PreTokenizer::create(PreType::kLlama3));
  std::vector<std::string_view> pieces;
  ASSERT_TRUE(pre.split("I'm 12345 ok\n\n  x", pieces).ok());
  EXPECT_EQ(pieces,
            (std::vector<std::string_view>{"I", "'m", " ", "123", "45", " ok", "\n\n", " ", " x"}));
}

TEST(TokenizerPre, Gpt2Splits) {
  PreTokenizer pre = take(PreTokenizer::create(PreType::kGpt2));
  std::vector<std::string_view> pieces;
  ASSERT_TRUE(pre.split("Hello  world's 42!?", pieces).ok());
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"Hello", " ", " world", "'s", " 42", "!?"}));
}

// Qwen3.5 keeps combining marks in words: "e" + U+0301 is one word, where Qwen2's regex splits the
// mark off into a punctuation piece.
TEST(TokenizerPre, Qwen35KeepsCombiningMarks) {
  const std::string text = "cafe\xCC\x81 ok 12";
  std::vector<std::string_view> pieces;
  PreTokenizer qwen35 = take(PreTokenizer::create(take(pre_tokenizer_config("qwen35")).type));
  ASSERT_TRUE(qwen35.split(text, pieces).ok());
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"cafe\xCC\x81", " ok", " ", "1", "2"}));
  PreTokenizer qwen2 = take(PreTokenizer::create(PreType::kQwen2));
  ASSERT_TRUE(qwen2.split(text, pieces).ok());
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"cafe", "\xCC\x81", " ok", " ", "1", "2"}));
  EXPECT_FALSE(take(pre_tokenizer_config("qwen35")).clean_spaces);
}

TEST(TokenizerPre, TinyAyaGroupsDigitsFromTheRight) {
  PreTokenizer pre = take(PreTokenizer::create(PreType::kTinyAya));
  std::vector<std::string_view> pieces;
  ASSERT_TRUE(pre.split("1234567", pieces).ok());
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"1", "234", "567"}));
}

TEST(TokenizerPre, EveryKnownNameCompiles) {
  for (const char* name :
       {"default", "llama3", "llama-v3", "llama-bpe", "gpt-2", "deepseek-llm", "deepseek-coder",
        "deepseek-v3", "falcon", "starcoder", "refact", "mpt", "qwen2", "command-r", "olmo", "dbrx",
        "smollm", "tekken", "gpt-4o", "chatglm-bpe", "poro-chat", "viking", "seed-coder",
        "bailingmoe", "stablelm2",
        // 2026 names (llama.cpp de3ff81)
        "qwen35", "jina-v5-nano", "modern-bert", "kormo", "f2llmv2", "hunyuan", "solar-open",
        "grok-2", "jais-2", "hunyuan-dense", "joyai-llm", "hy_v4", "spark2_5", "youtu", "mellum2",
        "exaone-moe", "kanana2", "talkie", "minimax-m2", "tiny_aya", "cohere2moe", "ufakzeka",
        "laguna", "minicpm5"}) {
    Result<PreConfig> c = pre_tokenizer_config(name);
    ASSERT_TRUE(c.ok()) << name;
    Result<PreTokenizer> p = PreTokenizer::create(c->type);
    ASSERT_TRUE(p.ok()) << name << ": " << p.message();
    std::vector<std::string_view> pieces;
    EXPECT_TRUE(p->split("Hello, World! 1234 \xE4\xBD\xA0\xE5\xA5\xBD \xFF", pieces).ok()) << name;
    std::string joined;
    for (std::string_view piece : pieces) joined.append(piece);
    EXPECT_EQ(joined, "Hello, World! 1234 \xE4\xBD\xA0\xE5\xA5\xBD \xFF") << name;
  }
  EXPECT_FALSE(pre_tokenizer_config("gemma4").ok());
}

TEST(TokenizerDecode, CleanUpSpaces) {
  EXPECT_EQ(clean_up_spaces("Hello , world ! I 'm here ' ok"), "Hello, world! I'm here'ok");
  EXPECT_EQ(clean_up_spaces("it 's , they 're"), "it's, they're");
  EXPECT_EQ(clean_up_spaces("do n't 'll"), "do n't 'll");
  EXPECT_EQ(clean_up_spaces(""), "");
}

TEST(TokenizerDecode, InvalidIdsDecodeToNothing) {
  BpeBuilder b;
  b.merge("a", "b");
  Tokenizer tok = b.build();
  EXPECT_EQ(tok.decode(Ids{-5, b.id("ab"), 1 << 30}), "ab");
  EXPECT_TRUE(tok.piece(-1, true).empty());
}

}  // namespace
}  // namespace sluice
