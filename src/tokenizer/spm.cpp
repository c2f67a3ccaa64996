#include "tokenizer/spm.h"

#include <algorithm>

#include "base/unicode.h"

namespace sluice {

namespace {

// Heap order: highest score on top, ties to the leftmost pair.
bool bigram_after(const SpmScratch::Bigram& a, const SpmScratch::Bigram& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

// Returns whether a lookup was made.
bool push_bigram(const Vocab& vocab, std::string_view text, SpmScratch& s, int32_t left,
                 int32_t right) {
  if (left < 0 || right < 0) return false;
  const SpmScratch::Sym& l = s.syms[size_t(left)];
  const SpmScratch::Sym& r = s.syms[size_t(right)];
  const uint32_t len = l.len + r.len;  // adjacent symbols are contiguous in `text`
  const TokenId id = vocab.find(text.substr(l.begin, len));
  if (id != kNoToken) {
    s.heap.push_back({vocab.token(id).score, left, right, len});
    std::push_heap(s.heap.begin(), s.heap.end(), bigram_after);
  }
  return true;
}

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out, SpmScratch& s,
                EncodeStats* stats) {
  s.syms.clear();
  s.heap.clear();
  // Characters by lead byte, unvalidated, as llama.cpp (invalid UTF-8 then falls back to
  // byte tokens below).
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(unicode::utf8_claimed_len(uint8_t(text[off])), text.size() - off);
    const int32_t idx = int32_t(s.syms.size());
    s.syms.push_back(
        {idx - 1, off + len == text.size() ? -1 : idx + 1, uint32_t(off), uint32_t(len)});
    off += len;
  }
  if (s.syms.empty()) return;
  uint64_t lookups = 0;
  for (int32_t i = 1; i < int32_t(s.syms.size()); ++i) {
    lookups += push_bigram(vocab, text, s, i - 1, i);
  }

  uint64_t pops = 0;
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), bigram_after);
    const SpmScratch::Bigram b = s.heap.back();
    s.heap.pop_back();
    ++pops;
    SpmScratch::Sym& l = s.syms[size_t(b.left)];
    SpmScratch::Sym& r = s.syms[size_t(b.right)];
    // Both alive and unchanged since queued (a symbol only ever grows).
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) s.syms[size_t(r.next)].prev = b.left;
    lookups += push_bigram(vocab, text, s, l.prev, b.left);
    lookups += push_bigram(vocab, text, s, b.left, l.next);
  }
  if (stats) {
    stats->symbols += s.syms.size();
    stats->heap_pops += pops;
    stats->lookups += lookups;
  }

  // Every merged symbol is a token; a symbol that is not (an unmerged character missing from
  // the vocabulary) becomes byte tokens. (llama.cpp's rev_merge re-segmentation never applies
  // then: it only splits symbols that were produced by merges.)
  for (int32_t i = 0; i >= 0; i = s.syms[size_t(i)].next) {
    const SpmScratch::Sym& sym = s.syms[size_t(i)];
    const std::string_view piece = text.substr(sym.begin, sym.len);
    if (TokenId id = vocab.find(piece); id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      TokenId id = vocab.byte_to_token(uint8_t(c));
      if (id == kNoToken) id = vocab.unk();
      if (id != kNoToken) out.push_back(id);
    }
  }
}

namespace {
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"
}  // namespace

bool spm_can_split_at_spaces(const Vocab& vocab) {
  for (TokenId id = 0; id < vocab.n_tokens(); ++id) {
    const std::string& t = vocab.text(id);
    for (size_t p = t.find(kSpace, 1); p != std::string::npos; p = t.find(kSpace, p + 1)) {
      if (p < kSpace.size() || t.compare(p - kSpace.size(), kSpace.size(), kSpace) != 0) {
        return false;
      }
    }
  }
  return true;
}

void spm_split_at_spaces(std::string_view text, std::vector<std::string_view>& segments) {
  size_t begin = 0;
  for (size_t p = text.find(kSpace, 1); p != std::string_view::npos; p = text.find(kSpace, p + 1)) {
    if (p >= kSpace.size() && text.compare(p - kSpace.size(), kSpace.size(), kSpace) == 0) {
      continue;
    }
    segments.push_back(text.substr(begin, p - begin));
    begin = p;
  }
  if (begin < text.size()) segments.push_back(text.substr(begin));
}

}  // namespace sluice
