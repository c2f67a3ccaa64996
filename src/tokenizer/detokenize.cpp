#include "tokenizer/detokenize.h"

#include "base/unicode.h"

namespace sluice {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

std::string replace_spm_spaces(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

// GPT-2 alphabet -> bytes. Characters outside the alphabet (never in a well-formed byte-level
// vocabulary) are kept as their UTF-8.
std::string decode_byte_level(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unicode::DecodedCp d = unicode::decode_utf8(text, i);
    const int b = d.valid ? unicode::gpt2_cp_to_byte(d.cp) : -1;
    if (b >= 0) {
      out.push_back(char(b));
    } else {
      out.append(text, i, d.len);
    }
    i += d.len;
  }
  return out;
}

// Removes the first character if it is a space; returns whether anything was left to look at.
std::string_view strip_one_space(std::string_view p) {
  return !p.empty() && p.front() == ' ' ? p.substr(1) : p;
}

}  // namespace

std::vector<std::string> build_pieces(const Vocab& vocab) {
  std::vector<std::string> pieces(size_t(vocab.n_tokens()));
  const bool bpe = vocab.type() == VocabType::kBpe;
  for (TokenId id = 0; id < vocab.n_tokens(); ++id) {
    const std::string& text = vocab.text(id);
    std::string& p = pieces[size_t(id)];
    if (vocab.has_attr(id, kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      p = text;
    } else if (vocab.has_attr(id, kAttrNormal)) {
      p = bpe ? decode_byte_level(text) : replace_spm_spaces(text);
    } else if (vocab.has_attr(id, kAttrByte)) {
      const int b = vocab.token_to_byte(id);
      if (b >= 0) p.assign(1, char(b));
    }
    // Unused and undefined tokens render as nothing (as llama.cpp).
  }
  return pieces;
}

std::string clean_up_spaces(std::string_view in) {
  // Three passes as llama.cpp's detokenize, each a left-to-right rewrite.
  std::string a;
  a.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a.push_back(x);
  }
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    b.push_back(x);
    if (x == '\'' && i > 0 && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.erase(b.size() - 2, 1);  // the space before
      ++i;                       // and the one after
    }
  }
  std::string c;
  c.reserve(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      const char x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) {
        c.pop_back();
      }
    }
    c.push_back(x);
  }
  return c;
}

std::string decode_tokens(const Tokenizer& tok, std::span<const TokenId> ids,
                          const DecodeOptions& opts) {
  const Vocab& v = tok.vocab();
  if (opts.remove_special) {
    if (v.add_bos() && !ids.empty() && ids.front() == v.bos()) ids = ids.subspan(1);
    if (v.add_eos() && !ids.empty() && ids.back() == v.eos()) ids = ids.first(ids.size() - 1);
  }
  std::string out;
  bool strip = v.add_space_prefix();
  for (TokenId id : ids) {
    std::string_view p = tok.piece(id, opts.render_special);
    if (p.empty()) continue;
    if (strip && out.empty()) p = strip_one_space(p);
    strip = false;
    out.append(p);
  }
  if (opts.clean_spaces.value_or(v.clean_spaces())) out = clean_up_spaces(out);
  return out;
}

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, DecodeOptions opts)
    : tok_(&tok), opts_(opts), strip_space_(tok.vocab().add_space_prefix()) {}

void StreamingDecoder::reset() {
  pending_.clear();
  strip_space_ = tok_->vocab().add_space_prefix();
}

std::string StreamingDecoder::push(TokenId id) {
  std::string_view p = tok_->piece(id, opts_.render_special);
  if (p.empty()) return {};
  if (strip_space_) p = strip_one_space(p);
  strip_space_ = false;
  pending_.append(p);
  // Hold back a trailing incomplete character; everything before it is final.
  const size_t hold = unicode::utf8_incomplete_tail(pending_);
  const std::string_view ready = std::string_view(pending_).substr(0, pending_.size() - hold);
  std::string out = unicode::sanitize_utf8(ready);
  pending_.erase(0, ready.size());
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace sluice
