// libFuzzer target for encode/decode on arbitrary bytes (invalid UTF-8 included).
//   byte 0: which tokenizer and options; the rest: the text (or, for one mode, token ids).
// Checks: encode succeeds and yields valid ids; decode(encode(s)) == s where the tokenizer is
// lossless (byte-level BPE always; SPM without parse_special); the streaming decoder's output
// is valid UTF-8 and equals the sanitized whole decoding; arbitrary ids never crash decode.
// Vocabularies: two small built-in ones, plus real ones from $SLUICE_SHARED or ../shared.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/unicode.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace sluice;

struct Entry {
  std::unique_ptr<Tokenizer> tok;
  bool byte_level = false;  // lossless on any bytes
  bool spm = false;         // lossless without parse_special, except for "▁" in the text
};

std::vector<Entry>& tokenizers() {
  static std::vector<Entry> all;
  return all;
}

void add(Result<Tokenizer> t) {
  if (!t.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", t.message().c_str());
    std::abort();
  }
  Entry e;
  e.tok = std::make_unique<Tokenizer>(std::move(t).value());
  e.byte_level = e.tok->vocab().type() == VocabType::kBpe;
  e.spm = e.tok->vocab().type() == VocabType::kSpm;
  tokenizers().push_back(std::move(e));
}

Result<Tokenizer> builtin_bpe() {
  VocabSpec s;
  s.model = "gpt2";
  s.pre = "llama-bpe";
  for (int b = 0; b < 256; ++b) s.tokens.emplace_back(unicode::byte_to_gpt2_utf8(uint8_t(b)));
  const char* merges[] = {"a a", "aa aa", "\xC4\xA0 a", "b c", "a b", "ab c"};
  for (const char* m : merges) {
    s.merges.push_back(m);
    std::string joined(m);
    joined.erase(joined.find(' '), 1);
    bool have = false;
    for (const std::string& t : s.tokens) have = have || t == joined;
    if (!have) s.tokens.push_back(joined);
  }
  s.tokens.push_back("<|eot_id|>");
  s.tokens.push_back("usr");
  s.token_types.assign(s.tokens.size(), int32_t(GgufTokenType::kNormal));
  s.token_types[s.tokens.size() - 2] = int32_t(GgufTokenType::kControl);
  s.token_types[s.tokens.size() - 1] = int32_t(GgufTokenType::kUserDefined);
  SLUICE_ASSIGN_OR_RETURN(Vocab v, Vocab::from_spec(std::move(s)));
  return Tokenizer::create(std::move(v));
}

Result<Tokenizer> builtin_spm() {
  VocabSpec s;
  s.model = "llama";
  auto add_tok = [&](std::string t, int32_t type, float score) {
    s.tokens.push_back(std::move(t));
    s.token_types.push_back(type);
    s.scores.push_back(score);
  };
  add_tok("<unk>", int32_t(GgufTokenType::kUnknown), 0);
  add_tok("<s>", int32_t(GgufTokenType::kControl), 0);
  add_tok("</s>", int32_t(GgufTokenType::kControl), 0);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    std::string t = "<0x";
    t.push_back(kHex[b >> 4]);
    t.push_back(kHex[b & 15]);
    t.push_back('>');
    add_tok(t, int32_t(GgufTokenType::kByte), 0);
  }
  const std::string sp = "\xE2\x96\x81";
  add_tok(sp, int32_t(GgufTokenType::kNormal), -1);
  add_tok("a", int32_t(GgufTokenType::kNormal), -2);
  add_tok(sp + "a", int32_t(GgufTokenType::kNormal), -1.5f);
  add_tok(sp + sp, int32_t(GgufTokenType::kNormal), -3);
  add_tok("aa", int32_t(GgufTokenType::kNormal), -1.7f);
  SLUICE_ASSIGN_OR_RETURN(Vocab v, Vocab::from_spec(std::move(s)));
  return Tokenizer::create(std::move(v));
}

std::string shared_dir() {
  if (const char* env = std::getenv("SLUICE_SHARED"); env && *env) return env;
  for (const char* d : {"../shared", "../../shared", "../../../shared"}) {
    if (std::filesystem::is_directory(std::string(d) + "/testdata/tokenizer")) return d;
  }
  return {};
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: check failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  add(builtin_bpe());
  add(builtin_spm());
  const std::string dir = shared_dir();
  if (!dir.empty()) {
    for (const char* name : {"llama-bpe", "llama-spm", "bert-bge", "mpt", "deepseek-llm"}) {
      add(Tokenizer::load(dir + "/testdata/tokenizer/ggml-vocab-" + name + ".gguf"));
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Entry& e = tokenizers()[(mode & 0x0F) % tokenizers().size()];
  const Tokenizer& tok = *e.tok;

  if (mode & 0x80) {  // the bytes are token ids: decoding must cope with anything
    std::vector<TokenId> ids;
    for (size_t i = 0; i + 4 <= text.size(); i += 4) {
      uint32_t v = 0;
      for (int k = 0; k < 4; ++k) v |= uint32_t(uint8_t(text[i + size_t(k)])) << (8 * k);
      ids.push_back(TokenId(v % uint32_t(tok.vocab().n_tokens() + 16)) - 8);
    }
    DecodeOptions d;
    d.render_special = mode & 0x10;
    const std::string whole = tok.decode(ids, d);
    StreamingDecoder s(tok, d);
    std::string streamed;
    for (TokenId id : ids) streamed += s.push(id);
    streamed += s.flush();
    check(unicode::is_valid_utf8(streamed), "stream output is valid UTF-8");
    d.clean_spaces = false;
    check(streamed == unicode::sanitize_utf8(tok.decode(ids, d)), "stream == whole decode");
    return 0;
  }

  EncodeOptions o;
  o.parse_special = mode & 0x10;
  o.add_special = mode & 0x20;
  Result<std::vector<TokenId>> ids = tok.encode(text, o);
  check(ids.ok(), "encode succeeds");
  for (TokenId id : *ids) check(tok.vocab().is_valid(id), "ids are in range");

  DecodeOptions d;
  d.clean_spaces = false;
  d.render_special = true;
  const std::string back = tok.decode(*ids, d);
  // Byte-level BPE is lossless for bytes the vocabulary has as normal tokens. GPT-NeoX lacks
  // C0, C1, F5..FF (never in valid UTF-8; llama.cpp drops them, and so do we); DeepSeek has
  // them as user-defined tokens, which render as their text (as llama.cpp).
  bool bytes_covered = true;
  for (char c : text) {
    const TokenId id = tok.vocab().byte_to_token(uint8_t(c));
    bytes_covered = bytes_covered && id != kNoToken && tok.vocab().has_attr(id, kAttrNormal);
  }
  if (e.byte_level && !o.add_special && bytes_covered) {
    check(back == text, "byte-level BPE round trip");
  }
  if (e.spm && !o.parse_special && !o.add_special &&
      text.find("\xE2\x96\x81") == std::string::npos) {
    check(back == text, "SPM round trip");
  }
  StreamingDecoder s(tok, d);
  std::string streamed;
  for (TokenId id : *ids) streamed += s.push(id);
  streamed += s.flush();
  check(unicode::is_valid_utf8(streamed), "stream output is valid UTF-8");
  return 0;
}
