// The pushdown matcher: interned stacks, closure, one-byte advance, rollback.
#include <algorithm>

#include "grammar/grammar.h"

namespace sluice::grammar {

namespace {

uint64_t node_hash(uint32_t pos, uint32_t parent) {
  uint64_t h = (uint64_t(pos) << 32 | parent) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

using Closure = StackStore::Scratch;

void begin(Closure& c, size_t n_ids) {
  if (++c.epoch == 0) {
    std::fill(c.stamp.begin(), c.stamp.end(), 0);
    c.epoch = 1;
  }
  if (c.stamp.size() < n_ids) c.stamp.resize(std::max(n_ids, c.stamp.size() * 2), 0);
  c.saw_none = c.saw_bottom = false;
}

void expand_session(const Grammar& g, StackStore& store, uint32_t stack, StackSet& out,
                    Closure& c) {
  c.work.clear();
  c.work.push_back(stack);
  while (!c.work.empty()) {
    uint32_t s = c.work.back();
    c.work.pop_back();
    if (s == StackStore::kNoStack || s == StackStore::kBottom) {
      bool& saw = s == StackStore::kNoStack ? c.saw_none : c.saw_bottom;
      if (!saw) out.push_back(s);
      saw = true;
      continue;
    }
    if (c.stamp.size() <= s) c.stamp.resize(std::max<size_t>(s + 1, c.stamp.size() * 2), 0);
    if (c.stamp[s] == c.epoch) continue;
    c.stamp[s] = c.epoch;
    uint32_t pos = store.pos(s);
    switch (g.kind(pos)) {
      case Grammar::kBytes:
        out.push_back(s);
        break;
      case Grammar::kEnd:
        c.work.push_back(store.parent(s));
        break;
      case Grammar::kRule: {
        uint32_t cont = pos + 1;
        uint32_t base =
            g.kind(cont) == Grammar::kEnd ? store.parent(s) : store.intern(cont, store.parent(s));
        for (uint32_t a : g.alts(g.arg(pos))) c.work.push_back(store.intern(a, base));
        break;
      }
    }
  }
}

}  // namespace

void StackStore::grow() {
  size_t cap = table_.empty() ? 1024 : table_.size() * 2;
  table_.assign(cap, 0);
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    size_t i = node_hash(nodes_[id].pos, nodes_[id].parent) & (cap - 1);
    while (table_[i]) i = (i + 1) & (cap - 1);
    table_[i] = id + 1;
  }
}

uint32_t StackStore::intern(uint32_t pos, uint32_t parent) {
  if ((nodes_.size() + 1) * 2 > table_.size()) grow();
  size_t mask = table_.size() - 1;
  size_t i = node_hash(pos, parent) & mask;
  while (uint32_t v = table_[i]) {
    const Node& n = nodes_[v - 1];
    if (n.pos == pos && n.parent == parent) return v - 1;
    i = (i + 1) & mask;
  }
  nodes_.push_back({pos, parent});
  table_[i] = uint32_t(nodes_.size());
  return uint32_t(nodes_.size() - 1);
}

void expand(const Grammar& g, StackStore& store, uint32_t stack, StackSet& out) {
  Closure& c = store.scratch();
  begin(c, store.size());
  expand_session(g, store, stack, out, c);
}

void advance(const Grammar& g, StackStore& store, std::span<const uint32_t> in, uint8_t b,
             StackSet& out) {
  out.clear();
  Closure& c = store.scratch();
  begin(c, store.size());
  for (uint32_t s : in) {
    if (s == StackStore::kNoStack || s == StackStore::kBottom) continue;
    uint32_t pos = store.pos(s);
    if (!g.bytes(pos).has(b)) continue;
    uint32_t next =
        g.kind(pos + 1) == Grammar::kEnd ? store.parent(s) : store.intern(pos + 1, store.parent(s));
    expand_session(g, store, next, out, c);
  }
  std::sort(out.begin(), out.end());
}

StackSet initial_state(const Grammar& g, StackStore& store) {
  StackSet out;
  Closure& c = store.scratch();
  begin(c, store.size());
  for (uint32_t a : g.alts(g.root()))
    expand_session(g, store, store.intern(a, StackStore::kNoStack), out, c);
  std::sort(out.begin(), out.end());
  return out;
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  reset();
}

void Matcher::reset() {
  history_.clear();
  history_.push_back(initial_state(*g_, store_));
}

bool Matcher::run(const StackSet& from, std::string_view bytes, StackSet* to) {
  if (bytes.empty()) {
    if (to) *to = from;
    return true;
  }
  const StackSet* cur = &from;
  for (size_t i = 0; i < bytes.size(); ++i) {
    StackSet& next = (i & 1) ? tmp_b_ : tmp_a_;
    advance(*g_, store_, *cur, uint8_t(bytes[i]), next);
    if (next.empty()) return false;
    cur = &next;
  }
  if (to) *to = *cur;
  return true;
}

bool Matcher::accept(std::string_view bytes) {
  StackSet to;
  if (!run(history_.back(), bytes, &to)) return false;
  history_.push_back(std::move(to));
  return true;
}

bool Matcher::can_accept(std::string_view bytes) {
  return run(history_.back(), bytes, nullptr);  // per token on the sampler's fast path: no copy
}

bool Matcher::can_end() const {
  const StackSet& s = history_.back();
  return std::binary_search(s.begin(), s.end(), StackStore::kNoStack);
}

void Matcher::rollback(size_t n) {
  n = std::min(n, n_steps());
  history_.resize(history_.size() - n);
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.can_end();
}

}  // namespace sluice::grammar
