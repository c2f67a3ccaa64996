// SentencePiece BPE as llama.cpp runs it (llm_tokenizer_spm_session): the text is split into
// UTF-8 characters, then the adjacent pair whose concatenation is the highest-scoring token is
// merged (ties: leftmost) until no pair forms a token. Symbols that are not tokens fall back
// to one "<0xNN>" byte token per byte.
//
// The caller has already applied the SPM normalization: optional leading space, ' ' -> "▁".
// Cost: O(n log n) for n characters (binary heap; stale entries skipped when popped).
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/vocab.h"

namespace sluice {

struct SpmScratch {
  struct Sym {
    int32_t prev, next;
    uint32_t begin, len;  // bytes of the text; len == 0 once merged away
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t len;  // bytes of the pair when queued; stale if the symbols changed since
  };
  std::vector<Sym> syms;
  std::vector<Bigram> heap;
};

// True when no token contains "▁" right after a character other than "▁" (sentencepiece
// splits by whitespace: "▁▁the" yes, "a▁b" no). Then no merge can cross such a boundary, and
// encoding the text segment by segment gives exactly the same ids as encoding it whole (for
// valid UTF-8), with heaps the size of a word instead of the text.
bool spm_can_split_at_spaces(const Vocab& vocab);

// Cuts `text` before every "▁" that follows another character (appends the segments).
void spm_split_at_spaces(std::string_view text, std::vector<std::string_view>& segments);

// Encodes `text` (or one segment of it) whole.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out,
                SpmScratch& scratch, EncodeStats* stats);

}  // namespace sluice
