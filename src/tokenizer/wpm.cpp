#include "tokenizer/wpm.h"

#include <algorithm>

#include "base/unicode.h"

namespace sluice {

namespace {

// Whitespace first (\t \n \r are also Cc, hence group 2 takes one character at a time);
// then what BERT's cleanup drops (NUL, U+FFFD, control and format characters); nonspacing
// marks; then the characters that are words of their own: Unicode punctuation, every ASCII
// non-alphanumeric printable, CJK ideographs (the ranges of HF's BertPreTokenizer, including its
// 0x2B920 quirk).
constexpr const char* kWpmClasses =
    R"((\s+)|([\x{0}\x{FFFD}\p{Cc}\p{Cf}\p{Co}\p{Cs}])|(\p{Mn}+)|)"
    R"(([\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E})"
    R"(\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F})"
    R"(\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]))";

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581

void append_text(std::string& word, std::string_view s, bool lowercase) {
  if (!lowercase) {
    word.append(s);
    return;
  }
  for (size_t i = 0; i < s.size();) {
    const unicode::DecodedCp d = unicode::decode_utf8(s, i);
    unicode::append_utf8(word, unicode::to_lower(d.cp));
    i += d.len;
  }
}

}  // namespace

Result<WpmModel> WpmModel::build(const Vocab&) {
  WpmModel m;
  SLUICE_ASSIGN_OR_RETURN(m.classes_, Regex::compile(kWpmClasses));
  return m;
}

Status WpmModel::split_words(const Vocab& vocab, std::string_view text,
                             std::vector<std::string>& words, EncodeStats* stats) const {
  words.clear();
  // Normalize to valid UTF-8 first (invalid bytes become U+FFFD, which is then dropped).
  std::string norm;
  norm.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unicode::DecodedCp d = unicode::decode_utf8(text, i);
    if (vocab.wpm_strip_accents()) {
      unicode::append_stripped_nfd(norm, d.cp);
    } else {
      unicode::append_utf8(norm, d.cp);
    }
    i += d.len;
  }
  if (stats) stats->symbols += norm.size();
  const bool lower = vocab.wpm_lowercase();
  std::string cur;
  auto finish = [&] {
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
  };
  Regex::Scanner scan(classes_);
  for (size_t pos = 0; pos < norm.size();) {
    size_t b = 0, e = 0;
    int group = 0;
    if (stats) ++stats->regex_matches;
    SLUICE_ASSIGN_OR_RETURN(bool found, scan.find(norm, pos, b, e, &group));
    if (!found) b = e = norm.size();
    append_text(cur, std::string_view(norm).substr(pos, b - pos), lower);  // ordinary chars
    if (!found) break;
    const std::string_view m = std::string_view(norm).substr(b, e - b);
    switch (group) {
      case 1:  // whitespace ends a word
        finish();
        break;
      case 2:  // dropped
        break;
      case 3:  // accents: dropped when stripping, else ordinary
        if (!vocab.wpm_strip_accents()) append_text(cur, m, lower);
        break;
      default:  // a word of its own
        finish();
        append_text(cur, m, lower);
        finish();
        break;
    }
    pos = e;
  }
  finish();
  return {};
}

void WpmModel::encode_word(const Vocab& vocab, std::string_view word, std::string& buf,
                           std::vector<TokenId>& out, EncodeStats* stats) {
  buf.assign(kWordStart);
  buf.append(word);
  const std::string_view w = buf;
  const size_t n = w.size();
  const size_t max_len = vocab.max_token_len();
  const size_t start = out.size();
  for (size_t i = 0; i < n;) {
    size_t j = std::min(n, i + max_len);
    TokenId id = kNoToken;
    for (; j > i; --j) {
      if (stats) ++stats->lookups;
      id = vocab.find(w.substr(i, j - i));
      if (id != kNoToken) break;
    }
    if (id == kNoToken) {  // some position matches nothing: the word is unknown
      out.resize(start);
      break;
    }
    out.push_back(id);
    i = j;
  }
  if (out.size() == start && vocab.unk() != kNoToken) out.push_back(vocab.unk());
}

Status WpmModel::encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out,
                        EncodeStats* stats) const {
  std::vector<std::string> words;
  SLUICE_RETURN_IF_ERROR(split_words(vocab, text, words, stats));
  std::string buf;
  for (const std::string& w : words) {
    if (stats) ++stats->words;
    encode_word(vocab, w, buf, out, stats);
  }
  return {};
}

}  // namespace sluice
