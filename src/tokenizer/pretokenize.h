// Byte-level BPE pre-tokenization: `tokenizer.ggml.pre` selects a list of regexes (as
// llama.cpp's llm_tokenizer_bpe constructor does); each regex in turn splits every piece
// produced so far into its matches *and* the unmatched gaps between them (Hugging Face
// Split(behavior="isolated"), llama.cpp unicode_regex_split). A piece is then merged by BPE
// on its own.
//
// Regexes are the original Hugging Face patterns compiled by PCRE2 with UTF | UCP |
// MATCH_INVALID_UTF (JIT-compiled where available): \p{L}, \s, (?i:...) and lookahead mean
// what they mean in tokenizer.json. Invalid UTF-8 never matches, so stray bytes end up in
// gap pieces and byte-level BPE still encodes them losslessly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sluice {

// Regex families; several `pre` names share one (see pre_tokenizer_config).
enum class PreType {
  kDefault,
  kLlama3,
  kDbrx,
  kDeepseekLlm,
  kDeepseekCoder,
  kDeepseek3,
  kFalcon,
  kStarcoder,  // also refact, command-r, smollm, codeshell, exaone, minerva
  kGpt2,       // also mpt, olmo, jais, phi-2, ...
  kQwen2,      // also stablelm2
  kPoro,       // also bloom, gpt3-finnish
  kChatGlm4,
  kViking,
  kTekken,
  kGpt4o,
  kSeedCoder,
  kBailingMoe,
  kQwen35,     // Qwen3.5: Qwen2's with combining marks (\p{M}) kept in words
  kJais2,      // Llama 3's with whitespace runs split at 512, 256, ..., 4, 2, 1
  kExaoneMoe,  // words may span single spaces between letters
  kUfakzeka,   // Qwen2's without the English contractions
  kLaguna,     // lines first, then Qwen2's
  kMiniCpm5,   // digit triples, then Qwen2's with digit runs
  kSpark25,    // deepseek-v3's, newlines one at a time, then single digits
  kYoutu,      // CJK/Hangul/punctuation runs, then GPT-4o's with single digits
  kTinyAya,    // digit groups of three from the right, then GPT-4o's
};

// What a `tokenizer.ggml.pre` value implies, beyond its regexes (llama.cpp's load()).
struct PreConfig {
  PreType type = PreType::kDefault;
  bool ignore_merges = false;  // a word that is a whole token skips merging
  bool clean_spaces = true;    // detokenizer clean-up default
  bool add_bos = false;        // BOS default before add_bos_token is read
  bool no_bos = false;         // the BOS id default is cleared (chatglm)
};

// Config for a pre name; "" means absent (llama.cpp warns and uses "default"). Unknown names
// are an error: a silent fallback would tokenize the model's prompts wrongly.
Result<PreConfig> pre_tokenizer_config(std::string_view pre);

// One compiled PCRE2 pattern. Immutable and thread-safe after compile(); move-only.
class Regex {
 public:
  static Result<Regex> compile(std::string_view pattern);
  Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  const std::string& pattern() const { return pattern_; }

  // Match state for one thread (match data; a JIT stack grown on demand). Create one per
  // call or per thread; cheap (one allocation). Not thread-safe itself.
  class Scanner {
   public:
    explicit Scanner(const Regex& re);
    ~Scanner();
    Scanner(const Scanner&) = delete;
    Scanner& operator=(const Scanner&) = delete;

    // Appends to `out` the pieces of `text`: matches and the gaps between them, in order,
    // never empty. `n_matches` (optional) counts match calls (a work counter).
    Status split(std::string_view text, std::vector<std::string_view>& out,
                 uint64_t* n_matches = nullptr);
    // First match at or after `start`: [begin, end) and the number of the first capture
    // group that took part (0 if none). False when there is no match.
    Result<bool> find(std::string_view text, size_t start, size_t& begin, size_t& end,
                      int* group = nullptr);

   private:
    struct State;
    std::unique_ptr<State> state_;
  };

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

// The regex list of one PreType, applied in sequence. Move-only.
class PreTokenizer {
 public:
  static Result<PreTokenizer> create(PreType type);

  // Splits `text` into pieces (views into `text`). Errors only if PCRE2 fails to match
  // (resource limits), which the JIT with a grown stack does not hit in practice.
  Status split(std::string_view text, std::vector<std::string_view>& pieces,
               uint64_t* n_matches = nullptr) const;

  size_t n_regexes() const { return regexes_.size(); }

 private:
  std::vector<Regex> regexes_;
};

// The Hugging Face patterns of a PreType (exposed for tests).
std::vector<std::string> pre_tokenizer_patterns(PreType type);

}  // namespace sluice
