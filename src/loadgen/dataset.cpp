#include "loadgen/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "tokenizer/tokenizer.h"

namespace sluice::loadgen {
namespace {

// Common short words: most are one token in large vocabularies, 1-3 in small ones.
constexpr const char* kWords[] = {
    "the",   "a",     "cat",   "dog",    "sun",   "tree",  "house", "river", "blue",  "red",
    "green", "small", "big",   "happy",  "sad",   "run",   "jump",  "play",  "sing",  "read",
    "write", "find",  "look",  "walk",   "talk",  "day",   "night", "time",  "year",  "way",
    "man",   "woman", "child", "friend", "bird",  "fish",  "ball",  "book",  "door",  "road",
    "city",  "town",  "park",  "garden", "water", "fire",  "stone", "light", "dark",  "old",
    "new",   "good",  "bad",   "long",   "short", "warm",  "cold",  "fast",  "slow",  "high",
    "low",   "open",  "close", "early",  "late",  "apple", "bread", "milk",  "cake",  "flower",
    "boat",  "car",   "train", "hill",   "sea",   "sky",   "cloud", "rain",  "snow",  "wind",
    "moon",  "star",  "king",  "queen",  "box",   "cup",   "hat",   "shoe",  "song",  "story",
    "and",   "with",  "under", "over",   "near",  "far",   "then",  "soon",  "again", "always"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string random_words(int64_t n, std::mt19937_64& rng) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    if (!s.empty()) s += ' ';
    s += kWords[rng() % kNumWords];
  }
  return s;
}

EncodeOptions plain() {
  EncodeOptions o;
  o.add_special = false;  // the server adds BOS; counts here are the text's own tokens
  return o;
}

Result<int64_t> count_tokens(const Tokenizer& tok, const std::string& text) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tok.encode(text, plain()));
  return int64_t(ids.size());
}

// Grows `text` with random words and trims its tokens until it encodes to `n` tokens (a few
// rounds: a trimmed decode can re-encode differently at the cut). Returns the final count,
// which is `n` unless the tokenizer never round-trips at this length.
Result<int64_t> fit_tokens(const Tokenizer& tok, std::string& text, int64_t n,
                           std::mt19937_64& rng) {
  for (int round = 0; round < 16; ++round) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tok.encode(text, plain()));
    const int64_t have = int64_t(ids.size());
    if (have == n) return have;
    if (have < n) {
      // Every word adds at least one token, so this never overshoots by more than a word.
      const std::string more = random_words(n - have, rng);
      text += text.empty() ? more : " " + more;
    } else {
      ids.resize(size_t(n));
      text = tok.decode(ids);
    }
  }
  return count_tokens(tok, text);
}

}  // namespace

int64_t draw_length(int64_t len, double ratio, std::mt19937_64& rng) {
  if (ratio <= 0) return std::max<int64_t>(1, len);
  const int64_t lo = std::max<int64_t>(1, int64_t(std::floor(double(len) * (1 - ratio))));
  const int64_t hi = std::max<int64_t>(lo, int64_t(std::floor(double(len) * (1 + ratio))));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Result<Dataset> make_synthetic(const SyntheticParams& p, const Tokenizer* tokenizer) {
  if (p.n_prompts < 1 || p.input_len < 1 || p.output_len < 1) {
    return make_error("need --num-prompts, --input-len and --output-len >= 1");
  }
  if (p.range_ratio < 0 || p.range_ratio >= 1) return make_error("--range-ratio must be in [0, 1)");
  const int64_t shortest =
      std::max<int64_t>(1, int64_t(std::floor(p.input_len * (1 - p.range_ratio))));
  if (p.prefix_len < 0 || p.prefix_len > shortest) {
    return make_error("--prefix-len must be in [0, ", shortest,
                      "] (the shortest prompt: --input-len x (1 - --range-ratio))");
  }
  std::mt19937_64 rng(p.seed);
  Dataset d;
  d.exact_token_counts = tokenizer != nullptr;
  std::string prefix;
  if (p.prefix_len > 0) {
    if (tokenizer) {
      SLUICE_RETURN_IF_ERROR(fit_tokens(*tokenizer, prefix, p.prefix_len, rng));
    } else {
      prefix = random_words(p.prefix_len, rng);
    }
  }
  for (int i = 0; i < p.n_prompts; ++i) {
    RequestSpec r;
    const int64_t in_len = draw_length(p.input_len, p.range_ratio, rng);
    r.output_tokens = draw_length(p.output_len, p.range_ratio, rng);
    // The shared prefix, then random words; with a tokenizer an exact fit trims the tail.
    r.prompt = prefix;
    if (const int64_t extra = in_len - p.prefix_len; extra > 0) {
      r.prompt += (r.prompt.empty() ? "" : " ") + random_words(extra, rng);
    }
    if (tokenizer) {
      SLUICE_ASSIGN_OR_RETURN(r.input_tokens, fit_tokens(*tokenizer, r.prompt, in_len, rng));
    } else {
      r.input_tokens = in_len;
    }
    d.requests.push_back(std::move(r));
  }
  d.description = "synthetic: " + std::to_string(p.n_prompts) + " prompts, " +
                  std::to_string(p.input_len) + " input / " + std::to_string(p.output_len) +
                  " output tokens";
  if (p.range_ratio > 0) {
    d.description += " +/- " + std::to_string(int(std::lround(p.range_ratio * 100))) + "%";
  }
  if (p.prefix_len > 0) d.description += ", shared prefix " + std::to_string(p.prefix_len);
  return d;
}

Result<Dataset> load_jsonl(const std::string& path, int n_prompts, int default_output_len,
                           const Tokenizer* tokenizer) {
  if (n_prompts < 1 || default_output_len < 1)
    return make_error("need --num-prompts and --output-len >= 1");
  std::ifstream f(path);
  if (!f) return make_error("cannot open dataset '", path, "'");
  std::vector<RequestSpec> lines;
  std::string line;
  int line_no = 0;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return make_error(where, "not a JSON object");
    RequestSpec r;
    if (auto it = j.find("prompt"); it != j.end()) {
      if (!it->is_string()) return make_error(where, "'prompt' must be a string");
      r.prompt = it->get<std::string>();
    } else if (auto m = j.find("messages"); m != j.end()) {
      if (!m->is_array() || m->empty())
        return make_error(where, "'messages' must be a non-empty array");
      for (const nlohmann::json& msg : *m) {
        if (!msg.is_object() || !msg.contains("content") || !msg["content"].is_string()) {
          return make_error(where, "every message needs a string 'content'");
        }
        if (!r.prompt.empty()) r.prompt += "\n";
        r.prompt += msg["content"].get<std::string>();  // the completions endpoint's prompt
      }
      r.messages = *m;
    } else {
      return make_error(where, "needs 'prompt' or 'messages'");
    }
    r.output_tokens = default_output_len;
    if (auto it = j.find("output_len"); it != j.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1) {
        return make_error(where, "'output_len' must be an integer >= 1");
      }
      r.output_tokens = it->get<int64_t>();
    }
    if (tokenizer) {
      SLUICE_ASSIGN_OR_RETURN(r.input_tokens, count_tokens(*tokenizer, r.prompt));
    } else {
      int64_t words = 0;
      bool in_word = false;
      for (char c : r.prompt) {
        const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (!space && !in_word) ++words;
        in_word = !space;
      }
      r.input_tokens = words;
    }
    lines.push_back(std::move(r));
  }
  if (lines.empty()) return make_error("dataset '", path, "' has no requests");
  Dataset d;
  d.exact_token_counts = tokenizer != nullptr;
  for (int i = 0; i < n_prompts; ++i) d.requests.push_back(lines[size_t(i) % lines.size()]);
  d.description = "jsonl: " + path + " (" + std::to_string(lines.size()) + " lines, " +
                  std::to_string(n_prompts) + " requests)";
  return d;
}

}  // namespace sluice::loadgen
