#include "tokenizer/hf_import.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/pretokenize.h"

namespace sluice {

namespace {

using json = nlohmann::json;

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// The names the importer writes, one per regex family (first match wins; several
// `tokenizer.ggml.pre` names share regexes and differ only in flags llama.cpp keys on them).
constexpr const char* kPreNamesByPreference[] = {
    "gpt-2",       "llama-bpe",    "qwen2",          "qwen35", "gpt-4o",     "tekken",
    "deepseek-v3", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",  "seed-coder",
    "bailingmoe",  "poro-chat",    "viking",         "jais-2", "exaone-moe", "ufakzeka",
    "laguna",      "minicpm5",     "spark2_5",       "youtu",  "tiny_aya",   "default",
};

// GPT-2's regex, which ByteLevel(use_regex = true) applies.
constexpr const char* kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<json> parse(std::string_view text, std::string_view what) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return make_error(what, " is not valid JSON: ", e.what());
  }
}

// A string, or the "content" of an AddedToken object (tokenizer_config.json writes both).
std::string token_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return {};
}

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(std::string_view t) {
  auto starts = [&](std::string_view p) { return t.substr(0, p.size()) == p; };
  auto ends = [&](std::string_view s) {
    return t.size() >= s.size() && t.substr(t.size() - s.size()) == s;
  };
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts("<|") && ends("|>")) return true;
  if (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>")) return true;  // <｜...｜> (deepseek)
  return starts("<unused") && ends(">");
}

bool is_byte_token(std::string_view t) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// Depth-first list of the pre-tokenizer's (or normalizer's, decoder's) components.
void flatten(const json& node, std::vector<const json*>& out) {
  if (!node.is_object()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const char* list : {"pretokenizers", "normalizers", "decoders"}) {
      if (node.contains(list) && node[list].is_array()) {
        for (const json& child : node[list]) flatten(child, out);
      }
    }
    return;
  }
  out.push_back(&node);
}

struct PreTokenizerInfo {
  bool byte_level = false;
  std::vector<std::string> regexes;  // in order of application
};

Result<PreTokenizerInfo> read_pre_tokenizer(const json& root) {
  PreTokenizerInfo info;
  std::vector<const json*> parts;
  if (root.contains("pre_tokenizer")) flatten(root["pre_tokenizer"], parts);
  for (const json* p : parts) {
    const std::string type = p->value("type", "");
    if (type == "ByteLevel") {
      info.byte_level = true;
      if (p->value("use_regex", true)) info.regexes.push_back(kByteLevelRegex);
    } else if (type == "Split") {
      const json& pattern = p->value("pattern", json::object());
      if (!pattern.contains("Regex") || !pattern["Regex"].is_string()) {
        // A string Split (Gemma's " " after the normalizer removed every space) is harmless
        // only in SentencePiece-style vocabularies; the caller decides.
        continue;
      }
      if (p->value("behavior", "") != "Isolated" || p->value("invert", false)) {
        return make_error("pre_tokenizer Split with behavior '", p->value("behavior", ""),
                          "' and invert ", p->value("invert", false),
                          " is not supported (only Isolated, not inverted)");
      }
      info.regexes.push_back(pattern["Regex"].get<std::string>());
    } else if (type == "Digits" || type == "Punctuation" || type == "Whitespace" ||
               type == "WhitespaceSplit" || type == "BertPreTokenizer") {
      return make_error("pre_tokenizer '", type,
                        "' is not supported (sluice imports Split regexes and ByteLevel)");
    }
  }
  return info;
}

// tokenizer.ggml.pre for a list of regexes.
Result<std::string> pre_name_for(const std::vector<std::string>& regexes) {
  for (const char* name : kPreNamesByPreference) {
    Result<PreConfig> c = pre_tokenizer_config(name);
    if (c.ok() && pre_tokenizer_patterns(c->type) == regexes) return std::string(name);
  }
  std::string list;
  for (const std::string& r : regexes) list += "\n  " + r;
  return make_error("no tokenizer.ggml.pre that sluice knows has these pre-tokenizer regexes:",
                    list);
}

// Whether the normalizer maps ' ' to '▁', and whether it prepends '▁' (SentencePiece's
// add_dummy_prefix).
struct SpmNormalizer {
  bool escapes_spaces = false;
  bool prepends_space = false;
};

SpmNormalizer read_spm_normalizer(const json& root) {
  SpmNormalizer n;
  std::vector<const json*> parts;
  if (root.contains("normalizer")) flatten(root["normalizer"], parts);
  if (root.contains("pre_tokenizer")) flatten(root["pre_tokenizer"], parts);
  for (const json* p : parts) {
    const std::string type = p->value("type", "");
    if (type == "Replace") {
      const json& pattern = p->value("pattern", json::object());
      if (pattern.value("String", "") == " " && p->value("content", "") == kSpace) {
        n.escapes_spaces = true;
      }
    } else if (type == "Prepend" && p->value("prepend", "") == kSpace) {
      n.prepends_space = true;
    } else if (type == "Metaspace") {
      n.escapes_spaces = true;
      const std::string scheme = p->value("prepend_scheme", "");
      n.prepends_space =
          scheme == "always" || scheme == "first" || p->value("add_prefix_space", false);
    }
  }
  return n;
}

// Normalizers change the text before anything else; sluice, like llama.cpp, applies none, so
// only those the encoders reproduce (' ' -> '▁', a '▁' prefix) or that llama.cpp ignores too
// (NFC) are accepted.
Status check_normalizer(const json& root) {
  std::vector<const json*> parts;
  if (root.contains("normalizer")) flatten(root["normalizer"], parts);
  for (const json* p : parts) {
    const std::string type = p->value("type", "");
    const bool space_escape = type == "Replace" &&
                              p->value("pattern", json::object()).value("String", "") == " " &&
                              p->value("content", "") == kSpace;
    const bool space_prefix = type == "Prepend" && p->value("prepend", "") == kSpace;
    if (type != "NFC" && !space_escape && !space_prefix) {
      return make_error("normalizer ", p->dump(),
                        " is not supported (sluice applies no normalizer; accepted are NFC, "
                        "Replace ' ' -> '\u2581' and Prepend '\u2581')");
    }
  }
  return {};
}

// "a b" or ["a", "b"] -> the two halves.
Result<std::pair<std::string, std::string>> merge_pair(const json& m, size_t rank) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ', 1);
    if (sp != std::string::npos) return std::pair(s.substr(0, sp), s.substr(sp + 1));
  }
  return make_error("model.merges[", rank,
                    "] is neither \"left right\" nor [left, right]: ", m.dump());
}

// Special ids and add_bos/add_eos from tokenizer_config.json (gguf-py SpecialVocab).
void read_config(const json& config, const std::unordered_map<std::string, int64_t>& ids,
                 VocabSpec& s) {
  auto id_of = [&](const char* key) -> std::optional<int64_t> {
    if (!config.contains(key)) return std::nullopt;
    auto it = ids.find(token_string(config[key]));
    if (it == ids.end()) return std::nullopt;
    return it->second;
  };
  s.bos_id = id_of("bos_token");
  s.eos_id = id_of("eos_token");
  s.unk_id = id_of("unk_token");
  s.pad_id = id_of("pad_token");
  s.sep_id = id_of("sep_token");
  s.mask_id = id_of("mask_token");
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    s.add_bos = config["add_bos_token"].get<bool>();
  }
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
    s.add_eos = config["add_eos_token"].get<bool>();
  }
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error("cannot read '", path, "'");
  return ss.str();
}

Result<VocabSpec> import_json(std::string_view tokenizer_json,
                              std::string_view tokenizer_config_json) {
  SLUICE_ASSIGN_OR_RETURN(json root, parse(tokenizer_json, "tokenizer.json"));
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    return make_error("tokenizer.json has no \"model\" object");
  }
  const json& model = root["model"];
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE") {
    return make_error("tokenizer.json model type '", type,
                      "' is not supported (sluice imports BPE: byte-level as Qwen and gpt-oss, "
                      "or SentencePiece-style with byte_fallback as Gemma 3)");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object() || model["vocab"].empty()) {
    return make_error("tokenizer.json model.vocab is missing or empty");
  }
  if (!model.contains("merges") || !model["merges"].is_array() || model["merges"].empty()) {
    return make_error("tokenizer.json model.merges is missing or empty (a BPE model needs them)");
  }

  SLUICE_ASSIGN_OR_RETURN(PreTokenizerInfo pre, read_pre_tokenizer(root));
  SLUICE_RETURN_IF_ERROR(check_normalizer(root));
  const SpmNormalizer spm_norm = read_spm_normalizer(root);
  const bool byte_fallback = model.value("byte_fallback", false);
  const bool spm_style = !pre.byte_level && (byte_fallback || spm_norm.escapes_spaces);
  if (!pre.byte_level && !spm_style) {
    return make_error(
        "tokenizer.json BPE is neither byte-level (a ByteLevel pre_tokenizer) nor "
        "SentencePiece-style (byte_fallback or ' ' -> '\xE2\x96\x81'); sluice "
        "cannot tokenize it as the model does");
  }
  if (spm_style && !pre.regexes.empty()) {
    return make_error(
        "tokenizer.json: a SentencePiece-style BPE with Split regexes is not "
        "supported (llama.cpp's 'gemma4' style)");
  }

  // Ids: the model's vocab, then added tokens (which may repeat vocab entries).
  std::unordered_map<std::string, int64_t> ids;
  int64_t n = 0;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX) {
      return make_error("tokenizer.json model.vocab['", text, "'] is not a token id: ", id.dump());
    }
    ids.emplace(text, id.get<int64_t>());
    n = std::max(n, id.get<int64_t>() + 1);
  }
  const json added = root.value("added_tokens", json::array());
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() >= INT32_MAX) {
      return make_error("tokenizer.json added_tokens entry without id and content: ", a.dump());
    }
    n = std::max(n, a["id"].get<int64_t>() + 1);
  }
  // Ids are dense in real files; holes become "[PADi]" tokens, as llama.cpp's converter makes
  // them, but a stray huge id must not allocate billions of them.
  const int64_t n_listed = int64_t(ids.size() + added.size());
  if (n > n_listed + 65536) {
    return make_error("tokenizer.json: token id ", n - 1, " is far beyond the ", n_listed,
                      " tokens listed (ids must be dense)");
  }

  VocabSpec s;
  s.model = spm_style ? "llama" : "gpt2";
  s.pre = spm_style ? "default" : "";
  if (pre.byte_level) {
    SLUICE_ASSIGN_OR_RETURN(s.pre, pre_name_for(pre.regexes));
  }
  s.tokens.resize(size_t(n));
  s.token_types.assign(size_t(n), int32_t(GgufTokenType::kUnused));
  for (int64_t i = 0; i < n; ++i) s.tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [text, id] : ids) {
    s.tokens[size_t(id)] = text;
    const bool byte = spm_style && is_byte_token(text);
    s.token_types[size_t(id)] = int32_t(byte ? GgufTokenType::kByte : GgufTokenType::kNormal);
  }
  const std::string unk = token_string(model.value("unk_token", json()));
  for (const json& a : added) {
    const size_t id = size_t(a["id"].get<int64_t>());
    const std::string text = a["content"].get<std::string>();
    GgufTokenType t = GgufTokenType::kUserDefined;
    if (spm_style && text == unk) {
      t = GgufTokenType::kUnknown;
    } else if (a.value("special", false) || looks_special(text)) {
      t = GgufTokenType::kControl;
    } else if (spm_style && text.find(kSpace) != std::string::npos && ids.count(text) &&
               ids.at(text) == int64_t(id)) {
      t = GgufTokenType::kNormal;  // see the header: "▁▁" stays a normal token
    }
    s.tokens[id] = text;
    s.token_types[id] = int32_t(t);
    ids.emplace(text, int64_t(id));
  }

  const json& merges = model["merges"];
  if (spm_style) {
    // SPM merges the adjacent pair whose *result* scores highest; BPE the pair of lowest rank.
    // Score = -(rank of the first merge producing the token); tokens no merge produces
    // (characters, bytes, specials) score below every merge.
    const float kNoMerge = -float(merges.size()) - 1.0f;
    s.scores.assign(size_t(n), kNoMerge);
    for (size_t r = 0; r < merges.size(); ++r) {
      SLUICE_ASSIGN_OR_RETURN(auto pair, merge_pair(merges[r], r));
      auto it = ids.find(pair.first + pair.second);
      if (it == ids.end()) {
        return make_error("model.merges[", r, "] makes '", pair.first + pair.second,
                          "', which is not in the vocabulary");
      }
      float& score = s.scores[size_t(it->second)];
      score = std::max(score, -float(r));
    }
    s.add_space_prefix = spm_norm.prepends_space;
    if (!unk.empty() && ids.count(unk)) s.unk_id = ids.at(unk);
  } else {
    s.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      SLUICE_ASSIGN_OR_RETURN(auto pair, merge_pair(merges[r], r));
      s.merges.push_back(pair.first + " " + pair.second);
    }
  }

  if (!tokenizer_config_json.empty()) {
    SLUICE_ASSIGN_OR_RETURN(json config, parse(tokenizer_config_json, "tokenizer_config.json"));
    if (!config.is_object()) return make_error("tokenizer_config.json is not a JSON object");
    read_config(config, ids, s);
  }
  return s;
}

}  // namespace

Result<VocabSpec> vocab_spec_from_hf_json(std::string_view tokenizer_json,
                                          std::string_view tokenizer_config_json) {
  // nlohmann::json throws on a value of the wrong type (a number where a string belongs);
  // that is bad input like any other.
  try {
    return import_json(tokenizer_json, tokenizer_config_json);
  } catch (const json::exception& e) {
    return make_error("tokenizer.json or tokenizer_config.json has a value of the wrong type: ",
                      e.what());
  }
}

Result<VocabSpec> vocab_spec_from_hf_file(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::string config;
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    SLUICE_ASSIGN_OR_RETURN(config, read_text_file(config_path.string()));
  }
  Result<VocabSpec> spec = vocab_spec_from_hf_json(text, config);
  if (!spec.ok()) return make_error("'", path, "': ", spec.message());
  return spec;
}

Status write_vocab_gguf(const VocabSpec& s, const std::string& path) {
  GgufWriter w;
  if (!s.name.empty()) w.set("general.name", s.name);
  w.set("tokenizer.ggml.model", s.model);
  if (!s.pre.empty()) w.set("tokenizer.ggml.pre", s.pre);
  w.set("tokenizer.ggml.tokens", make_string_array(s.tokens));
  if (!s.scores.empty()) w.set("tokenizer.ggml.scores", make_array(GgufType::FLOAT32, s.scores));
  if (!s.token_types.empty()) {
    w.set("tokenizer.ggml.token_type", make_array(GgufType::INT32, s.token_types));
  }
  if (!s.merges.empty()) w.set("tokenizer.ggml.merges", make_string_array(s.merges));
  const std::pair<const char*, const std::optional<int64_t>*> ids[] = {
      {"bos_token_id", &s.bos_id},     {"eos_token_id", &s.eos_id},
      {"eot_token_id", &s.eot_id},     {"eom_token_id", &s.eom_id},
      {"unknown_token_id", &s.unk_id}, {"seperator_token_id", &s.sep_id},
      {"padding_token_id", &s.pad_id}, {"mask_token_id", &s.mask_id},
  };
  for (const auto& [key, id] : ids) {
    if (*id) w.set(std::string("tokenizer.ggml.") + key, uint32_t(**id));
  }
  const std::pair<const char*, const std::optional<bool>*> flags[] = {
      {"add_bos_token", &s.add_bos},
      {"add_eos_token", &s.add_eos},
      {"add_sep_token", &s.add_sep},
      {"add_space_prefix", &s.add_space_prefix},
      {"remove_extra_whitespaces", &s.remove_extra_whitespaces},
  };
  for (const auto& [key, flag] : flags) {
    if (*flag) w.set(std::string("tokenizer.ggml.") + key, **flag);
  }
  return w.write(path);
}

}  // namespace sluice
