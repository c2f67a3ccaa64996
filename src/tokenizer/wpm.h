// WordPiece (BERT) as llama.cpp runs it (llm_tokenizer_wpm_session):
//   1. normalize: NFD with nonspacing marks removed (strip accents), drop NUL, U+FFFD and
//      control characters, lowercase;
//   2. split into words at whitespace; every punctuation character, ASCII symbol and CJK
//      ideograph is a word of its own;
//   3. each word, prefixed with "▁" (how llama.cpp's converter marks word starts; "##"
//      continuations are stored bare), is covered greedily by the longest matching tokens
//      from the left; if some position matches nothing the whole word is [UNK].
// Character classes come from one PCRE2 regex (UTF + UCP), not from hand-written tables.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace sluice {

class WpmModel {
 public:
  static Result<WpmModel> build(const Vocab& vocab);

  // Step 1 and 2: the words of `text`.
  Status split_words(const Vocab& vocab, std::string_view text, std::vector<std::string>& words,
                     EncodeStats* stats) const;
  // Step 3 for one word (without the "▁"), appending ids.
  static void encode_word(const Vocab& vocab, std::string_view word, std::string& buf,
                          std::vector<TokenId>& out, EncodeStats* stats);

  Status encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out,
                EncodeStats* stats) const;

 private:
  // Groups: 1 whitespace run, 2 removed characters, 3 nonspacing marks, 4 one split character.
  Regex classes_;
};

}  // namespace sluice
