// Byte-level BPE (GPT-2 family): each pre-tokenized word is mapped byte -> GPT-2 alphabet
// character, then adjacent symbols are merged lowest merge rank first (ties: leftmost) until
// no ranked pair is left, as llama.cpp's llm_tokenizer_bpe_session.
//
// Symbols are interned strings ("sids"): ids [0, n_tokens) are the vocabulary's tokens, ids
// above are strings that occur only inside merges. A merge is then a lookup of the pair
// (left sid, right sid) in one flat hash table giving (rank, result sid), so the merge loop
// never touches a string. Cost per word of n bytes: O(n log n) (binary heap over a linked
// list of symbols; stale heap entries are skipped when popped).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab.h"

namespace sluice {

// Counters of work done by an encode call. Tests use them to check linear scaling without
// timing; all are totals over the call.
struct EncodeStats {
  uint64_t regex_matches = 0;  // PCRE2 match calls (pre-tokenization, WPM)
  uint64_t words = 0;          // pre-tokenized words / SPM fragments / WPM words
  uint64_t cache_hits = 0;     // BPE words answered from the per-call word cache
  uint64_t symbols = 0;        // units fed to the encoders (BPE bytes, SPM/WPM characters)
  uint64_t heap_pops = 0;      // merge-queue pops (BPE, SPM)
  uint64_t lookups = 0;        // vocabulary / merge-table lookups
  uint64_t special_steps = 0;  // special-token trie steps and partition passes
};

class BpeModel {
 public:
  // Interns tokens and merges. Merge strings are "left right" split at the first space after
  // the first byte; the first occurrence of a pair keeps its rank (as llama.cpp).
  static Result<BpeModel> build(const Vocab& vocab);

  BpeModel(BpeModel&&) noexcept = default;
  BpeModel& operator=(BpeModel&&) noexcept = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Reusable buffers for one thread.
  struct Scratch {
    struct Sym {
      int32_t sid;  // kDead once merged into its left neighbour
      int32_t prev, next;
      uint32_t begin, end;  // bytes of the raw word
    };
    struct Bigram {
      int32_t rank;
      int32_t left, right;
      int32_t left_sid, right_sid;  // the pair as pushed; stale if either changed
      int32_t result;               // sid of the merged symbol
    };
    std::vector<Sym> syms;
    std::vector<Bigram> heap;
    std::string encoded;
  };

  // Appends the ids of one pre-tokenized word given as raw bytes (not GPT-2 encoded).
  // `vocab` is the one build() saw.
  void encode_word(const Vocab& vocab, std::string_view word, std::vector<TokenId>& out,
                   Scratch& scratch, EncodeStats* stats) const;

  size_t n_merges() const { return n_merges_; }

 private:
  BpeModel() = default;

  static constexpr int32_t kDead = -2;
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);

  // (left sid, right sid) -> (rank, result sid); open addressing, linear probing.
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  const Merge* find_merge(int32_t left, int32_t right) const;
  void insert_merge(int32_t left, int32_t right, Merge m);
  static uint64_t pair_key(int32_t l, int32_t r) {
    return (uint64_t(uint32_t(l)) << 32) | uint32_t(r);
  }

  // Returns whether a lookup was made.
  bool push_bigram(Scratch& s, int32_t left, int32_t right) const;
  void emit(const Vocab& vocab, std::string_view word, const Scratch::Sym& sym,
            std::vector<TokenId>& out) const;

  int32_t n_tokens_ = 0;
  size_t n_merges_ = 0;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_sid_{};  // sid of each byte's GPT-2 character, -1 if none
  std::vector<uint64_t> keys_;
  std::vector<Merge> vals_;
  uint64_t mask_ = 0;
};

}  // namespace sluice
