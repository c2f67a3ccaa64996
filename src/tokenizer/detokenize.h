// Token ids -> text: whole-sequence decoding and a streaming decoder for generation.
//
// The SPM leading space (the "▁" encode puts before the text) is removed once: from the first
// non-empty piece, when nothing was output before it. Hidden control tokens (a BOS) output
// nothing, so "<s>▁Hello" decodes to "Hello"; rendered, it stays "<s> Hello" (as HF).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace sluice {

// The piece of every token with special tokens rendered (llama.cpp token_to_piece with
// special = true), built once per Tokenizer.
std::vector<std::string> build_pieces(const Vocab& vocab);

// llama.cpp's clean_up_tokenization_spaces: " ?", " !", " .", " ," lose the space; " ' "
// between spaces loses both; " 's", " 'm", " 're", " 've" lose the space.
std::string clean_up_spaces(std::string_view text);

// Tokenizer::decode.
std::string decode_tokens(const Tokenizer& tok, std::span<const TokenId> ids,
                          const DecodeOptions& opts);

// Feeds ids one at a time; returns only complete UTF-8 characters. Bytes of a character
// split across tokens (byte fallback "<0xE2>" "<0x82>" "<0xAC>", or byte-level BPE pieces)
// are held until the character is complete. Invalid sequences come out as U+FFFD, so the
// concatenated output is always valid UTF-8. No clean-up of spaces. Keeps a reference to the
// Tokenizer, which must outlive it.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tok, DecodeOptions opts = {});

  // Text that became complete with `id` (often empty or one piece).
  std::string push(TokenId id);
  // End of stream: whatever is held (an incomplete character) as U+FFFD.
  std::string flush();
  // Forget all state (start of a new sequence).
  void reset();
  // The ids that follow continue text already shown (a prompt): keep the leading space.
  void continue_sequence() { strip_space_ = false; }
  // Bytes held back waiting for the rest of a character (0..3).
  size_t n_pending() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  DecodeOptions opts_;
  std::string pending_;
  bool strip_space_;  // the leading SPM space is still to be removed
};

}  // namespace sluice
