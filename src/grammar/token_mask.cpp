// Token masks: the per-position vocabulary verdicts and the run-time sweep of leftovers.
#include "grammar/token_mask.h"

#include <algorithm>

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

// Walks `items` (sorted by key bytes) from `start`, advancing shared prefixes once:
//   on_alive(i, states)       the whole key of item i was accepted
//   on_dead(i, dead_len) -> n the key died after dead_len bytes; returns how many items
//                             (from i) to skip, all of which share those bytes
// `states[d]` is the state after d bytes of the current key.
template <class Key, class Alive, class Dead>
void walk_sorted(const Grammar& g, StackStore& store, const StackSet& start, size_t n, Key key,
                 Alive on_alive, Dead on_dead, std::vector<StackSet>& states) {
  if (states.empty()) states.resize(1);
  states[0] = start;
  std::string cur;  // states[0..cur.size()] are the states after each prefix of cur
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
}

bool TokenVocab::is_stop(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

MaskCache::MaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)) {}

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
}

size_t MaskCache::n_entries() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

double MaskCache::build_seconds() const {
  std::lock_guard lock(mu_);
  return build_seconds_;
}

std::unique_ptr<MaskEntry> MaskCache::compute(uint32_t pos) const {
  auto e = std::make_unique<MaskEntry>();
  e->accepted.assign(vocab_->n_words(), 0);
  const std::vector<int32_t>& order = vocab_->sorted();
  StackStore store;
  std::vector<StackSet> states;
  StackSet start{store.intern(pos, StackStore::kBottom)};
  // Offsets where the frame may end (the state holds kBottom) inside the first `len` bytes.
  auto exits = [&](size_t len, std::vector<uint32_t>& out) {
    out.clear();
    for (size_t d = 1; d < len; ++d)
      if (has_bottom(states[d])) out.push_back(uint32_t(d));
  };
  std::vector<uint32_t> ex;
  walk_sorted(
      *g_, store, start, order.size(), [&](size_t i) { return vocab_->bytes(order[i]); },
      [&](size_t i, const std::vector<StackSet>&) { set_bit(e->accepted, order[i]); },
      [&](size_t i, size_t dead_len, std::string_view prefix) -> size_t {
        exits(dead_len, ex);
        // Every token from i on that starts with the dead prefix dies the same way.
        size_t end = size_t(
            std::partition_point(order.begin() + ptrdiff_t(i), order.end(),
                                 [&](int32_t t) { return vocab_->bytes(t).starts_with(prefix); }) -
            order.begin());
        if (!ex.empty())
          for (size_t j = i; j < end; ++j)
            for (uint32_t off : ex) e->uncertain.push_back({order[j], off});
        return end - i;
      },
      states);
  std::sort(e->uncertain.begin(), e->uncertain.end(),
            [&](const MaskEntry::Leftover& a, const MaskEntry::Leftover& b) {
              std::string_view x = vocab_->bytes(a.token).substr(a.offset),
                               y = vocab_->bytes(b.token).substr(b.offset);
              return x != y ? x < y : a.token < b.token;
            });
  return e;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::make(
    std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab) {
  auto cg = std::make_shared<CompiledGrammar>();
  cg->cache = std::make_shared<MaskCache>(g, vocab);
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

void TokenMatcher::sweep(const MaskEntry& e, const StackSet& below, std::span<uint64_t> mask) {
  const TokenVocab& v = *cg_->vocab;
  const auto& u = e.uncertain;
  auto leftover = [&](size_t i) { return v.bytes(u[i].token).substr(u[i].offset); };
  walk_sorted(
      cg_->grammar.operator*(), matcher_.store(), below, u.size(),
      [&](size_t i) { return get_bit(mask, u[i].token) ? std::string_view() : leftover(i); },
      [&](size_t i, const std::vector<StackSet>&) { set_bit(mask, u[i].token); },
      [&](size_t i, size_t, std::string_view prefix) -> size_t {
        return size_t(std::partition_point(u.begin() + ptrdiff_t(i), u.end(),
                                           [&](const MaskEntry::Leftover& l) {
                                             return v.bytes(l.token).substr(l.offset).starts_with(
                                                 prefix);
                                           }) -
                      u.begin()) -
               i;
      },
      depth_);
}

void TokenMatcher::fill_mask(std::span<uint64_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (terminated()) return;
  const StackSet& state = matcher_.state();
  const Grammar& g = *cg_->grammar;
  StackStore& store = matcher_.store();
  std::vector<const MaskEntry*> entries(state.size(), nullptr);
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i] == StackStore::kNoStack) continue;
    entries[i] = &cg_->cache->entry(store.pos(state[i]));
    const auto& a = entries[i]->accepted;
    for (size_t w = 0; w < mask.size() && w < a.size(); ++w) mask[w] |= a[w];
  }
  for (size_t i = 0; i < state.size(); ++i) {
    if (!entries[i] || entries[i]->uncertain.empty()) continue;
    below_.clear();
    expand(g, store, store.parent(state[i]), below_);
    std::sort(below_.begin(), below_.end());
    sweep(*entries[i], below_, mask);
  }
  if (matcher_.can_end())
    for (int32_t id : cg_->vocab->stop_ids()) set_bit(mask, id);
}

}  // namespace sluice::grammar
