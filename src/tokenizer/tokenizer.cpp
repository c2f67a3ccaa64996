#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <unordered_map>

#include "gguf/gguf.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/spm.h"
#include "tokenizer/wpm.h"

namespace sluice {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"
constexpr size_t kMaxCachedWord = 64;                   // bytes; longer words are rare

// A byte trie over special-token texts, to find which of them occur in a text at all in one
// pass (O(text x depth)) before the exact, llama.cpp-ordered partitioning passes.
class SpecialTrie {
 public:
  bool empty() const { return node_rank_.size() <= 1; }

  void insert(std::string_view text, int32_t rank) {
    if (text.empty()) return;
    if (node_rank_.empty()) node_rank_.push_back(-1);
    first_[uint8_t(text[0])] = true;
    int32_t node = 0;
    for (char c : text) {
      const uint64_t key = (uint64_t(node) << 8) | uint8_t(c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, int32_t(node_rank_.size())).first;
        node_rank_.push_back(-1);
      }
      node = it->second;
    }
    node_rank_[size_t(node)] = rank;
  }

  // Marks present[rank] for every inserted text occurring in `text`; returns trie steps.
  uint64_t mark_present(std::string_view text, std::vector<uint8_t>& present) const {
    uint64_t steps = 0;
    for (size_t p = 0; p < text.size(); ++p) {
      if (!first_[uint8_t(text[p])]) continue;
      int32_t node = 0;
      for (size_t q = p; q < text.size(); ++q) {
        ++steps;
        auto it = edges_.find((uint64_t(node) << 8) | uint8_t(text[q]));
        if (it == edges_.end()) break;
        node = it->second;
        if (node_rank_[size_t(node)] >= 0) present[size_t(node_rank_[size_t(node)])] = 1;
      }
    }
    return steps;
  }

 private:
  std::array<bool, 256> first_{};
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> node_rank_;               // rank of the token ending here, or -1
};

// A piece of the input: raw text [begin, end) or one special token.
struct Fragment {
  size_t begin = 0, end = 0;
  TokenId token = kNoToken;
};

bool is_c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Word -> ids for the words of one text (keys view the text, so it lives for one call).
// Natural text repeats words constantly; the cache makes each repeat a hash lookup.
// Open addressing, load <= 1/2, grown by doubling.
class WordCache {
 public:
  // Appends the cached ids of `word` and returns true, or returns false.
  bool lookup(std::string_view word, std::vector<TokenId>& out) const {
    if (slots_.empty()) return false;
    const uint64_t h = hash_bytes(word);
    for (uint64_t pos = h & mask_;; pos = (pos + 1) & mask_) {
      const Slot& s = slots_[pos];
      if (s.data == nullptr) return false;
      if (s.hash == h && std::string_view(s.data, s.len) == word) {
        out.insert(out.end(), ids_.begin() + s.off, ids_.begin() + s.off + s.count);
        return true;
      }
    }
  }
  // Records out[from:] as the ids of `word` (not yet cached, not empty).
  void insert(std::string_view word, const std::vector<TokenId>& out, size_t from) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    Slot s{hash_bytes(word), word.data(), uint32_t(word.size()), uint32_t(ids_.size()),
           uint32_t(out.size() - from)};
    ids_.insert(ids_.end(), out.begin() + ptrdiff_t(from), out.end());
    place(s);
    ++size_;
  }
  void clear() {
    slots_.clear();
    ids_.clear();
    size_ = 0;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;  // nullptr: empty slot
    uint32_t len = 0;
    uint32_t off = 0, count = 0;  // ids_[off, off + count)
  };
  void place(const Slot& s) {
    uint64_t pos = s.hash & mask_;
    while (slots_[pos].data != nullptr) pos = (pos + 1) & mask_;
    slots_[pos] = s;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.data != nullptr) place(s);
    }
  }

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
  std::vector<TokenId> ids_;
};

// Per-call buffers.
struct EncodeScratch {
  std::vector<std::string_view> pieces;
  BpeModel::Scratch bpe;
  SpmScratch spm;
  std::string text;
  WordCache cache;
};

// Encodes `word` through the cache: `encode(word)` appends its ids on a miss.
template <class F>
void encode_cached(std::string_view word, WordCache& cache, std::vector<TokenId>& out,
                   EncodeStats* stats, F&& encode) {
  if (stats) ++stats->words;
  if (word.empty() || word.size() > kMaxCachedWord) {
    encode(word);
    return;
  }
  if (cache.lookup(word, out)) {
    if (stats) ++stats->cache_hits;
    return;
  }
  const size_t before = out.size();
  encode(word);
  cache.insert(word, out, before);
}

}  // namespace

struct Tokenizer::Impl {
  std::optional<BpeModel> bpe;
  std::optional<PreTokenizer> pre;
  std::optional<WpmModel> wpm;
  bool spm_split = false;           // spm_can_split_at_spaces(vocab)
  SpecialTrie trie_all;             // every special token (parse_special)
  SpecialTrie trie_user;            // those matched even without parse_special (user-defined)
  std::vector<std::string> pieces;  // rendered piece of every token (render_special = true)

  std::vector<Fragment> partition(const Vocab& vocab, std::string_view text, bool parse_special,
                                  EncodeStats* stats) const;
  Status encode_bpe(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out,
                    EncodeScratch& s, EncodeStats* stats) const;
};

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::create(Vocab vocab) {
  Tokenizer t;
  t.vocab_ = std::make_unique<Vocab>(std::move(vocab));
  t.impl_ = std::make_unique<Impl>();
  const Vocab& v = *t.vocab_;
  Impl& im = *t.impl_;
  switch (v.type()) {
    case VocabType::kBpe: {
      SLUICE_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::build(v));
      im.bpe.emplace(std::move(bpe));
      SLUICE_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::create(v.pre_type()));
      im.pre.emplace(std::move(pre));
      break;
    }
    case VocabType::kWpm: {
      SLUICE_ASSIGN_OR_RETURN(WpmModel wpm, WpmModel::build(v));
      im.wpm.emplace(std::move(wpm));
      break;
    }
    case VocabType::kSpm:
      im.spm_split = spm_can_split_at_spaces(v);
      break;
  }
  const std::vector<TokenId>& specials = v.special_tokens();
  for (size_t rank = 0; rank < specials.size(); ++rank) {
    const TokenId id = specials[rank];
    im.trie_all.insert(v.text(id), int32_t(rank));
    if (!v.has_attr(id, kAttrControl | kAttrUnknown))
      im.trie_user.insert(v.text(id), int32_t(rank));
  }
  im.pieces = build_pieces(v);
  return t;
}

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  SLUICE_ASSIGN_OR_RETURN(Vocab v, Vocab::from_gguf(file));
  return create(std::move(v));
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  return from_gguf(f);
}

// llama.cpp's tokenizer_st_partition: for each special token, longest first, every
// occurrence in every remaining raw fragment is cut out (left to right). Only tokens that
// occur somewhere are visited, so the cost is O(text x (trie depth + tokens present)).
std::vector<Fragment> Tokenizer::Impl::partition(const Vocab& vocab, std::string_view text,
                                                 bool parse_special, EncodeStats* stats) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({0, text.size(), kNoToken});
  const SpecialTrie& trie = parse_special ? trie_all : trie_user;
  if (trie.empty()) return frags;
  const std::vector<TokenId>& specials = vocab.special_tokens();
  std::vector<uint8_t> present(specials.size(), 0);
  const uint64_t steps = trie.mark_present(text, present);
  if (stats) stats->special_steps += steps;

  std::vector<Fragment> next;
  for (size_t rank = 0; rank < specials.size(); ++rank) {
    if (!present[rank]) continue;
    const TokenId id = specials[rank];
    const std::string& tok = vocab.text(id);
    const bool lstrip = vocab.has_attr(id, kAttrLstrip);
    const bool rstrip = vocab.has_attr(id, kAttrRstrip);
    next.clear();
    if (stats) stats->special_steps += frags.size();
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      const std::string_view region = text.substr(0, f.end);
      size_t off = f.begin;
      while (off < f.end) {
        const size_t match = region.find(tok, off);
        if (match == std::string_view::npos) {
          next.push_back({off, f.end, kNoToken});
          break;
        }
        size_t left_end = match;
        if (lstrip) {
          while (left_end > off && is_c_space(text[left_end - 1])) --left_end;
        }
        if (left_end > off) next.push_back({off, left_end, kNoToken});
        next.push_back({match, match + tok.size(), id});
        off = match + tok.size();
        if (rstrip) {
          while (off < f.end && is_c_space(text[off])) ++off;
        }
      }
    }
    frags.swap(next);
  }
  return frags;
}

Status Tokenizer::Impl::encode_bpe(const Vocab& vocab, std::string_view text,
                                   std::vector<TokenId>& out, EncodeScratch& s,
                                   EncodeStats* stats) const {
  SLUICE_RETURN_IF_ERROR(pre->split(text, s.pieces, stats ? &stats->regex_matches : nullptr));
  for (std::string_view word : s.pieces) {
    encode_cached(word, s.cache, out, stats,
                  [&](std::string_view w) { bpe->encode_word(vocab, w, out, s.bpe, stats); });
  }
  return {};
}

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text,
                                               const EncodeOptions& opts) const {
  std::vector<TokenId> out;
  SLUICE_RETURN_IF_ERROR(encode_into(text, opts, out));
  return out;
}

Status Tokenizer::encode_into(std::string_view text, const EncodeOptions& opts,
                              std::vector<TokenId>& out, EncodeStats* stats) const {
  const Vocab& v = *vocab_;
  const bool wpm = v.type() == VocabType::kWpm;
  const bool add_bos = opts.add_special && opts.add_bos.value_or(v.add_bos());
  const bool add_eos = opts.add_special && opts.add_eos.value_or(wpm ? v.add_sep() : v.add_eos());
  const TokenId eos_id = wpm ? v.sep() : v.eos();
  if (add_bos && v.bos() == kNoToken) return make_error("cannot add BOS: the vocabulary has none");
  if (add_eos && eos_id == kNoToken) {
    return make_error("cannot add ", wpm ? "SEP" : "EOS", ": the vocabulary has none");
  }

  const std::vector<Fragment> frags = impl_->partition(v, text, opts.parse_special, stats);
  EncodeScratch s;
  if (add_bos) out.push_back(v.bos());
  bool prev_special = true;  // SPM: a space prefix goes on text at the start or after a token
  for (const Fragment& f : frags) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view frag = text.substr(f.begin, f.end - f.begin);
    switch (v.type()) {
      case VocabType::kSpm: {
        s.text.clear();
        if (v.add_space_prefix() && prev_special) s.text.append(kSpmSpace);
        for (char c : frag) {
          if (c == ' ') {
            s.text.append(kSpmSpace);
          } else {
            s.text.push_back(c);
          }
        }
        s.pieces.clear();
        if (impl_->spm_split) {
          spm_split_at_spaces(s.text, s.pieces);
        } else {
          s.pieces.push_back(s.text);
        }
        s.cache.clear();  // keys view s.text, rebuilt per fragment
        for (std::string_view seg : s.pieces) {
          encode_cached(seg, s.cache, out, stats,
                        [&](std::string_view w) { spm_encode(v, w, out, s.spm, stats); });
        }
        break;
      }
      case VocabType::kBpe:
        SLUICE_RETURN_IF_ERROR(impl_->encode_bpe(v, frag, out, s, stats));
        break;
      case VocabType::kWpm:
        SLUICE_RETURN_IF_ERROR(impl_->wpm->encode(v, frag, out, stats));
        break;
    }
    prev_special = false;
  }
  if (add_eos) out.push_back(eos_id);
  return {};
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& opts) const {
  return decode_tokens(*this, ids, opts);
}

std::string_view Tokenizer::piece(TokenId id, bool render_special) const {
  if (!vocab_->is_valid(id)) return {};
  if (!render_special && vocab_->has_attr(id, kAttrControl | kAttrUnknown)) return {};
  return impl_->pieces[size_t(id)];
}

}  // namespace sluice
