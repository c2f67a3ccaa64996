// Token masks: the per-position vocabulary verdicts and the run-time sweep of leftovers.
#include "grammar/token_mask.h"

#include <algorithm>
#include <bit>

namespace sluice::grammar {

namespace {

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

bool has_bottom(const StackSet& s) {
  return std::binary_search(s.begin(), s.end(), StackStore::kBottom);
}

void set_bit(std::span<uint64_t> m, int32_t t) {
  m[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
}
bool get_bit(std::span<const uint64_t> m, int32_t t) {
  return (m[size_t(t) >> 6] >> (t & 63)) & 1;
}

// Walks `items` (sorted by key bytes) from the state states[0], advancing shared prefixes
// once:
//   on_alive(i, states)       the whole key of item i was accepted
//   on_dead(i, dead_len) -> n the key died after dead_len bytes; returns how many items
//                             (from i) to skip, all of which share those bytes
// `states[d]` is the state after d bytes of the current key; `cur` is scratch.
template <class Key, class Alive, class Dead>
void walk_sorted(const Grammar& g, StackStore& store, size_t n, Key key, Alive on_alive,
                 Dead on_dead, std::vector<StackSet>& states, std::string& cur) {
  cur.clear();  // states[0..cur.size()] are the states after each prefix of cur
  size_t i = 0;
  while (i < n) {
    std::string_view k = key(i);
    if (k.data() == nullptr) {  // the caller skips this item
      ++i;
      continue;
    }
    size_t d = common_prefix(k, cur);
    cur.resize(d);
    bool dead = false;
    for (; d < k.size(); ++d) {
      if (states.size() < d + 2) states.resize(d + 2);
      advance(g, store, states[d], uint8_t(k[d]), states[d + 1]);
      cur.push_back(k[d]);
      if (states[d + 1].empty()) {
        dead = true;
        break;
      }
    }
    if (!dead) {
      on_alive(i, states);
      ++i;
    } else {
      i += on_dead(i, d + 1, std::string_view(cur));
    }
  }
}

}  // namespace

void follow_sets(const Grammar& g, std::vector<uint32_t>& rule_of, std::vector<ByteSet>& follow) {
  const size_t n = g.n_rules();
  rule_of.assign(g.n_elems(), 0);
  for (uint32_t r = 0; r < n; ++r)
    for (uint32_t a : g.alts(r))
      for (uint32_t p = a;; ++p) {
        rule_of[p] = r;
        if (g.kind(p) == Grammar::kEnd) break;
      }
  // Nullable rules (rounds: chains of nullable first references are short).
  std::vector<bool> nullable(n);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (uint32_t a : g.alts(r)) {
        uint32_t p = a;
        while (g.kind(p) == Grammar::kRule && nullable[g.arg(p)]) ++p;
        if (g.kind(p) == Grammar::kEnd) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Sets that grow along edges "set[to] includes set[from]", to a fixpoint by a worklist.
  auto propagate = [&](std::vector<ByteSet>& set, const std::vector<std::vector<uint32_t>>& out) {
    std::vector<uint32_t> work;
    std::vector<bool> queued(n, true);
    for (uint32_t r = 0; r < n; ++r) work.push_back(r);
    while (!work.empty()) {
      uint32_t r = work.back();
      work.pop_back();
      queued[r] = false;
      for (uint32_t to : out[r]) {
        ByteSet merged = set[to];
        for (size_t w = 0; w < 4; ++w) merged.w[w] |= set[r].w[w];
        if (merged == set[to]) continue;
        set[to] = merged;
        if (!queued[to]) {
          queued[to] = true;
          work.push_back(to);
        }
      }
    }
  };
  auto add = [](ByteSet& s, const ByteSet& t) {
    for (size_t w = 0; w < 4; ++w) s.w[w] |= t.w[w];
  };
  // FIRST: the bytes a rule's sentences can start with.
  std::vector<ByteSet> first(n);
  std::vector<std::vector<uint32_t>> first_edges(n);  // q -> r: FIRST(r) includes FIRST(q)
  for (uint32_t r = 0; r < n; ++r)
    for (uint32_t a : g.alts(r))
      for (uint32_t p = a; g.kind(p) != Grammar::kEnd; ++p) {
        if (g.kind(p) == Grammar::kBytes) {
          add(first[r], g.bytes(p));
          break;
        }
        first_edges[g.arg(p)].push_back(r);
        if (!nullable[g.arg(p)]) break;
      }
  propagate(first, first_edges);
  // FOLLOW: the bytes that can come right after a rule ends, in any context.
  follow.assign(n, ByteSet{});
  std::vector<std::vector<uint32_t>> follow_edges(n);  // q -> r: FOLLOW(r) includes FOLLOW(q)
  for (uint32_t q = 0; q < n; ++q)
    for (uint32_t a : g.alts(q))
      for (uint32_t p = a; g.kind(p) != Grammar::kEnd; ++p) {
        if (g.kind(p) != Grammar::kRule) continue;
        uint32_t r = g.arg(p), s = p + 1;
        for (; g.kind(s) != Grammar::kEnd; ++s) {
          if (g.kind(s) == Grammar::kBytes) {
            add(follow[r], g.bytes(s));
            break;
          }
          add(follow[r], first[g.arg(s)]);
          if (!nullable[g.arg(s)]) break;
        }
        if (g.kind(s) == Grammar::kEnd) follow_edges[q].push_back(r);
      }
  propagate(follow, follow_edges);
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::remove_if(stop_ids_.begin(), stop_ids_.end(),
                                 [&](int32_t id) { return id < 0 || size_t(id) >= bytes_.size(); }),
                  stop_ids_.end());
  for (int32_t id = 0; id < int32_t(bytes_.size()); ++id)
    if (!bytes_[size_t(id)].empty() && !is_stop(id)) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  // The trie: for each token in sorted order, close the nodes below the prefix it shares with
  // the previous token, open one node per remaining byte, and put the token at the last.
  Trie& t = trie_;
  std::vector<uint32_t> path;  // the open nodes: the current prefix
  std::string_view prev;
  for (int32_t id : sorted_) {
    std::string_view b = bytes_[size_t(id)];
    const size_t c = common_prefix(b, prev);
    for (; path.size() > c; path.pop_back()) t.end[path.back()] = uint32_t(t.size());
    for (size_t d = c; d < b.size(); ++d) {
      path.push_back(uint32_t(t.size()));
      t.byte.push_back(uint8_t(b[d]));
      t.depth.push_back(uint32_t(d + 1));
      t.end.push_back(0);
      t.tok_begin.push_back(uint32_t(t.tokens.size()));
    }
    t.tokens.push_back(id);
    prev = b;
  }
  for (; !path.empty(); path.pop_back()) t.end[path.back()] = uint32_t(t.size());
  t.tok_begin.push_back(uint32_t(t.tokens.size()));
}

bool TokenVocab::is_stop(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

void MaskEntry::or_into(std::span<uint64_t> mask) const {
  if (accepted.empty()) {
    for (int32_t t : accepted_ids) set_bit(mask, t);
    return;
  }
  const size_t n = std::min(mask.size(), accepted.size());
  for (size_t w = 0; w < n; ++w) mask[w] |= accepted[w];
}

// States are interned sets of stacks (sorted ids of `store`, over kBottom); transitions are
// memoized, so a byte costs one hash lookup once the automaton has seen it. Entries of
// neighbouring positions (the levels of a bounded repeat, the characters of a string) walk
// through the same states. Grows with the work done; lives as long as the cache.
struct MaskCache::Dfa {
  static constexpr uint32_t kDead = 0;  // the empty set

  StackStore store;
  std::vector<uint32_t> data;         // every state's stacks, concatenated
  std::vector<uint32_t> begin{0, 0};  // [state] offset into data; [n_states] the end
  std::vector<uint8_t> bottom{0};     // [state] the set holds kBottom (the frame may end)
  std::vector<uint32_t> sets;         // open addressing by content: state + 1, 0 = empty
  struct Edge {
    uint64_t key;   // (state << 8 | byte) + 1, 0 = empty slot
    uint64_t next;  // the state after that byte (64 bits: a slot is 16 bytes, aligned)
  };
  std::vector<Edge> edges;  // open addressing (one cache line holds 4 slots)
  size_t n_edges = 0;
  // Hot states (more than kHotSteps lookups) also get a dense row of 256 transitions: a walk
  // through a string's characters steps from the same few states over and over, and a row
  // in cache beats a probe into a table of millions of edges.
  static constexpr uint32_t kHotSteps = 64;
  std::vector<uint32_t> steps{0};   // [state] lookups while it has no row
  std::vector<uint32_t> row_of{0};  // [state] its row + 1, 0 = none
  std::vector<uint32_t> rows;       // [n_rows][256] next state + 1, 0 = not known yet
  StackSet tmp;
  // compute() scratch, by trie depth: states[d] after d bytes, path[d] byte d, exit offsets.
  std::vector<uint32_t> states, exits;
  std::vector<uint8_t> path;

  size_t n_states() const { return begin.size() - 1; }
  size_t memory_bytes() const {
    return (data.capacity() + begin.capacity() + sets.capacity() + steps.capacity() +
            row_of.capacity() + rows.capacity()) *
               4 +
           edges.capacity() * sizeof(Edge) + bottom.capacity() + store.size() * 16;
  }
  std::span<const uint32_t> stacks(uint32_t s) const {
    return {data.data() + begin[s], begin[s + 1] - begin[s]};
  }

  static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return h;
  }
  static uint64_t hash(std::span<const uint32_t> s) {
    uint64_t h = s.size();
    for (uint32_t x : s) h = mix(h * 0x9E3779B97F4A7C15ull + x);
    return h;
  }
  static uint64_t hash64(std::span<const uint64_t> s) {
    uint64_t h = s.size();
    for (uint64_t x : s) h = mix(h * 0x9E3779B97F4A7C15ull + x);
    return h;
  }

  // The state of the sorted set `s`.
  uint32_t intern(const StackSet& s) {
    if (s.empty()) return kDead;
    if ((n_states() + 1) * 2 > sets.size()) {
      sets.assign(std::max<size_t>(1024, sets.size() * 2), 0);
      for (uint32_t id = 1; id < n_states(); ++id) {
        size_t i = hash(stacks(id)) & (sets.size() - 1);
        while (sets[i]) i = (i + 1) & (sets.size() - 1);
        sets[i] = id + 1;
      }
    }
    size_t i = hash(s) & (sets.size() - 1);
    for (; sets[i]; i = (i + 1) & (sets.size() - 1)) {
      std::span<const uint32_t> t = stacks(sets[i] - 1);
      if (std::equal(t.begin(), t.end(), s.begin(), s.end())) return sets[i] - 1;
    }
    const uint32_t id = uint32_t(n_states());
    data.insert(data.end(), s.begin(), s.end());
    begin.push_back(uint32_t(data.size()));
    bottom.push_back(has_bottom(s));
    steps.push_back(0);
    row_of.push_back(0);
    sets[i] = id + 1;
    return id;
  }

  uint32_t start(uint32_t pos) {
    tmp.assign(1, store.intern(pos, StackStore::kBottom));
    return intern(tmp);
  }

  uint32_t step(const Grammar& g, uint32_t s, uint8_t b) {
    if (row_of[s]) {
      uint32_t& slot = rows[size_t(row_of[s] - 1) * 256 + b];
      if (!slot) slot = step_hashed(g, s, b) + 1;
      return slot - 1;
    }
    if (++steps[s] > kHotSteps) {
      rows.resize(rows.size() + 256, 0);
      row_of[s] = uint32_t(rows.size() / 256);
    }
    return step_hashed(g, s, b);
  }

  uint32_t step_hashed(const Grammar& g, uint32_t s, uint8_t b) {
    if ((n_edges + 1) * 2 > edges.size()) {
      std::vector<Edge> grown(std::max<size_t>(4096, edges.size() * 2), Edge{0, 0});
      for (const Edge& e : edges) {
        if (!e.key) continue;
        size_t i = mix(e.key) & (grown.size() - 1);
        while (grown[i].key) i = (i + 1) & (grown.size() - 1);
        grown[i] = e;
      }
      edges.swap(grown);
    }
    const uint64_t key = (uint64_t(s) << 8 | b) + 1;
    const size_t mask = edges.size() - 1;
    size_t i = mix(key) & mask;
    for (; edges[i].key; i = (i + 1) & mask)
      if (edges[i].key == key) return uint32_t(edges[i].next);
    advance(g, store, stacks(s), b, tmp);
    const uint32_t next = intern(tmp);
    edges[i] = {key, next};
    ++n_edges;
    return next;
  }
};

MaskCache::~MaskCache() = default;

MaskCache::MaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)), dfa_(std::make_unique<Dfa>()) {
  auto t0 = std::chrono::steady_clock::now();
  follow_sets(*g_, rule_of_, follow_);
  build_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const MaskEntry& MaskCache::entry(uint32_t pos) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pos);
  if (it != entries_.end()) return *it->second;
  auto t0 = std::chrono::steady_clock::now();
  auto e = compute(pos);
  build_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return *entries_.emplace(pos, std::move(e)).first->second;
}

void MaskCache::precompute_all() {
  for (uint32_t p = 0; p < g_->n_elems(); ++p)
    if (g_->kind(p) == Grammar::kBytes) entry(p);
  std::lock_guard lock(mu_);
  dfa_ = std::make_unique<Dfa>();  // every entry is known: the memo has no more use
}

size_t MaskCache::n_entries() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

size_t MaskCache::n_automaton_states() const {
  std::lock_guard lock(mu_);
  return dfa_->n_states();
}

size_t MaskCache::n_automaton_edges() const {
  std::lock_guard lock(mu_);
  return dfa_->n_edges;
}

size_t MaskCache::memory_bytes() const {
  std::lock_guard lock(mu_);
  size_t n = dfa_->memory_bytes() + bitsets_.size() * vocab_->n_words() * 8;
  for (const auto& [pos, e] : entries_)
    n += sizeof(MaskEntry) + e->accepted_ids.capacity() * 4 +
         e->uncertain.capacity() * sizeof(MaskEntry::Leftover);
  return n;
}

double MaskCache::build_seconds() const {
  std::lock_guard lock(mu_);
  return build_seconds_;
}

std::span<const uint64_t> MaskCache::intern_bitset(const std::vector<uint64_t>& words) {
  const uint64_t h = Dfa::hash64(words);
  std::vector<uint32_t>& same = by_hash_[h];
  for (uint32_t i : same)
    if (std::equal(words.begin(), words.end(), bitsets_[i].get()))
      return {bitsets_[i].get(), words.size()};
  bitsets_.push_back(std::make_unique<uint64_t[]>(words.size()));
  std::copy(words.begin(), words.end(), bitsets_.back().get());
  same.push_back(uint32_t(bitsets_.size() - 1));
  return {bitsets_.back().get(), words.size()};
}

std::unique_ptr<MaskEntry> MaskCache::compute(uint32_t pos) {
  auto e = std::make_unique<MaskEntry>();
  std::vector<uint64_t>& accepted = scratch_;
  accepted.assign(vocab_->n_words(), 0);
  const TokenVocab::Trie& t = vocab_->trie();
  // The automaton is only a memo: past kMaxDfaBytes it starts over (entries keep their
  // verdicts), so that precompute_all() on a large grammar stays in bounded memory.
  constexpr size_t kMaxDfaBytes = size_t(64) << 20;
  if (dfa_->memory_bytes() > kMaxDfaBytes) dfa_ = std::make_unique<Dfa>();
  Dfa& a = *dfa_;
  // A leftover at offset d needs the frame to be able to end there (the state after d bytes
  // holds kBottom) and byte d to be one that can follow the frame's rule somewhere.
  const ByteSet& follow = follow_[rule_of_[pos]];
  auto& states = a.states;
  auto& path = a.path;
  auto& exits = a.exits;
  states.assign(1, a.start(pos));
  size_t n_accepted = 0;
  for (size_t i = 0; i < t.size();) {
    const uint32_t d = t.depth[i];  // node i's prefix: path[0 .. d - 1]
    if (states.size() <= d) {
      states.resize(d + 1);
      path.resize(d + 1);
    }
    path[d - 1] = t.byte[i];
    const uint32_t next = a.step(*g_, states[d - 1], t.byte[i]);
    if (next == Dfa::kDead) {
      // Every token under node i dies at byte d - 1.
      exits.clear();
      for (uint32_t off = 1; off < d; ++off)
        if (a.bottom[states[off]] && follow.has(path[off])) exits.push_back(off);
      if (!exits.empty())
        for (uint32_t k = t.tok_begin[i]; k < t.tok_begin[t.end[i]]; ++k)
          for (uint32_t off : exits) e->uncertain.push_back({t.tokens[k], off});
      i = t.end[i];
      continue;
    }
    states[d] = next;
    for (uint32_t k = t.tok_begin[i]; k < t.tok_begin[i + 1]; ++k) set_bit(accepted, t.tokens[k]);
    n_accepted += t.tok_begin[i + 1] - t.tok_begin[i];
    ++i;
  }
  if (n_accepted <= accepted.size()) {
    for (size_t w = 0; w < accepted.size(); ++w)
      for (uint64_t b = accepted[w]; b; b &= b - 1)
        e->accepted_ids.push_back(int32_t(w * 64 + size_t(std::countr_zero(b))));
  } else {
    e->accepted = intern_bitset(accepted);
  }
  std::sort(e->uncertain.begin(), e->uncertain.end(),
            [&](const MaskEntry::Leftover& x, const MaskEntry::Leftover& y) {
              std::string_view p = vocab_->bytes(x.token).substr(x.offset),
                               q = vocab_->bytes(y.token).substr(y.offset);
              return p != q ? p < q : x.token < y.token;
            });
  if (!e->uncertain.empty()) {
    e->by_first.assign(257, 0);
    for (const MaskEntry::Leftover& l : e->uncertain)
      ++e->by_first[size_t(uint8_t(vocab_->bytes(l.token)[l.offset])) + 1];
    for (size_t b = 0; b < 256; ++b) e->by_first[b + 1] += e->by_first[b];
  }
  return e;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::make(
    std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab) {
  auto cg = std::make_shared<CompiledGrammar>();
  cg->cache = std::make_shared<MaskCache>(g, vocab);
  if (g->has_checks()) {
    for (int32_t id = 0; id < int32_t(vocab->size()); ++id) {
      const std::string_view b = vocab->bytes(id);
      cg->max_token_bytes = std::max(cg->max_token_bytes, b.size());
      if (b.find_first_of(".\"\\") != std::string_view::npos) cg->check_inside_ids.push_back(id);
      const size_t q = b.find('"');
      if (q != std::string_view::npos &&
          (b.find_first_of(".\"\\", q + 1) != std::string_view::npos ||
           b.size() + 1 > kMaxCheckedLength))
        cg->check_enter_ids.push_back(id);
    }
  }
  cg->grammar = std::move(g);
  cg->vocab = std::move(vocab);
  return cg;
}

TokenMatcher::TokenMatcher(std::shared_ptr<const CompiledGrammar> cg)
    : cg_(std::move(cg)), matcher_(cg_->grammar) {}

bool TokenMatcher::is_allowed(int32_t id) {
  if (terminated() || id < 0 || size_t(id) >= cg_->vocab->size()) return false;
  if (cg_->vocab->is_stop(id)) return matcher_.can_end();
  std::string_view b = cg_->vocab->bytes(id);
  return !b.empty() && matcher_.can_accept(b);
}

bool TokenMatcher::accept_token(int32_t id) {
  if (!is_allowed(id)) return false;
  bool stop = cg_->vocab->is_stop(id);
  bool ok = matcher_.accept(stop ? std::string_view() : cg_->vocab->bytes(id));
  if (ok) stops_.push_back(stop);
  return ok;
}

void TokenMatcher::rollback(size_t n) {
  n = std::min(n, stops_.size());
  matcher_.rollback(n);
  stops_.resize(stops_.size() - n);
}

void TokenMatcher::sweep(const MaskEntry& e, Below& below, std::span<uint64_t> mask) {
  const TokenVocab& v = *cg_->vocab;
  const Grammar& g = *cg_->grammar;
  StackStore& store = matcher_.store();
  const auto& u = e.uncertain;
  // Leftovers grouped by first byte: only the bytes the context below takes are walked, each
  // from the state after it (shared by every top over the same parent).
  for (size_t b = 0; b < 256; ++b) {
    if (!below.first.has(uint8_t(b))) continue;
    const size_t lo = e.by_first[b], n = e.by_first[b + 1] - lo;
    if (n == 0) continue;
    int32_t& k = below.after_of[b];
    if (k < 0) {
      k = int32_t(below.n_after++);
      if (below.after.size() < below.n_after) below.after.resize(below.n_after);
      advance(g, store, below.state, uint8_t(b), below.after[size_t(k)]);
    }
    if (below.after[size_t(k)].empty()) continue;
    if (depth_.empty()) depth_.resize(1);
    depth_[0] = below.after[size_t(k)];
    auto rest = [&](size_t i) {  // the leftover after its first byte
      return v.bytes(u[lo + i].token).substr(u[lo + i].offset + 1);
    };
    walk_sorted(
        g, store, n,
        [&](size_t i) { return get_bit(mask, u[lo + i].token) ? std::string_view() : rest(i); },
        [&](size_t i, const std::vector<StackSet>&) { set_bit(mask, u[lo + i].token); },
        [&](size_t i, size_t, std::string_view prefix) -> size_t {
          size_t j = i + 1;
          while (j < n && rest(j).starts_with(prefix)) {  // a short run: scan first
            if (j - i >= 8) {
              j = size_t(std::partition_point(
                             u.begin() + ptrdiff_t(lo + j), u.begin() + ptrdiff_t(lo + n),
                             [&](const MaskEntry::Leftover& l) {
                               return v.bytes(l.token).substr(l.offset + 1).starts_with(prefix);
                             }) -
                         u.begin()) -
                  lo;
              break;
            }
            ++j;
          }
          return j - i;
        },
        depth_, cur_);
  }
}

TokenMatcher::Below& TokenMatcher::below(uint32_t parent) {
  for (size_t i = 0; i < n_below_; ++i)
    if (below_[i].parent == parent) return below_[i];
  if (below_.size() <= n_below_) below_.resize(n_below_ + 1);
  Below& b = below_[n_below_++];
  b.parent = parent;
  b.state.clear();
  expand(*cg_->grammar, matcher_.store(), parent, b.state);
  std::sort(b.state.begin(), b.state.end());
  b.first = ByteSet{};
  for (uint32_t s : b.state) {
    if (s == StackStore::kNoStack || s == StackStore::kBottom) continue;
    const ByteSet& x = cg_->grammar->bytes(matcher_.store().pos(s));
    for (size_t w = 0; w < 4; ++w) b.first.w[w] |= x.w[w];
  }
  b.after_of.fill(-1);
  b.n_after = 0;
  return b;
}

void TokenMatcher::fill_mask(std::span<uint64_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (terminated()) return;
  const StackSet& state = matcher_.state();
  StackStore& store = matcher_.store();
  top_entries_.assign(state.size(), nullptr);
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i] == StackStore::kNoStack) continue;
    top_entries_[i] = &cg_->cache->entry(store.pos(state[i]));
    top_entries_[i]->or_into(mask);
  }
  n_below_ = 0;
  for (size_t i = 0; i < state.size(); ++i) {
    if (!top_entries_[i] || top_entries_[i]->uncertain.empty()) continue;
    sweep(*top_entries_[i], below(store.parent(state[i])), mask);
  }
  if (matcher_.can_end())
    for (int32_t id : cg_->vocab->stop_ids()) set_bit(mask, id);
  if (cg_->grammar->has_checks()) filter_checked(mask);
}

void TokenMatcher::filter_checked(std::span<uint64_t> mask) {
  // The entries above know the grammar only. Inside a checked text, a token can fail a check
  // when it finishes a label or the string (a '.', a quote, an escape that may spell a dot),
  // completes a pending escape, or may take the text past its length. Outside one, only when
  // it opens a string and goes on to such a byte. Those run through the matcher, or, for plain
  // characters when every stack is in the text, through the check alone.
  const CompiledGrammar& cg = *cg_;
  const TokenVocab& v = *cg.vocab;
  auto clear = [&](int32_t id) { mask[size_t(id) >> 6] &= ~(uint64_t(1) << (id & 63)); };
  auto judge = [&](int32_t id, const Matcher::CheckedText& t) {
    if (!get_bit(mask, id) || v.is_stop(id)) return;
    const std::string_view b = v.bytes(id);
    const bool plain = !t.pending && b.find_first_of("\"\\") == std::string_view::npos;
    if (plain && t.length + b.size() + 1 <= kMaxCheckedLength &&
        b.find('.') == std::string_view::npos)
      return;  // no label ends, the length fits: nothing to check
    if (plain && t.length + b.size() > kMaxCheckedLength) return clear(id);  // too long
    const bool ok =
        plain && t.every_stack ? matcher_.checked_chars_ok(t.check, b) : matcher_.can_accept(b);
    if (!ok) clear(id);
  };
  Matcher::CheckedText t;
  if (!matcher_.checked_text(t)) {
    for (int32_t id : cg.check_enter_ids)
      if (get_bit(mask, id) && !v.is_stop(id) && !matcher_.can_accept(v.bytes(id))) clear(id);
    return;
  }
  if (!t.pending && t.length + cg.max_token_bytes + 1 <= kMaxCheckedLength) {
    for (int32_t id : cg.check_inside_ids) judge(id, t);
    return;
  }
  for (size_t w = 0; w < mask.size(); ++w)
    for (uint64_t bits = mask[w]; bits; bits &= bits - 1)
      judge(int32_t(w * 64 + size_t(std::countr_zero(bits))), t);
}

}  // namespace sluice::grammar
