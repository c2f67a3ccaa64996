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
  text_.clear();
  text_end_.assign(1, 0);
  base_.valid = false;
}

StringCheck Matcher::check_of(uint32_t stack, bool& finished) {
  // Memoized per stack id (ids are interned and never change): a stack whose top follows a
  // checked rule has finished its text; one whose parent is in or just after one is inside it.
  // memo: 0 unknown, else 1 + (check << 1 | finished).
  finished = false;
  if (stack == StackStore::kNoStack || stack == StackStore::kBottom) return StringCheck::kNone;
  if (check_memo_.size() < store_.size()) check_memo_.resize(store_.size(), 0);
  path_.clear();
  uint32_t s = stack;
  uint8_t below = 1;  // kNone
  while (s != StackStore::kNoStack && s != StackStore::kBottom) {
    if (check_memo_[s]) {
      below = check_memo_[s];
      break;
    }
    path_.push_back(s);
    s = store_.parent(s);
  }
  for (size_t i = path_.size(); i-- > 0;) {
    const uint32_t id = path_[i];
    const StringCheck here = g_->check_at(store_.pos(id));
    const StringCheck under = StringCheck((below - 1) >> 1);
    below = here != StringCheck::kNone ? uint8_t(1 + (uint8_t(here) << 1 | 1))
                                       : uint8_t(1 + (uint8_t(under) << 1));
    check_memo_[id] = below;
  }
  finished = ((below - 1) & 1) != 0;
  return StringCheck((below - 1) >> 1);
}

const Matcher::CheckBase& Matcher::check_base() {
  if (base_.valid) return base_;
  // A checked text is a JSON string's contents: no raw quote inside, so it starts after the
  // last one.
  const size_t q = text_.rfind('"');
  const size_t begin = q == std::string::npos ? 0 : q + 1;
  base_.decoded.clear();
  base_.raw_done =
      begin + json_unescape_prefix(std::string_view(text_).substr(begin), base_.decoded);
  const size_t dot = base_.decoded.rfind('.');
  base_.label_start = dot == std::string::npos ? 0 : dot + 1;
  base_.valid = true;
  return base_;
}

void Matcher::apply_checks(StackSet& s, std::string_view fresh) {
  // The text after the state's, decoded from the base's last label on: short, whatever the
  // text's length, so a candidate token costs a few label checks per byte.
  bool have_text = false, pending = false;
  size_t length = 0;
  auto keep = [&](uint32_t id) {
    bool finished = false;
    const StringCheck c = check_of(id, finished);
    if (c == StringCheck::kNone) return true;
    if (!have_text) {
      tail_.clear();
      if (size_t q = fresh.rfind('"'); q != std::string_view::npos) {  // a string opened here
        const std::string_view raw = fresh.substr(q + 1);
        pending = json_unescape_prefix(raw, tail_) < raw.size();
        length = tail_.size();
      } else {
        const CheckBase& b = check_base();
        tail_.assign(b.decoded, b.label_start);
        raw_.assign(text_, b.raw_done);
        raw_ += fresh;
        pending = json_unescape_prefix(raw_, tail_) < raw_.size();
        length = b.label_start + tail_.size();
      }
      have_text = true;
    }
    return finished ? !pending && checker_.complete_ok(c, tail_, length)
                    : checker_.prefix_ok(c, tail_, length, pending);
  };
  s.erase(std::remove_if(s.begin(), s.end(), [&](uint32_t id) { return !keep(id); }), s.end());
}

bool Matcher::checked_text(CheckedText& out) {
  out = {};
  bool finished = false, any = false, every = true;
  for (uint32_t id : history_.back()) {
    const StringCheck c = check_of(id, finished);
    if (c == StringCheck::kNone) {
      every = false;
      continue;
    }
    out.check = c;
    any = true;
  }
  if (!any) return false;
  const CheckBase& b = check_base();
  out.length = b.decoded.size();
  out.pending = b.raw_done < text_.size();
  out.every_stack = every;
  return true;
}

bool Matcher::checked_chars_ok(StringCheck c, std::string_view chars) {
  const CheckBase& b = check_base();
  tail_.assign(b.decoded, b.label_start);
  tail_ += chars;
  return checker_.prefix_ok(c, tail_, b.label_start + tail_.size(), false);
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
    if (g_->has_checks() && !next.empty()) apply_checks(next, bytes.substr(0, i + 1));
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
  if (g_->has_checks()) text_ += bytes;
  text_end_.push_back(text_.size());
  base_.valid = false;
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
  text_end_.resize(history_.size());
  text_.resize(text_end_.back());
  base_.valid = false;
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.can_end();
}

}  // namespace sluice::grammar
