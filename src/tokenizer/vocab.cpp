#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "base/log.h"
#include "base/unicode.h"
#include "gguf/gguf.h"

namespace sluice {

namespace {

constexpr std::string_view kKeyPrefix = "tokenizer.ggml.";

// "<｜end▁of▁sentence｜>" (fullwidth bars U+FF5C, U+2581 spaces): DeepSeek's EOS.
constexpr std::string_view kDeepseekEos =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

// Texts llama.cpp takes as EOT when no eot id is given, in the order we prefer them.
constexpr std::array<std::string_view, 10> kEotTexts = {
    "<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>",      "_<EOT>",  kDeepseekEos,    "<end_of_utterance>",
};

// Texts that end generation wherever they occur (llama.cpp special_eog_ids by text).
constexpr std::array<std::string_view, 13> kEogTexts = {
    "<|eot_id|>",      "<|im_end|>",         "<|end|>",    "<|return|>", "<|call|>",
    "<end_of_turn>",   "<|endoftext|>",      "<|eom_id|>", "<EOT>",      "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", kDeepseekEos,
};

uint32_t attr_from_type(int32_t type) {
  switch (GgufTokenType(type)) {
    case GgufTokenType::kUnknown:
      return kAttrUnknown;
    case GgufTokenType::kUnused:
      return kAttrUnused;
    case GgufTokenType::kNormal:
      return kAttrNormal;
    case GgufTokenType::kControl:
      return kAttrControl;
    case GgufTokenType::kUserDefined:
      return kAttrUserDefined;
    case GgufTokenType::kByte:
      return kAttrByte;
    case GgufTokenType::kUndefined:
      return kAttrUndefined;
  }
  return kAttrUndefined;
}

std::string key(std::string_view name) {
  return std::string(kKeyPrefix) + std::string(name);
}

Result<std::optional<int64_t>> opt_int(const GgufFile& f, std::string_view k) {
  if (!f.has(k)) return std::optional<int64_t>();
  SLUICE_ASSIGN_OR_RETURN(int64_t v, f.get_int(k));
  return std::optional<int64_t>(v);
}

Result<std::optional<bool>> opt_bool(const GgufFile& f, std::string_view k) {
  if (!f.has(k)) return std::optional<bool>();
  SLUICE_ASSIGN_OR_RETURN(int64_t v, f.get_int(k));  // bool, or an integer 0/1
  return std::optional<bool>(v != 0);
}

}  // namespace

std::string_view vocab_type_name(VocabType t) {
  switch (t) {
    case VocabType::kSpm:
      return "SPM";
    case VocabType::kBpe:
      return "BPE";
    case VocabType::kWpm:
      return "WPM";
  }
  return "?";
}

Result<Vocab> Vocab::from_gguf(const GgufFile& f) {
  VocabSpec s;
  if (!f.has(key("model"))) {
    return make_error("'", f.path(), "': no tokenizer in file (", key("model"), " is missing)");
  }
  SLUICE_ASSIGN_OR_RETURN(s.model, f.get<std::string>(key("model")));
  SLUICE_ASSIGN_OR_RETURN(s.pre, f.get_or<std::string>(key("pre"), ""));
  SLUICE_ASSIGN_OR_RETURN(s.name, f.get_or<std::string>("general.name", ""));
  if (!f.has(key("tokens"))) {
    return make_error("'", f.path(), "': ", key("tokens"), " is missing");
  }
  SLUICE_ASSIGN_OR_RETURN(s.tokens, f.get_array<std::string>(key("tokens")));
  if (f.has(key("scores"))) {
    Result<std::vector<float>> scores = f.get_array<float>(key("scores"));
    if (scores.ok()) {
      s.scores = std::move(scores).value();
    } else {  // llama.cpp also accepts integer scores
      SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> iscores, f.get_int_array(key("scores")));
      s.scores.assign(iscores.begin(), iscores.end());
    }
  }
  if (f.has(key("token_type"))) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_int_array(key("token_type")));
    s.token_types.assign(types.begin(), types.end());
  }
  if (f.has(key("merges"))) {
    SLUICE_ASSIGN_OR_RETURN(s.merges, f.get_array<std::string>(key("merges")));
  }
  SLUICE_ASSIGN_OR_RETURN(s.bos_id, opt_int(f, key("bos_token_id")));
  SLUICE_ASSIGN_OR_RETURN(s.eos_id, opt_int(f, key("eos_token_id")));
  SLUICE_ASSIGN_OR_RETURN(s.eot_id, opt_int(f, key("eot_token_id")));
  SLUICE_ASSIGN_OR_RETURN(s.eom_id, opt_int(f, key("eom_token_id")));
  SLUICE_ASSIGN_OR_RETURN(s.unk_id, opt_int(f, key("unknown_token_id")));
  // "seperator" is the key's historical spelling in llama.cpp/gguf-py.
  SLUICE_ASSIGN_OR_RETURN(s.sep_id, opt_int(f, key("seperator_token_id")));
  if (!s.sep_id) {
    SLUICE_ASSIGN_OR_RETURN(s.sep_id, opt_int(f, key("separator_token_id")));
  }
  SLUICE_ASSIGN_OR_RETURN(s.pad_id, opt_int(f, key("padding_token_id")));
  SLUICE_ASSIGN_OR_RETURN(s.mask_id, opt_int(f, key("mask_token_id")));
  SLUICE_ASSIGN_OR_RETURN(s.add_bos, opt_bool(f, key("add_bos_token")));
  SLUICE_ASSIGN_OR_RETURN(s.add_eos, opt_bool(f, key("add_eos_token")));
  SLUICE_ASSIGN_OR_RETURN(s.add_sep, opt_bool(f, key("add_sep_token")));
  SLUICE_ASSIGN_OR_RETURN(s.add_space_prefix, opt_bool(f, key("add_space_prefix")));
  SLUICE_ASSIGN_OR_RETURN(s.remove_extra_whitespaces, opt_bool(f, key("remove_extra_whitespaces")));
  SLUICE_ASSIGN_OR_RETURN(s.normalizer_lowercase, opt_bool(f, key("normalizer.lowercase")));
  SLUICE_ASSIGN_OR_RETURN(s.normalizer_strip_accents, opt_bool(f, key("normalizer.strip_accents")));
  Result<Vocab> v = from_spec(std::move(s));
  if (!v.ok()) return make_error("'", f.path(), "': ", v.message());
  return v;
}

Result<Vocab> Vocab::from_spec(VocabSpec spec) {
  Vocab v;
  SLUICE_RETURN_IF_ERROR(v.init(std::move(spec)));
  return v;
}

Status Vocab::init_types(const VocabSpec& s) {
  model_ = s.model;
  pre_ = s.pre;
  SpecialTokens& sp = special_;
  if (s.model == "llama") {
    type_ = VocabType::kSpm;
    sp.bos = 1;
    sp.eos = 2;
    sp.unk = 0;
    add_space_prefix_ = true;
    clean_spaces_ = false;
    add_bos_ = true;
  } else if (s.model == "bert") {
    type_ = VocabType::kWpm;
    sp.bos = 101;
    sp.unk = 100;
    sp.sep = 102;
    sp.pad = 0;
    sp.mask = 103;
    add_sep_ = true;
    clean_spaces_ = true;
    add_bos_ = true;
  } else if (s.model == "gpt2") {
    type_ = VocabType::kBpe;
    sp.bos = 11;
    sp.eos = 11;
    clean_spaces_ = true;
    if (s.merges.empty()) return make_error("BPE vocabulary without tokenizer.ggml.merges");
    if (s.pre.empty()) {
      SLUICE_LOG(kWarn,
                 "tokenizer.ggml.pre is missing: using the 'default' pre-tokenizer; "
                 "tokenization may not match the model's (regenerate the GGUF)");
    }
    SLUICE_ASSIGN_OR_RETURN(PreConfig pc, pre_tokenizer_config(s.pre));
    pre_type_ = pc.type;
    ignore_merges_ = pc.ignore_merges;
    clean_spaces_ = pc.clean_spaces;
    add_bos_ = pc.add_bos;
    if (pc.no_bos) sp.bos = kNoToken;
  } else {
    return make_error("unsupported tokenizer model '", s.model,
                      "' (tokenizer.ggml.model; sluice supports llama, gpt2 and bert)");
  }
  if (s.add_space_prefix) add_space_prefix_ = *s.add_space_prefix;
  if (s.remove_extra_whitespaces) remove_extra_whitespaces_ = *s.remove_extra_whitespaces;
  wpm_lowercase_ = s.normalizer_lowercase.value_or(true);
  wpm_strip_accents_ = s.normalizer_strip_accents.value_or(wpm_lowercase_);
  return {};
}

Status Vocab::init(VocabSpec s) {
  SLUICE_RETURN_IF_ERROR(init_types(s));

  const size_t n = s.tokens.size();
  if (n == 0) return make_error("empty vocabulary (tokenizer.ggml.tokens)");
  if (n > size_t(INT32_MAX)) return make_error("vocabulary too large: ", n, " tokens");
  if (!s.scores.empty() && s.scores.size() < n) {
    return make_error("tokenizer.ggml.scores has ", s.scores.size(), " entries for ", n, " tokens");
  }
  if (!s.token_types.empty() && s.token_types.size() < n) {
    return make_error("tokenizer.ggml.token_type has ", s.token_types.size(), " entries for ", n,
                      " tokens");
  }
  tokens_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tokens_[i];
    t.text = std::move(s.tokens[i]);
    if (t.text.empty()) {
      SLUICE_LOG(kWarn, "empty token at index " + std::to_string(i));
      t.text = "[EMPTY_" + std::to_string(i) + "]";
    }
    t.score = s.scores.empty() ? 0.0f : s.scores[i];
    t.attr = s.token_types.empty() ? kAttrNormal : attr_from_type(s.token_types[i]);
    max_token_len_ = std::max(max_token_len_, t.text.size());
  }
  size_t capacity = 16;
  while (capacity < 2 * n) capacity *= 2;
  index_.assign(capacity, Slot{});
  index_mask_ = capacity - 1;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = hash_bytes(tokens_[i].text);
    uint64_t pos = h & index_mask_;
    for (;; pos = (pos + 1) & index_mask_) {
      Slot& slot = index_[pos];
      if (slot.id == kNoToken) {
        slot = {uint32_t(h >> 32), TokenId(i)};
        break;
      }
      if (slot.hash == uint32_t(h >> 32) && tokens_[size_t(slot.id)].text == tokens_[i].text) {
        return make_error("duplicate token in vocabulary: '", tokens_[i].text, "' has ids ",
                          slot.id, " and ", i);
      }
    }
  }
  merges_ = std::move(s.merges);

  // Special ids: defaults out of range are dropped; metadata ids out of range are ignored.
  struct IdKey {
    TokenId* id;
    const std::optional<int64_t>* value;
    const char* key;
  };
  SpecialTokens& sp = special_;
  const IdKey ids[] = {
      {&sp.bos, &s.bos_id, "bos_token_id"},     {&sp.eos, &s.eos_id, "eos_token_id"},
      {&sp.eot, &s.eot_id, "eot_token_id"},     {&sp.eom, &s.eom_id, "eom_token_id"},
      {&sp.unk, &s.unk_id, "unknown_token_id"}, {&sp.sep, &s.sep_id, "seperator_token_id"},
      {&sp.pad, &s.pad_id, "padding_token_id"}, {&sp.mask, &s.mask_id, "mask_token_id"},
  };
  for (const IdKey& k : ids) {
    if (*k.id != kNoToken && !is_valid(*k.id)) *k.id = kNoToken;
    if (!k.value->has_value()) continue;
    const int64_t v = **k.value;
    if (v >= 0 && v < int64_t(n)) {
      *k.id = TokenId(v);
    } else if (v == -1 || v == 0xffffffffLL) {
      *k.id = kNoToken;  // converters write -1 (as u32: 0xffffffff) for "no such token"
    } else {
      SLUICE_LOG(kWarn, std::string("tokenizer.ggml.") + k.key + " = " + std::to_string(v) +
                            " is out of range (vocabulary of " + std::to_string(n) +
                            " tokens); keeping the default");
    }
  }

  if (s.add_bos) add_bos_ = *s.add_bos;
  if (s.add_eos) add_eos_ = *s.add_eos;
  if (s.add_sep) add_sep_ = *s.add_sep;
  if (add_bos_ && sp.bos == kNoToken) {
    return make_error("tokenizer.ggml.add_bos_token is true, but there is no BOS token");
  }
  if (add_eos_ && sp.eos == kNoToken) {
    return make_error("tokenizer.ggml.add_eos_token is true, but there is no EOS token");
  }
  if (add_sep_ && sp.sep == kNoToken) {
    return make_error("tokenizer.ggml.add_sep_token is true, but there is no SEP token");
  }

  detect_eog();

  for (TokenId id = 0; id < n_tokens(); ++id) {
    if (has_attr(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens_.push_back(id);
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](TokenId a, TokenId b) { return text(a).size() > text(b).size(); });
  apply_name_fixes(s.name);
  return {};
}

void Vocab::detect_eog() {
  SpecialTokens& sp = special_;
  auto mark_control = [&](TokenId id) {
    if (!has_attr(id, kAttrControl)) {
      SLUICE_LOG(kWarn, "token " + std::to_string(id) + " '" + text(id) +
                            "' looks like a control token but is not typed so; treating it as one");
      tokens_[size_t(id)].attr |= kAttrControl;
    }
  };
  if (sp.eot == kNoToken) {
    for (std::string_view t : kEotTexts) {
      if (TokenId id = find(t); id != kNoToken) {
        sp.eot = id;
        mark_control(id);
        break;
      }
    }
  }
  if (sp.eom == kNoToken) {
    if (TokenId id = find("<|eom_id|>"); id != kNoToken) {
      sp.eom = id;
      mark_control(id);
    }
  }
  // Control tokens that mention "unused" are unused (llama.cpp does this too).
  for (TokenData& t : tokens_) {
    if ((t.attr & kAttrControl) && t.text.find("unused") != std::string::npos) {
      t.attr |= kAttrUnused;
    }
  }
  eog_ids_.clear();
  for (std::string_view t : kEogTexts) {
    if (TokenId id = find(t); id != kNoToken) {
      eog_ids_.push_back(id);
      mark_control(id);
    }
  }
  for (TokenId id : {sp.eos, sp.eot, sp.eom}) {
    if (id != kNoToken) eog_ids_.push_back(id);
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
  // gpt-oss (harmony): with <|return|> and <|call|> present, <|end|> only ends a message.
  TokenId end = find("<|end|>");
  if (end != kNoToken && find("<|return|>") != kNoToken && find("<|call|>") != kNoToken) {
    eog_ids_.erase(std::remove(eog_ids_.begin(), eog_ids_.end(), end), eog_ids_.end());
    tokens_[size_t(end)].attr = kAttrUserDefined;
  }
}

void Vocab::apply_name_fixes(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  // Phi-3: special tokens swallow whitespace on their right (except <unk>, <s>, <|endoftext|>).
  if (lower.find("phi-3") != std::string::npos || lower.find("phi3") != std::string::npos) {
    for (TokenId id : special_tokens_) tokens_[size_t(id)].attr |= kAttrRstrip;
    if (TokenId id = find("</s>"); id != kNoToken) tokens_[size_t(id)].attr |= kAttrRstrip;
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (TokenId id = find(t); id != kNoToken) tokens_[size_t(id)].attr &= ~kAttrRstrip;
    }
  }
}

TokenId Vocab::find(std::string_view t) const {
  if (index_.empty()) return kNoToken;
  const uint64_t h = hash_bytes(t);
  const uint32_t tag = uint32_t(h >> 32);
  for (uint64_t pos = h & index_mask_;; pos = (pos + 1) & index_mask_) {
    const Slot& slot = index_[pos];
    if (slot.id == kNoToken) return kNoToken;
    if (slot.hash == tag && tokens_[size_t(slot.id)].text == t) return slot.id;
  }
}

bool Vocab::is_eog(TokenId id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

TokenId Vocab::byte_to_token(uint8_t byte) const {
  if (type_ == VocabType::kSpm) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char buf[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
    if (TokenId id = find(std::string_view(buf, 6)); id != kNoToken) return id;
    const char c = char(byte);
    return find(std::string_view(&c, 1));
  }
  return find(unicode::byte_to_gpt2_utf8(byte));
}

int Vocab::token_to_byte(TokenId id) const {
  if (!is_valid(id) || !has_attr(id, kAttrByte)) return -1;
  const std::string& t = text(id);
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace sluice
