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
//    that starts with it (one binary search); a first byte the stack below cannot take
//    skips its whole group.
//
// What keeps both halves cheap on a 128k vocabulary (docs/perf.md, "Structured output:
// grammar masks"):
//  * Leftovers only where the rest could be accepted: a leftover's first byte must be one
//    that can follow the frame's rule somewhere in the grammar (follow_sets, XGrammar's
//    context expansion): inside a JSON string the dying token `abc",` keeps the leftover
//    `",` and drops `bc",` and `c",`.
//  * Big frames: lower() inlines small rules into the loops that use them and lowers
//    repeats of rules as chains that start with the repeated rule, so the frame of a string
//    character spans the string (a frame of one character would leave every longer token
//    to the run-time sweep).
//  * The precomputation walks the vocabulary as a trie (TokenVocab::Trie: a dead prefix
//    skips its subtree in O(1)) through a memoized automaton over sets of stacks
//    (MaskCache::Dfa), shared by all entries of the cache.
//
//   vocabulary (sorted by bytes)        position p = inside a JSON string
//     "abc"      accepted               (no quote or backslash: stays inside the frame)
//     "abc\","   uncertain @3 -> "\","  (the string may end after "abc": depends on below)
//     "\x01"     rejected               (control bytes never appear inside a JSON string)
//
// Stop tokens (EOS, EOT) are allowed exactly where the grammar may end; tokens with no bytes
// (other control tokens) never are.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
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

  // The same ids as a trie in preorder: one node per distinct non-empty prefix, so a walk can
  // skip everything under a dead prefix in O(1).
  //
  //   node:      0    1    2    3    4        prefixes "a" "ab" "abc" "ad" "b"
  //   byte:      a    b    c    d    b        depth: 1 2 3 2 1
  //   end:       4    3    3    4    5        (one past the node's subtree)
  //   tok_begin: 0    1    2    3    3    4   tokens spelled exactly by node i:
  //                                           tokens[tok_begin[i] .. tok_begin[i + 1])
  // Preorder keeps a subtree's tokens contiguous: tokens[tok_begin[i] .. tok_begin[end[i]]).
  struct Trie {
    std::vector<uint8_t> byte;        // [n_nodes]
    std::vector<uint32_t> depth;      // [n_nodes] prefix length (root's children: 1)
    std::vector<uint32_t> end;        // [n_nodes]
    std::vector<uint32_t> tok_begin;  // [n_nodes + 1]
    std::vector<int32_t> tokens;      // [ids with bytes], in preorder
    size_t size() const { return byte.size(); }
  };
  const Trie& trie() const { return trie_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;  // sorted
  std::vector<int32_t> sorted_;
  Trie trie_;
};

// rule_of[pos]: the rule whose alternative holds element pos. follow[r]: every byte that can
// come right after rule r ends, in any context of the grammar (FOLLOW(r) of LL parsing, over
// bytes). A leftover whose first byte is not in FOLLOW of the frame's rule can never be
// accepted below it (XGrammar's context expansion, one byte deep).
void follow_sets(const Grammar& g, std::vector<uint32_t>& rule_of, std::vector<ByteSet>& follow);

// One byte-set position's verdict on the vocabulary (see the file comment). The accepted
// tokens are a bitset, or their ids when they are few (at most n_words of them: half the
// bitset's memory or less, and no slower to OR into a mask); most positions accept a handful.
// Bitsets are interned by the cache: the levels of a long bounded repeat (a string with a
// maxLength) accept the same tokens once the bound is farther than the longest token.
struct MaskEntry {
  struct Leftover {
    int32_t token;
    uint32_t offset;  // the bytes [offset, end) must be accepted by the context below
  };
  std::span<const uint64_t> accepted;  // [n_words] bit per token id (the cache's), or empty
  std::vector<int32_t> accepted_ids;   // ascending, when `accepted` is empty
  std::vector<Leftover> uncertain;     // sorted by leftover bytes
  // uncertain[by_first[b] .. by_first[b + 1]) start with byte b ([257]; empty when there are
  // no leftovers), so a sweep skips every first byte the context below cannot take.
  std::vector<uint32_t> by_first;

  // mask |= the accepted tokens ([n_words]).
  void or_into(std::span<uint64_t> mask) const;
};

// The per-position entries of one (grammar, vocabulary) pair, computed on first use and kept.
// Thread-safe: matchers on several threads share one cache.
class MaskCache {
 public:
  MaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab);
  ~MaskCache();
  MaskCache(const MaskCache&) = delete;
  MaskCache& operator=(const MaskCache&) = delete;

  // Cost: the first call for a position walks the vocabulary trie once (O(distinct prefixes
  // that stay alive), each a memoized automaton step); later calls are a map lookup under the
  // lock.
  const MaskEntry& entry(uint32_t pos);
  // Computes the entries of every byte-set position the matcher can stand on (what a first
  // request would otherwise pay step by step).
  void precompute_all();

  size_t n_entries() const;
  double build_seconds() const;  // total time spent computing entries
  // States and transitions of the precomputation's automaton so far (its memory: about 4
  // bytes per stack of each state, 32 per transition, 1 KB per hot state, and the stack
  // store; it starts over past 64 MB, and precompute_all() frees it).
  size_t n_automaton_states() const;
  size_t n_automaton_edges() const;
  // Bytes held by the entries and the automaton.
  size_t memory_bytes() const;
  const Grammar& grammar() const { return *g_; }
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  // The deterministic automaton whose states are sets of stacks over kBottom, built lazily as
  // entries step through it and shared by all of them (token_mask.cpp).
  struct Dfa;

  std::unique_ptr<MaskEntry> compute(uint32_t pos);  // under mu_
  // The cache's copy of `words` ([n_words]), shared with every entry that has the same.
  std::span<const uint64_t> intern_bitset(const std::vector<uint64_t>& words);  // under mu_

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::unique_ptr<Dfa> dfa_;       // under mu_
  std::vector<uint32_t> rule_of_;  // [element] the rule whose alternative holds it
  std::vector<ByteSet> follow_;    // [rule] bytes that can come right after it (follow_sets)
  mutable std::mutex mu_;
  std::map<uint32_t, std::unique_ptr<MaskEntry>> entries_;
  std::vector<std::unique_ptr<uint64_t[]>> bitsets_;             // distinct accepted bitsets
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_hash_;  // content hash -> bitsets_
  std::vector<uint64_t> scratch_;                                // compute(): [n_words]
  double build_seconds_ = 0;
};

// A grammar bound to a vocabulary, with its mask cache: what is compiled once per schema or
// grammar text and shared by every request that uses it.
struct CompiledGrammar {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenVocab> vocab;
  std::shared_ptr<MaskCache> cache;
  double compile_seconds = 0;  // front end + lower()
  // For grammars with checks (grammar.h): the tokens a check can refuse inside a checked text
  // (with a '.', a quote or a backslash), those that can open one and go on to such a byte (a
  // quote before one of them), and the longest token's length. Empty otherwise.
  std::vector<int32_t> check_inside_ids, check_enter_ids;
  size_t max_token_bytes = 0;

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
  // The bytes accepted so far (kept for grammars with checks only: grammar.h).
  std::string_view text() const { return matcher_.text(); }
  bool terminated() const { return !stops_.empty() && stops_.back(); }
  const CompiledGrammar& compiled() const { return *cg_; }

 private:
  // The state under a top frame, with what sweeps need of it. One per distinct parent in a
  // fill_mask (the alternatives of a rule share their parent, and so these).
  struct Below {
    uint32_t parent = 0;
    StackSet state;                     // expand(parent), sorted
    ByteSet first;                      // the bytes `state` can take
    std::array<int32_t, 256> after_of;  // byte -> index into `after`, -1: not yet computed
    std::vector<StackSet> after;        // advance(state, byte), for the bytes seen
    size_t n_after = 0;                 // used entries of `after`
  };
  // The leftovers of `e` checked from `below`: sets the bits of the tokens whose leftover is
  // accepted.
  void sweep(const MaskEntry& e, Below& below, std::span<uint64_t> mask);
  // The Below of `parent` for this fill_mask (computed on first use).
  Below& below(uint32_t parent);
  // Clears the tokens of `mask` that a string check (grammar.h: checked rules) refuses.
  void filter_checked(std::span<uint64_t> mask);

  std::shared_ptr<const CompiledGrammar> cg_;
  Matcher matcher_;
  std::vector<bool> stops_;                    // per accepted token: was it a stop token
  std::vector<StackSet> depth_;                // sweep scratch: state after each leftover byte
  std::string cur_;                            // sweep scratch: the prefix depth_ holds
  std::vector<const MaskEntry*> top_entries_;  // fill_mask scratch: [state] entry
  std::vector<Below> below_;                   // fill_mask scratch
  size_t n_below_ = 0;                         // used entries of below_
};

}  // namespace sluice::grammar
