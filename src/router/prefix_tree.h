// An approximate radix tree over routing-key bytes: what the router believes one backend has in
// its prefix cache. The router never tokenizes; a key is the request's text (chat: roles and
// contents; completions: the prompt, or its token ids as 4 bytes each), so a shared byte prefix
// stands for a shared token prefix.
//
//   insert("You are a bot.\nuser: hi")      root
//   insert("You are a bot.\nuser: bye")       `- "You are a bot.\nuser: " (t=2)
//                                                   |- "hi"  (t=1)
//                                                   `- "bye" (t=2)
//
// Memory is bounded by the stored edge bytes (`max_chars`): an insert that passes the cap evicts
// whole leaves, least recently used first (every operation on a path stamps the path with a
// logical clock, so a parent is never older than its children), down to 7/8 of the cap, so the
// cost of a scan over the leaves is paid once per 1/8 of the cap inserted, not per insert.
//
// Pure data structure: no threads, no clocks, no I/O (the router locks around it; `sluice sim`
// drives it with virtual requests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::router {

class PrefixTree {
 public:
  explicit PrefixTree(size_t max_chars = size_t(1) << 24);
  ~PrefixTree();
  PrefixTree(PrefixTree&&) noexcept;
  PrefixTree& operator=(PrefixTree&&) noexcept;
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  // Bytes of the longest stored prefix of `key`. Does not touch the LRU clock.
  size_t match(std::string_view key) const;
  // Stores `key` (and refreshes its path in the LRU order); may evict other leaves.
  void insert(std::string_view key);
  // The backend no longer caches `key` beyond its first `keep_chars` bytes: forgets every stored
  // byte on key's path past that point, and everything below it (a prefix cache is a chain: a
  // lost block makes every longer prefix through it unreachable).
  void trim(std::string_view key, size_t keep_chars);
  void clear();

  size_t n_chars() const { return n_chars_; }  // stored edge bytes (what max_chars bounds)
  size_t n_nodes() const { return n_nodes_; }  // excluding the root
  size_t max_chars() const { return max_chars_; }
  uint64_t n_evicted_chars() const { return n_evicted_chars_; }

 private:
  struct Node;
  void evict_to(size_t target);
  void drop_subtree(Node& n);  // accounting for a subtree about to be freed

  size_t max_chars_;
  std::unique_ptr<Node> root_;
  size_t n_chars_ = 0;
  size_t n_nodes_ = 0;
  uint64_t clock_ = 0;
  uint64_t n_evicted_chars_ = 0;
};

}  // namespace sluice::router
