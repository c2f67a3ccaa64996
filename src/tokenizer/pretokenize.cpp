#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

namespace sluice {

namespace {

// ---- patterns (Hugging Face tokenizer.json originals; llama.cpp llama-vocab.cpp lists) ----

// GPT-2 / ByteLevel(use_regex=true).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSeedCoder =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kBailingMoe =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: Qwen2's, but a word also takes combining marks (\p{M}) and punctuation runs stop at
// them.
constexpr const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kJais2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";
constexpr const char* kExaoneMoe =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kUfakzeka =
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kMiniCpm5 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpark25Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";
// Youtu: Hangul, CJK punctuation, Bopomofo, then ideographs and kana, each as runs.
constexpr const char* kYoutuCjk =
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019})"
    R"(\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|)"
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kYoutuMain =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Tiny Aya: digit groups aligned to the right ("1234567" -> 1 234 567).
constexpr const char* kDigitGroups = R"(\d{1,3}(?=(?:\d{3})*\b))";
// Punctuation split, then GPT-2, then digit runs, then runs of three digits.
constexpr const char* kPunctRun = R"([\p{P}\$\+<=>\^~\|]+)";
constexpr const char* kFalconPunctRun = R"([\p{P}\$\+<=>\^~\|`]+)";
constexpr const char* kThreeDigits = R"([0-9][0-9][0-9])";
// Poro/BLOOM: " ?[^(\s|.,!?…。，、।۔،)]+" (the parentheses and '|' are literal class members).
constexpr const char* kPoro =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";
// CJK ideographs (U+4E00..U+9FA5), U+0800..U+4E00 and Hangul (U+AC00..U+D7FF).
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// deepseek-llm's cased-letter class, written with escapes: the tokenizer.json literal holds
// characters (U+1FBE, U+2126, U+212A, ...) that editors silently NFC-normalize.
constexpr const char* kDeepseekLlmLetters =
    R"(\s?[\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})"
    R"(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}-\x{377}\x{37B}-\x{37D}\x{37F}\x{386})"
    R"(\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F})"
    R"(\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA})"
    R"(\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15})"
    R"(\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}-\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}-\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
// "\s?[!-/:-~！-／：-～‘-‟　-。]+"
constexpr const char* kDeepseekLlmPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
// deepseek-v3: ideographs and kana; then the word/punctuation pattern.
constexpr const char* kDeepseek3Cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kDeepseek3Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreName {
  const char* name;
  PreConfig config;
};

// tokenizer.ggml.pre -> config, as llama.cpp's llama_vocab::impl::load().
// Fields: type, ignore_merges, clean_spaces, add_bos, no_bos.
const PreName kPreNames[] = {
    {"default", {PreType::kDefault, false, true, false, false}},
    {"llama3", {PreType::kLlama3, true, true, true, false}},
    {"llama-v3", {PreType::kLlama3, true, true, true, false}},
    {"llama-bpe", {PreType::kLlama3, true, true, true, false}},
    {"falcon3", {PreType::kLlama3, true, true, true, false}},
    {"falcon-h1", {PreType::kLlama3, true, true, true, false}},
    {"pixtral", {PreType::kLlama3, true, true, true, false}},
    {"midm-2.0", {PreType::kLlama3, true, true, true, false}},
    {"lfm2", {PreType::kLlama3, true, true, true, false}},
    {"dbrx", {PreType::kDbrx, false, true, false, false}},
    {"smaug-bpe", {PreType::kDbrx, false, true, false, false}},
    {"deepseek-llm", {PreType::kDeepseekLlm, false, false, false, false}},
    {"deepseek-coder", {PreType::kDeepseekCoder, false, false, false, false}},
    {"deepseek-v3", {PreType::kDeepseek3, false, false, false, false}},
    {"falcon", {PreType::kFalcon, false, true, false, false}},
    {"mpt", {PreType::kGpt2, false, true, false, false}},
    {"starcoder", {PreType::kStarcoder, false, true, false, false}},
    {"gpt-2", {PreType::kGpt2, false, true, false, false}},
    {"phi-2", {PreType::kGpt2, false, true, false, false}},
    {"jina-es", {PreType::kGpt2, false, true, false, false}},
    {"jina-de", {PreType::kGpt2, false, true, false, false}},
    {"gigachat", {PreType::kGpt2, false, true, false, false}},
    {"jina-v2-es", {PreType::kGpt2, false, true, false, false}},
    {"jina-v2-de", {PreType::kGpt2, false, true, false, false}},
    {"a.x-4.0", {PreType::kGpt2, false, true, false, false}},
    {"mellum", {PreType::kGpt2, false, true, false, false}},
    {"jina-v1-en", {PreType::kGpt2, false, true, false, false}},
    {"jina-v2-code", {PreType::kGpt2, false, true, false, false}},
    {"roberta-bpe", {PreType::kGpt2, false, true, false, false}},
    {"refact", {PreType::kStarcoder, false, true, false, false}},
    {"command-r", {PreType::kStarcoder, false, false, false, false}},
    {"qwen2", {PreType::kQwen2, false, false, false, false}},
    {"deepseek-r1-qwen", {PreType::kQwen2, false, false, false, false}},
    {"megrez", {PreType::kQwen2, false, true, false, false}},
    {"stablelm2", {PreType::kQwen2, false, true, false, false}},
    {"olmo", {PreType::kGpt2, false, true, false, false}},
    {"poro-chat", {PreType::kPoro, false, false, false, false}},
    {"bloom", {PreType::kPoro, false, true, false, false}},
    {"gpt3-finnish", {PreType::kPoro, false, true, false, false}},
    {"chatglm-bpe", {PreType::kChatGlm4, false, true, false, true}},
    {"glm4", {PreType::kChatGlm4, false, true, false, true}},
    {"viking", {PreType::kViking, false, false, false, false}},
    {"jais", {PreType::kGpt2, false, true, false, false}},
    {"tekken", {PreType::kTekken, true, false, true, false}},
    {"smollm", {PreType::kStarcoder, false, false, false, false}},
    {"codeshell", {PreType::kStarcoder, false, true, false, false}},
    {"exaone", {PreType::kStarcoder, false, true, false, false}},
    {"exaone4", {PreType::kGpt2, false, true, false, false}},
    {"minerva-7b", {PreType::kStarcoder, false, true, false, false}},
    {"gpt-4o", {PreType::kGpt4o, false, false, false, false}},
    {"llama4", {PreType::kGpt4o, false, false, false, false}},
    {"trillion", {PreType::kGpt2, false, false, false, false}},
    {"granite-docling", {PreType::kGpt2, false, false, false, false}},
    {"seed-coder", {PreType::kSeedCoder, false, false, false, false}},
    {"bailingmoe", {PreType::kBailingMoe, false, false, false, false}},
    {"bailingmoe2", {PreType::kBailingMoe, false, false, false, false}},
    {"llada-moe", {PreType::kBailingMoe, false, false, false, false}},
    // Added from llama.cpp de3ff81 (2026).
    {"jina-v5-nano", {PreType::kLlama3, true, true, true, false}},
    {"modern-bert", {PreType::kGpt2, false, true, false, false}},
    {"kormo", {PreType::kQwen2, false, false, false, false}},
    {"f2llmv2", {PreType::kQwen2, false, false, false, false}},
    {"hunyuan", {PreType::kQwen2, false, false, false, false}},
    {"solar-open", {PreType::kQwen2, false, false, false, false}},
    {"grok-2", {PreType::kQwen2, false, false, false, false}},
    {"qwen35", {PreType::kQwen35, false, false, false, false}},
    {"jais-2", {PreType::kJais2, false, true, false, false}},
    {"hunyuan-dense", {PreType::kDeepseek3, false, false, false, false}},
    {"joyai-llm", {PreType::kDeepseek3, false, false, false, false}},
    {"hy_v4", {PreType::kDeepseek3, false, false, false, false}},
    {"spark2_5", {PreType::kSpark25, false, false, false, false}},
    {"youtu", {PreType::kYoutu, true, false, false, false}},
    {"mellum2", {PreType::kStarcoder, false, true, false, false}},
    {"exaone-moe", {PreType::kExaoneMoe, false, true, false, false}},
    {"kanana2", {PreType::kGpt4o, false, false, false, false}},
    {"talkie", {PreType::kGpt4o, false, false, false, false}},
    {"minimax-m2", {PreType::kGpt4o, false, false, false, false}},
    {"tiny_aya", {PreType::kTinyAya, false, false, false, false}},
    {"cohere2moe", {PreType::kTinyAya, false, false, false, false}},
    {"ufakzeka", {PreType::kUfakzeka, false, false, false, false}},
    {"laguna", {PreType::kLaguna, false, false, false, false}},
    {"minicpm5", {PreType::kMiniCpm5, true, true, false, false}},
};

std::string pcre2_error_text(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

bool jit_available() {
  static const bool available = [] {
    uint32_t jit = 0;
    return pcre2_config(PCRE2_CONFIG_JIT, &jit) >= 0 && jit == 1;
  }();
  return available;
}

}  // namespace

Result<PreConfig> pre_tokenizer_config(std::string_view pre) {
  if (pre.empty()) return PreConfig{};
  for (const PreName& p : kPreNames) {
    if (pre == p.name) return p.config;
  }
  return make_error("unknown pre-tokenizer type '", pre,
                    "' (tokenizer.ggml.pre); sluice does not know its regexes");
}

std::vector<std::string> pre_tokenizer_patterns(PreType type) {
  switch (type) {
    case PreType::kDefault:
      return {kPunctRun, kGpt2, R"(\p{N}+)", kThreeDigits};
    case PreType::kLlama3:
    case PreType::kDbrx:
    case PreType::kChatGlm4:
      return {kLlama3};
    case PreType::kDeepseekLlm:
      return {R"([\r\n])", kDeepseekLlmLetters, kDeepseekLlmPunct,
              R"(\s+$)",   kDeepseekCjk,        R"(\p{N}+)"};
    case PreType::kDeepseekCoder:
      return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"};
    case PreType::kDeepseek3:
      return {R"(\p{N}{1,3})", kDeepseek3Cjk, kDeepseek3Main};
    case PreType::kFalcon:
      return {kFalconPunctRun, kGpt2, kThreeDigits};
    case PreType::kStarcoder:
      return {R"(\p{N})", kGpt2};
    case PreType::kGpt2:
      return {kGpt2};
    case PreType::kQwen2:
      return {kQwen2};
    case PreType::kPoro:
      return {kPoro};
    case PreType::kViking:
      return {kPoro, R"(\p{N})"};
    case PreType::kTekken:
      return {kTekken};
    case PreType::kGpt4o:
      return {kGpt4o};
    case PreType::kSeedCoder:
      return {kSeedCoder};
    case PreType::kBailingMoe:
      return {kBailingMoe};
    case PreType::kQwen35:
      return {kQwen35};
    case PreType::kJais2:
      return {kJais2};
    case PreType::kExaoneMoe:
      return {kExaoneMoe};
    case PreType::kUfakzeka:
      return {kUfakzeka};
    case PreType::kLaguna:
      return {R"([^\n]+|[\n]+)", kQwen2};
    case PreType::kMiniCpm5:
      return {R"(\p{N}{1,3})", kMiniCpm5};
    case PreType::kSpark25:
      return {R"(\p{N}{1,3})", kDeepseek3Cjk, kSpark25Main, R"(\p{N})"};
    case PreType::kYoutu:
      return {kYoutuCjk, kYoutuMain};
    case PreType::kTinyAya:
      return {kDigitGroups, kGpt4o};
  }
  return {};
}

// ---- Regex ----

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Result<Regex> Regex::compile(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (!code) {
    return make_error("bad regex '", pattern, "' at offset ", err_off, ": ", pcre2_error_text(err));
  }
  Regex re;
  re.impl_ = std::make_unique<Impl>();
  re.impl_->code = code;
  re.impl_->jit = jit_available() && pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  re.pattern_ = std::string(pattern);
  return re;
}

// The default 32 KiB JIT (machine) stack suffices for these patterns except on pathological
// input; on PCRE2_ERROR_JIT_STACKLIMIT a 64 MiB (reserved, lazily committed) one is made.
struct Regex::Scanner::State {
  const pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;

  ~State() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(stack);
  }

  // >0 on a match (see ovector), PCRE2_ERROR_NOMATCH, or another negative error.
  int match(std::string_view subject, size_t start) {
    if (!md) return PCRE2_ERROR_NOMEMORY;
    auto subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
    for (;;) {
      int rc = jit ? pcre2_jit_match(code, subj, subject.size(), start, 0, md, mctx)
                   : pcre2_match(code, subj, subject.size(), start, 0, md, mctx);
      if (rc != PCRE2_ERROR_JIT_STACKLIMIT || stack) return rc;
      mctx = pcre2_match_context_create(nullptr);
      stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      if (!mctx || !stack) return PCRE2_ERROR_NOMEMORY;
      pcre2_jit_stack_assign(mctx, nullptr, stack);
    }
  }

  Error fail(size_t pos, int rc) const {
    return make_error("regex '", pattern, "' failed at byte ", pos, ": ", pcre2_error_text(rc));
  }
};

Regex::Scanner::Scanner(const Regex& re) : state_(std::make_unique<State>()) {
  state_->code = re.impl_->code;
  state_->jit = re.impl_->jit;
  state_->pattern = re.pattern_;
  state_->md = pcre2_match_data_create_from_pattern(re.impl_->code, nullptr);
}

Regex::Scanner::~Scanner() = default;

namespace {

// Byte length of the character at `pos`, for stepping past an empty match.
size_t step_len(std::string_view s, size_t pos) {
  const uint8_t b = uint8_t(s[pos]);
  size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  return std::min(n, s.size() - pos);
}

}  // namespace

Status Regex::Scanner::split(std::string_view text, std::vector<std::string_view>& out,
                             uint64_t* n_matches) {
  State& s = *state_;
  size_t last = 0;  // end of the previous emitted piece
  size_t pos = 0;   // where the next search starts
  while (pos < text.size()) {
    const int rc = s.match(text, pos);
    if (n_matches) ++*n_matches;
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return s.fail(pos, rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: emit nothing, step one character
      pos = b + step_len(text, b);
      continue;
    }
    if (b > last) out.push_back(text.substr(last, b - last));
    out.push_back(text.substr(b, e - b));
    last = pos = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
  return {};
}

Result<bool> Regex::Scanner::find(std::string_view text, size_t start, size_t& begin, size_t& end,
                                  int* group) {
  State& s = *state_;
  const int rc = s.match(text, start);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return s.fail(start, rc);
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
  begin = ov[0];
  end = ov[1];
  if (group) {
    *group = 0;
    for (int g = 1; g < rc; ++g) {
      if (ov[2 * g] != PCRE2_UNSET) {
        *group = g;
        break;
      }
    }
  }
  return true;
}

// ---- PreTokenizer ----

Result<PreTokenizer> PreTokenizer::create(PreType type) {
  PreTokenizer pt;
  for (const std::string& p : pre_tokenizer_patterns(type)) {
    SLUICE_ASSIGN_OR_RETURN(Regex re, Regex::compile(p));
    pt.regexes_.push_back(std::move(re));
  }
  if (pt.regexes_.empty()) return make_error("pre-tokenizer has no regexes");
  return pt;
}

Status PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                           uint64_t* n_matches) const {
  pieces.clear();
  if (text.empty()) return {};
  {
    Regex::Scanner scanner(regexes_[0]);
    SLUICE_RETURN_IF_ERROR(scanner.split(text, pieces, n_matches));
  }
  std::vector<std::string_view> next;
  for (size_t r = 1; r < regexes_.size(); ++r) {
    Regex::Scanner scanner(regexes_[r]);
    next.clear();
    next.reserve(pieces.size());
    // Each piece is its own subject: lookarounds and '$' see the piece's ends.
    for (std::string_view piece : pieces) {
      SLUICE_RETURN_IF_ERROR(scanner.split(piece, next, n_matches));
    }
    pieces.swap(next);
  }
  return {};
}

}  // namespace sluice
