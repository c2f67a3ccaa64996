// A tokenizer vocabulary as GGUF stores it (`tokenizer.ggml.*`), with the defaults llama.cpp
// applies when keys are absent (llama_vocab::impl::load): special token ids per model type,
// add_bos/add_eos, the per-`pre` flags, EOG detection by token text, token attributes.
//
// The vocabulary is data only; the encoders that use it live in spm/bpe/wpm.h and the
// Tokenizer (tokenizer.h) ties them together.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/pretokenize.h"

namespace sluice {

class GgufFile;

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// A fast hash for short byte strings (token texts, words): 8 bytes at a time, then a
// 64-bit finalizer. Not for adversaries who pick collisions (tables stay correct, just slower).
inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(s.size()) * 0xC2B2AE3D27D4EB4Full);
  const char* p = s.data();
  size_t n = s.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ (w * 0x87C37B91114253D5ull)) * 0x4CF5AD432745937Full;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  if (n > 0) std::memcpy(&w, p, n);
  h = (h ^ (w * 0x87C37B91114253D5ull)) * 0x4CF5AD432745937Full;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h;
}

// tokenizer.ggml.model: "llama" -> kSpm, "gpt2" -> kBpe, "bert" -> kWpm.
enum class VocabType { kSpm, kBpe, kWpm };
std::string_view vocab_type_name(VocabType t);

// Token attributes, bit flags (llama.cpp's llama_token_attr values).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,      // rendered only on request; matched in text only with parse_special
  kAttrUserDefined = 1u << 4,  // always matched in text before pre-tokenization, rendered as is
  kAttrByte = 1u << 5,         // SPM byte fallback "<0xNN>"
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,  // swallows whitespace to its left when matched in text
  kAttrRstrip = 1u << 8,  // swallows whitespace to its right
  kAttrSingleWord = 1u << 9,
};

// Values of `tokenizer.ggml.token_type` (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenData {
  std::string text;  // as stored: "▁the" (SPM/WPM), "Ġthe" (byte-level BPE), "<0x0A>"
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// The raw metadata a vocabulary is built from. Vocab::from_gguf fills it from a file; tests
// build small ones by hand. std::nullopt means "key absent": model defaults apply.
struct VocabSpec {
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre ("" when absent)
  std::string name;   // general.name (llama.cpp keys a few attribute fixes on it)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // empty: all 0
  std::vector<int32_t> token_types;  // GgufTokenType values; empty: all normal
  std::vector<std::string> merges;   // "left right", rank = index (BPE only)
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unk_id, sep_id, pad_id, mask_id;
  std::optional<bool> add_bos, add_eos, add_sep, add_space_prefix, remove_extra_whitespaces;
  // tokenizer.ggml.normalizer.{lowercase,strip_accents} (WPM; strip_accents defaults to
  // lowercase, lowercase to true).
  std::optional<bool> normalizer_lowercase, normalizer_strip_accents;
};

// Special token ids; kNoToken where the vocabulary has none.
struct SpecialTokens {
  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  TokenId eot = kNoToken;
  TokenId eom = kNoToken;
  TokenId unk = kNoToken;
  TokenId sep = kNoToken;
  TokenId pad = kNoToken;
  TokenId mask = kNoToken;
};

// Immutable after construction; move-only (128k-token vocabularies are megabytes).
class Vocab {
 public:
  // Reads tokenizer.ggml.* (and general.name) from a GGUF file.
  static Result<Vocab> from_gguf(const GgufFile& file);
  static Result<Vocab> from_spec(VocabSpec spec);

  Vocab(Vocab&&) noexcept = default;
  Vocab& operator=(Vocab&&) noexcept = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabType type() const { return type_; }
  const std::string& model() const { return model_; }
  const std::string& pre() const { return pre_; }
  // Pre-tokenizer regex family (BPE only; kDefault for SPM/WPM).
  PreType pre_type() const { return pre_type_; }

  int32_t n_tokens() const { return int32_t(tokens_.size()); }
  bool is_valid(TokenId id) const { return id >= 0 && id < n_tokens(); }
  const TokenData& token(TokenId id) const { return tokens_[size_t(id)]; }
  const std::string& text(TokenId id) const { return tokens_[size_t(id)].text; }
  uint32_t attr(TokenId id) const { return tokens_[size_t(id)].attr; }
  bool has_attr(TokenId id, uint32_t mask) const { return (attr(id) & mask) != 0; }
  // The id whose text is exactly `text`, or kNoToken. Any attribute.
  TokenId find(std::string_view text) const;
  // SPM: "<0xNN>" (or the one-byte token); BPE/WPM: the GPT-2 alphabet char. kNoToken if none.
  TokenId byte_to_token(uint8_t byte) const;
  // The byte of a kAttrByte token ("<0x0A>" -> 0x0A), or -1.
  int token_to_byte(TokenId id) const;

  const SpecialTokens& special() const { return special_; }
  TokenId bos() const { return special_.bos; }
  TokenId eos() const { return special_.eos; }
  TokenId eot() const { return special_.eot; }
  TokenId eom() const { return special_.eom; }
  TokenId unk() const { return special_.unk; }
  TokenId sep() const { return special_.sep; }
  TokenId pad() const { return special_.pad; }
  TokenId mask() const { return special_.mask; }

  // End-of-generation set: eos, eot, eom and tokens recognized by text (<|im_end|>, ...).
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }
  bool is_eog(TokenId id) const;

  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_sep() const { return add_sep_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // Read and exposed; llama.cpp applies it only to UGM (T5) vocabularies, which sluice does
  // not support, so no encoder here uses it.
  bool remove_extra_whitespaces() const { return remove_extra_whitespaces_; }
  // BPE: a pre-tokenized word that is itself a token is not merged (llama3, tekken).
  bool ignore_merges() const { return ignore_merges_; }
  // Whether llama.cpp's detokenizer applies clean_up_tokenization_spaces for this vocab.
  bool clean_spaces() const { return clean_spaces_; }
  // WPM normalizer: lowercase and strip accents (BERT uncased).
  bool wpm_lowercase() const { return wpm_lowercase_; }
  bool wpm_strip_accents() const { return wpm_strip_accents_; }

  // Control, user-defined and unknown tokens: the ones matched in raw text before
  // pre-tokenization. Sorted by text length, longest first (ties by id).
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }
  const std::vector<std::string>& merges() const { return merges_; }
  size_t max_token_len() const { return max_token_len_; }

 private:
  Vocab() = default;
  Status init(VocabSpec spec);
  Status init_types(const VocabSpec& spec);
  void detect_eog();
  void apply_name_fixes(const std::string& name);

  VocabType type_ = VocabType::kSpm;
  std::string model_;
  std::string pre_;
  PreType pre_type_ = PreType::kDefault;
  std::vector<TokenData> tokens_;
  // text -> id: open addressing over tokens_ (load <= 1/2); a slot holds the high half of
  // the text's hash and the id (kNoToken: empty). Probing compares hashes before texts.
  struct Slot {
    uint32_t hash = 0;
    TokenId id = kNoToken;
  };
  std::vector<Slot> index_;
  uint64_t index_mask_ = 0;
  std::vector<std::string> merges_;
  SpecialTokens special_;
  std::vector<TokenId> eog_ids_;  // sorted
  std::vector<TokenId> special_tokens_;
  size_t max_token_len_ = 0;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_sep_ = false;
  bool add_space_prefix_ = false;
  bool remove_extra_whitespaces_ = false;
  bool ignore_merges_ = false;
  bool clean_spaces_ = false;
  bool wpm_lowercase_ = true;
  bool wpm_strip_accents_ = true;
};

}  // namespace sluice
