// Token masks: which vocabulary entries a grammar allows next.
//
// A token is a byte string, so "is token t allowed" means "does the matcher survive t's
// bytes". Doing that for 128k tokens at every step is far too slow; two ideas make it cheap
// (XGrammar, Dong et al. 2024):
//
//  * Most tokens are decided by the top frame alone. For each byte-set position p the
//    MaskCache runs the whole vocabulary once from a stack holding only p over an unknown
//    context ("bottom"): a token that survives inside the frame is ACCEPTED whatever lies
//    below; one that dies before the frame can end is REJECTED; one that reaches the end of
//    the frame with bytes left over is UNCERTAIN and is kept as (token, offset of the
//    leftover). Entries are shared by every request using the grammar.
//  * At run time a mask is the OR of the accepted sets of the state's stack tops, plus the
//    uncertain leftovers checked against the real stack below the top frame. Leftovers are
//    sorted, so shared prefixes are advanced once and a dead prefix skips every leftover
//    that starts with it (one binary search).
//
//   vocabulary (sorted by bytes)        position p = inside a JSON string
//     "abc"      accepted               (no quote or backslash: stays inside the frame)
//     "abc\","   uncertain @3 -> "\","  (the string may end after "abc": depends on below)
//     "\x01"     rejected               (control bytes never appear inside a JSON string)
//
// Stop tokens (EOS, EOT) are allowed exactly where the grammar may end; tokens with no bytes
// (other control tokens) never are.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace sluice::grammar {

// The vocabulary as grammars see it. Immutable; one per model, shared by all grammars.
class TokenVocab {
 public:
  // token_bytes[id]: the bytes token `id` appends to the output text (empty: never allowed).
  // stop_ids: tokens that end the output (allowed where the grammar may end).
  TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids);

  size_t size() const { return bytes_.size(); }
  size_t n_words() const { return (bytes_.size() + 63) / 64; }  // mask size in uint64 words
  std::string_view bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool is_stop(int32_t id) const;
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // Ids with bytes, sorted by their bytes (a flattened trie).
  const std::vector<int32_t>& sorted() const { return sorted_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;  // sorted
  std::vector<int32_t> sorted_;
};

// One byte-set position's verdict on the vocabulary (see the file comment).
struct MaskEntry {
  struct Leftover {
    int32_t token;
    uint32_t offset;  // the bytes [offset, end) must be accepted by the context below
  };
  std::vector<uint64_t> accepted;   // [n_words] bit per token id
  std::vector<Leftover> uncertain;  // sorted by leftover bytes
};

// The per-position entries of one (grammar, vocabulary) pair, computed on first use and kept.
// Thread-safe: matchers on several threads share one cache.
class MaskCache {
 public:
  MaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab);

  // Cost: the first call for a position walks the vocabulary once (O(distinct prefixes that
  // stay alive)); later calls are a map lookup under the lock.
  const MaskEntry& entry(uint32_t pos);
  // Computes the entries of every byte-set position the matcher can stand on (what a first
  // request would otherwise pay step by step).
  void precompute_all();

  size_t n_entries() const;
  double build_seconds() const;  // total time spent computing entries
  const Grammar& grammar() const { return *g_; }
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  std::unique_ptr<MaskEntry> compute(uint32_t pos) const;

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocab> vocab_;
  mutable std::mutex mu_;
  std::map<uint32_t, std::unique_ptr<MaskEntry>> entries_;
  double build_seconds_ = 0;
};

// A grammar bound to a vocabulary, with its mask cache: what is compiled once per schema or
// grammar text and shared by every request that uses it.
struct CompiledGrammar {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenVocab> vocab;
  std::shared_ptr<MaskCache> cache;
  double compile_seconds = 0;  // front end + lower()

  static std::shared_ptr<const CompiledGrammar> make(std::shared_ptr<const Grammar> g,
                                                     std::shared_ptr<const TokenVocab> vocab);
};

// One request's position in a grammar, token by token.
class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<const CompiledGrammar> cg);

  // Appends token `id` if the grammar allows it here (a stop token: only where the grammar may
  // end, and it terminates the matcher); else false and no change. One rollback step.
  bool accept_token(int32_t id);
  // Would accept_token(id) succeed? Cost: the token's bytes through the matcher.
  bool is_allowed(int32_t id);
  // Sets bit t of `mask` ([vocab.n_words()]) for every allowed token t, clears the others.
  void fill_mask(std::span<uint64_t> mask);
  // Undo the last `n` accepted tokens.
  void rollback(size_t n);
  size_t n_tokens() const { return stops_.size(); }
  bool can_end() const { return matcher_.can_end(); }
  bool terminated() const { return !stops_.empty() && stops_.back(); }
  const CompiledGrammar& compiled() const { return *cg_; }

 private:
  // The leftovers of `e` checked from `below` (the state under the top frame): sets the bits
  // of the tokens whose leftover is accepted.
  void sweep(const MaskEntry& e, const StackSet& below, std::span<uint64_t> mask);

  std::shared_ptr<const CompiledGrammar> cg_;
  Matcher matcher_;
  std::vector<bool> stops_;      // per accepted token: was it a stop token
  std::vector<StackSet> depth_;  // sweep scratch: state after each leftover byte
  StackSet below_;
};

}  // namespace sluice::grammar
