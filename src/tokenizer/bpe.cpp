#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>

#include "base/unicode.h"

namespace sluice {

namespace {

uint64_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

// Heap order: lowest rank on top, ties to the leftmost pair.
bool bigram_after(const BpeModel::Scratch::Bigram& a, const BpeModel::Scratch::Bigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

}  // namespace

Result<BpeModel> BpeModel::build(const Vocab& vocab) {
  BpeModel m;
  m.n_tokens_ = vocab.n_tokens();
  m.ignore_merges_ = vocab.ignore_merges();

  // Strings that are not tokens but occur in merges get sids from n_tokens up.
  std::unordered_map<std::string, int32_t> extra;
  int32_t next_sid = m.n_tokens_;
  auto intern = [&](std::string_view s) -> int32_t {
    if (TokenId id = vocab.find(s); id != kNoToken) return id;
    auto [it, inserted] = extra.emplace(std::string(s), next_sid);
    if (inserted) ++next_sid;
    return it->second;
  };

  const std::vector<std::string>& merges = vocab.merges();
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, merges.size() * 2));
  m.keys_.assign(capacity, kEmptyKey);
  m.vals_.assign(capacity, Merge{0, 0});
  m.mask_ = capacity - 1;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    const size_t sp = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos) continue;  // malformed: llama.cpp ranks ("", "") - unusable
    const std::string_view left(line.data(), sp);
    const std::string_view right(line.data() + sp + 1, line.size() - sp - 1);
    if (right.empty()) continue;
    if (rank > size_t(INT32_MAX)) return make_error("too many BPE merges");
    const int32_t l = intern(left), r = intern(right);
    joined.assign(left);
    joined.append(right);
    const int32_t res = intern(joined);
    if (!m.find_merge(l, r)) m.insert_merge(l, r, Merge{int32_t(rank), res});
    ++m.n_merges_;
  }
  for (int b = 0; b < 256; ++b) {
    const std::string_view ch = unicode::byte_to_gpt2_utf8(uint8_t(b));
    if (TokenId id = vocab.find(ch); id != kNoToken) {
      m.byte_sid_[b] = id;
    } else if (auto it = extra.find(std::string(ch)); it != extra.end()) {
      m.byte_sid_[b] = it->second;
    } else {
      m.byte_sid_[b] = -1;
    }
  }
  return m;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = hash_key(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) return &vals_[i];
    if (keys_[i] == kEmptyKey) return nullptr;
  }
}

void BpeModel::insert_merge(int32_t left, int32_t right, Merge m) {
  const uint64_t key = pair_key(left, right);
  uint64_t i = hash_key(key) & mask_;
  while (keys_[i] != kEmptyKey) i = (i + 1) & mask_;
  keys_[i] = key;
  vals_[i] = m;
}

bool BpeModel::push_bigram(Scratch& s, int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return false;
  const int32_t ls = s.syms[size_t(left)].sid, rs = s.syms[size_t(right)].sid;
  if (ls < 0 || rs < 0) return false;
  const Merge* m = find_merge(ls, rs);
  if (m) {
    s.heap.push_back({m->rank, left, right, ls, rs, m->result});
    std::push_heap(s.heap.begin(), s.heap.end(), bigram_after);
  }
  return true;
}

void BpeModel::emit(const Vocab& vocab, std::string_view word, const Scratch::Sym& sym,
                    std::vector<TokenId>& out) const {
  if (sym.sid >= 0 && sym.sid < n_tokens_) {
    out.push_back(sym.sid);
    return;
  }
  // Not a token: llama.cpp looks up each *byte* of the GPT-2 encoded text on its own, which
  // finds only the printable-ASCII ones; the rest are dropped.
  for (uint32_t i = sym.begin; i < sym.end; ++i) {
    for (char c : unicode::byte_to_gpt2_utf8(uint8_t(word[i]))) {
      if (TokenId id = vocab.find(std::string_view(&c, 1)); id != kNoToken) out.push_back(id);
    }
  }
}

void BpeModel::encode_word(const Vocab& vocab, std::string_view word, std::vector<TokenId>& out,
                           Scratch& s, EncodeStats* stats) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    s.encoded.clear();
    for (char c : word) s.encoded.append(unicode::byte_to_gpt2_utf8(uint8_t(c)));
    if (TokenId id = vocab.find(s.encoded); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  const int32_t n = int32_t(word.size());
  s.syms.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    s.syms[size_t(i)] = {byte_sid_[uint8_t(word[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1,
                         uint32_t(i), uint32_t(i + 1)};
  }
  s.heap.clear();
  uint64_t lookups = 0;
  for (int32_t i = 1; i < n; ++i) lookups += push_bigram(s, i - 1, i);

  uint64_t pops = 0;
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), bigram_after);
    const Scratch::Bigram b = s.heap.back();
    s.heap.pop_back();
    ++pops;
    Scratch::Sym& l = s.syms[size_t(b.left)];
    Scratch::Sym& r = s.syms[size_t(b.right)];
    // Stale: one side was merged away or grew since the pair was queued.
    if (l.sid != b.left_sid || r.sid != b.right_sid) continue;
    l.sid = b.result;
    l.end = r.end;
    l.next = r.next;
    r.sid = kDead;
    if (r.next >= 0) s.syms[size_t(r.next)].prev = b.left;
    lookups += push_bigram(s, l.prev, b.left);
    lookups += push_bigram(s, b.left, l.next);
  }
  if (stats) {
    stats->symbols += uint64_t(n);
    stats->heap_pops += pops;
    stats->lookups += lookups;
  }
  for (int32_t i = 0; i >= 0; i = s.syms[size_t(i)].next) emit(vocab, word, s.syms[size_t(i)], out);
}

}  // namespace sluice
