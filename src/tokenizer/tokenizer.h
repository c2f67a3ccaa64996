// Text <-> token ids, matching llama.cpp's llama_tokenize / llama_detokenize.
//
// encode():
//   1. special-token partitioning: control tokens (with parse_special) and user-defined
//      tokens (always) that occur in the text become fragments of their own, longest token
//      first, honouring lstrip/rstrip attributes (llama.cpp tokenizer_st_partition);
//   2. each remaining text fragment goes to the vocabulary's encoder: SPM (after the
//      "▁" normalization), byte-level BPE (after regex pre-tokenization) or WPM;
//   3. BOS/EOS (SEP for WPM) are added per the vocabulary unless the caller says otherwise.
// decode() and StreamingDecoder (detokenize.h) go the other way.
//
// A Tokenizer is immutable after construction: encode/decode are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace sluice {

class GgufFile;

struct EncodeOptions {
  bool add_special = true;      // add BOS/EOS as the vocabulary asks (see the overrides)
  bool parse_special = false;   // control-token text ("<|eot_id|>") becomes that token
  std::optional<bool> add_bos;  // override the vocabulary's add_bos (when add_special)
  std::optional<bool> add_eos;  // override add_eos (WPM: add_sep) (when add_special)
};

struct DecodeOptions {
  bool render_special = false;  // control/unknown tokens as their text (llama.cpp "special")
  bool remove_special = false;  // drop a leading BOS / trailing EOS the vocabulary adds
  // llama.cpp's clean_up_tokenization_spaces (" ," -> ","); nullopt: as llama.cpp does for
  // this vocabulary. It makes decode lossy; the streaming decoder never applies it.
  std::optional<bool> clean_spaces;
};

class Tokenizer {
 public:
  static Result<Tokenizer> create(Vocab vocab);
  static Result<Tokenizer> from_gguf(const GgufFile& file);
  // Opens a GGUF file and reads its tokenizer.
  static Result<Tokenizer> load(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  const Vocab& vocab() const { return *vocab_; }

  Result<std::vector<TokenId>> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  // Appends to `out`; `stats` (optional) accumulates work counters.
  Status encode_into(std::string_view text, const EncodeOptions& opts, std::vector<TokenId>& out,
                     EncodeStats* stats = nullptr) const;

  // Concatenated pieces. Ids outside [0, n_tokens) decode to nothing (a model's padded
  // output rows can produce them). Returns raw bytes: byte-fallback / byte-level tokens can
  // form invalid UTF-8, which is passed through (use StreamingDecoder for display text).
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& opts = {}) const;

  // The bytes one token stands for, as llama.cpp's token_to_piece: "▁" -> ' ' (SPM/WPM),
  // GPT-2 alphabet -> bytes (BPE), "<0xNN>" -> the byte; control and unknown tokens are ""
  // unless `render_special`; user-defined tokens are their text. Empty for invalid ids.
  std::string_view piece(TokenId id, bool render_special) const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Vocab> vocab_;  // heap: models keep no pointers, but moves stay cheap
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
