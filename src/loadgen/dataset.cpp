#include "loadgen/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>

#include "base/fnv1a.h"
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

// splitmix64: a stateless, well-mixed step (Steele et al.); the replays' only generator, so
// their ids never depend on a standard library's distribution code.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t scaled(int64_t n, double x) {
  return std::max<int64_t>(1, int64_t(std::llround(double(n) * x)));
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

// ---- Replays ----

Result<TokenIdSpace> make_token_id_space(int32_t vocab_size, const Tokenizer* tokenizer) {
  if (vocab_size < 0) return make_error("--vocab-size must be >= 0 (got ", vocab_size, ")");
  if (vocab_size == 0 && tokenizer) vocab_size = tokenizer->vocab().n_tokens();
  if (vocab_size == 0) {
    return make_error("token ids need a vocabulary: give --vocab-size V or --tokenizer MODEL.gguf");
  }
  if (tokenizer && vocab_size > tokenizer->vocab().n_tokens()) {
    return make_error("--vocab-size ", vocab_size, " exceeds the tokenizer's ",
                      tokenizer->vocab().n_tokens(), " tokens");
  }
  TokenIdSpace space;
  space.vocab_size = vocab_size;
  const int32_t margin = vocab_size / 16;
  for (int32_t id = margin; id < vocab_size - margin; ++id) {
    if (tokenizer) {
      const uint32_t a = tokenizer->vocab().attr(id);
      if ((a & (kAttrNormal | kAttrByte)) == 0 ||
          (a & (kAttrControl | kAttrUnknown | kAttrUnused | kAttrUserDefined)) != 0) {
        continue;
      }
    }
    space.ids.push_back(id);
  }
  if (space.ids.empty()) {
    return make_error("no drawable token ids in a vocabulary of ", vocab_size, " tokens");
  }
  return space;
}

std::vector<int32_t> mooncake_block(int64_t hash_id, uint64_t seed, size_t n,
                                    const TokenIdSpace& space) {
  uint64_t state = uint64_t(hash_id) * 0xD1B54A32D192ED03ull ^ seed;
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = space.at(splitmix64(state));
  return ids;
}

Result<MooncakeLine> parse_mooncake_line(std::string_view line, const MooncakeParams& p,
                                         const TokenIdSpace& space, const std::string& where) {
  const int64_t block = scaled(p.trace_block_size, p.scale_tokens);
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error(where, "not a JSON object");
  auto integer = [&](const char* key, int64_t min) -> Result<int64_t> {
    auto it = j.find(key);
    if (it == j.end()) return make_error(where, "missing '", key, "'");
    if (!it->is_number_integer() || it->get<int64_t>() < min) {
      return make_error(where, "'", key, "' must be an integer >= ", min, " (got ", it->dump(),
                        ")");
    }
    return it->get<int64_t>();
  };
  auto ts = j.find("timestamp");
  if (ts == j.end()) return make_error(where, "missing 'timestamp'");
  if (!ts->is_number() || ts->get<double>() < 0) {
    return make_error(where, "'timestamp' must be a number >= 0 (ms; got ", ts->dump(), ")");
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t in_len, integer("input_length", 1));
  SLUICE_ASSIGN_OR_RETURN(int64_t out_len, integer("output_length", 1));
  auto h = j.find("hash_ids");
  if (h == j.end()) return make_error(where, "missing 'hash_ids'");
  if (!h->is_array()) return make_error(where, "'hash_ids' must be an array of integers");
  // ceil(in_len / block size), without overflowing for input lengths near INT64_MAX
  const int64_t need = in_len / p.trace_block_size + (in_len % p.trace_block_size != 0);
  if (int64_t(h->size()) != need) {
    return make_error(where, "'hash_ids' has ", h->size(), " ids, input_length ", in_len, " needs ",
                      need, " (one per ", p.trace_block_size, " tokens)");
  }
  RequestSpec r;
  r.input_tokens = std::min(scaled(in_len, p.scale_tokens), need * block);
  r.output_tokens = scaled(out_len, p.scale_tokens);
  r.prompt_ids.reserve(size_t(r.input_tokens));
  for (const nlohmann::json& id : *h) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return make_error(where, "'hash_ids' must hold integers >= 0 (got ", id.dump(), ")");
    }
    const int64_t left = r.input_tokens - int64_t(r.prompt_ids.size());
    if (left <= 0) continue;  // validate the rest, use none of it
    const std::vector<int32_t> ids =
        mooncake_block(id.get<int64_t>(), p.seed, size_t(block), space);
    r.prompt_ids.insert(r.prompt_ids.end(), ids.begin(),
                        ids.begin() + std::min<int64_t>(left, block));
  }
  r.send_as = SendAs::kTokenIds;
  return MooncakeLine{std::move(r), ts->get<double>()};
}

Result<Dataset> load_mooncake(const MooncakeParams& p, const Tokenizer* tokenizer) {
  if (p.start < 0 || p.n_prompts < 0)
    return make_error("--trace-start and --num-prompts must be >= 0");
  if (!(p.scale_tokens > 0) || !std::isfinite(p.scale_tokens)) {
    return make_error("--scale-tokens must be > 0 (got ", p.scale_tokens, ")");
  }
  if (!(p.scale_time > 0) || !std::isfinite(p.scale_time)) {
    return make_error("--scale-time must be > 0 (got ", p.scale_time, ")");
  }
  if (p.trace_block_size < 1) return make_error("the trace's block size must be >= 1");
  SLUICE_ASSIGN_OR_RETURN(TokenIdSpace space, make_token_id_space(p.vocab_size, tokenizer));
  std::ifstream f(p.path);
  if (!f) return make_error("cannot open trace '", p.path, "'");
  const int64_t block = scaled(p.trace_block_size, p.scale_tokens);

  Dataset d;
  d.exact_token_counts = true;  // token ids: the server counts exactly these (it adds no BOS)
  std::vector<double> stamps_ms;
  std::string line;
  int line_no = 0, index = -1;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++index;
    if (index < p.start) continue;
    if (p.n_prompts > 0 && index >= p.start + p.n_prompts) break;
    const std::string where = p.path + ":" + std::to_string(line_no) + ": ";
    SLUICE_ASSIGN_OR_RETURN(MooncakeLine r, parse_mooncake_line(line, p, space, where));
    stamps_ms.push_back(r.timestamp_ms);
    d.requests.push_back(std::move(r.request));
  }
  if (d.requests.empty()) {
    return make_error("trace '", p.path, "' has no requests from line index ", p.start);
  }
  const double t0 = *std::min_element(stamps_ms.begin(), stamps_ms.end());
  for (size_t i = 0; i < d.requests.size(); ++i) {
    d.requests[i].arrival_s = (stamps_ms[i] - t0) / 1000.0 * p.scale_time;
  }
  std::stable_sort(
      d.requests.begin(), d.requests.end(),
      [](const RequestSpec& a, const RequestSpec& b) { return a.arrival_s < b.arrival_s; });
  char scale[96];
  std::snprintf(scale, sizeof scale, "tokens x%g (block %lld), time x%g", p.scale_tokens,
                static_cast<long long>(block), p.scale_time);
  d.description = "mooncake: " + p.path + " (" + std::to_string(d.requests.size()) +
                  " requests from #" + std::to_string(p.start) + ", " + scale + ")";
  return d;
}

Result<Dataset> make_multiturn(const MultiturnParams& p, const Tokenizer* tokenizer) {
  if (p.n_conversations < 1 || p.n_turns < 1) {
    return make_error("need --mt-conversations and --mt-turns >= 1");
  }
  if (p.system_len < 0 || p.user_len < 1 || p.output_len < 1) {
    return make_error("need --mt-system-len >= 0, --mt-user-len and --mt-output-len >= 1");
  }
  if (!(p.rate > 0)) return make_error("the conversation rate must be > 0 or inf");
  if (p.think_time_s < 0 || p.turn_time_s < 0) {
    return make_error("--mt-think-time and --mt-turn-time must be >= 0");
  }
  std::optional<TokenIdSpace> space;
  if (p.vocab_size > 0 || tokenizer) {
    SLUICE_ASSIGN_OR_RETURN(TokenIdSpace s, make_token_id_space(p.vocab_size, tokenizer));
    space.emplace(std::move(s));
  }
  // Appends the stand-in ids of `text`'s words.
  auto append_ids = [&space](const std::string& text, std::vector<int32_t>& ids) {
    if (!space) return;
    size_t i = 0;
    while (i < text.size()) {
      const size_t j = std::min(text.find(' ', i), text.size());
      if (j > i) ids.push_back(space->at(fnv1a(std::string_view(text).substr(i, j - i))));
      i = j + 1;
    }
  };

  std::mt19937_64 rng(p.seed);
  const std::string system = random_words(p.system_len, rng);
  // A fixed reply: the same words every turn (what it says does not matter, only its length).
  const std::string reply = random_words(p.output_len, rng);
  const std::vector<double> starts = [&] {
    std::vector<double> t(size_t(p.n_conversations), 0.0);
    if (std::isinf(p.rate)) return t;
    std::exponential_distribution<double> gap(p.rate);
    for (size_t c = 1; c < t.size(); ++c) t[c] = t[c - 1] + gap(rng);
    return t;
  }();

  Dataset d;
  for (int c = 0; c < p.n_conversations; ++c) {
    std::mt19937_64 conv_rng(p.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(c + 1)));
    nlohmann::json messages = nlohmann::json::array();
    std::vector<int32_t> ids;
    int64_t words = 0;
    if (p.system_len > 0) {
      messages.push_back({{"role", "system"}, {"content", system}});
      append_ids(system, ids);
      words += p.system_len;
    }
    for (int t = 0; t < p.n_turns; ++t) {
      if (t > 0) {
        messages.push_back({{"role", "assistant"}, {"content", reply}});
        append_ids(reply, ids);
        words += p.output_len;
      }
      const std::string user = random_words(p.user_len, conv_rng);
      messages.push_back({{"role", "user"}, {"content", user}});
      append_ids(user, ids);
      words += p.user_len;
      RequestSpec r;
      r.messages = messages;
      r.prompt = user;
      r.prompt_ids = ids;
      r.input_tokens = words;
      r.output_tokens = p.output_len;
      r.send_as = SendAs::kChat;
      r.arrival_s = starts[size_t(c)] + double(t) * (p.think_time_s + p.turn_time_s);
      d.requests.push_back(std::move(r));
    }
  }
  std::stable_sort(
      d.requests.begin(), d.requests.end(),
      [](const RequestSpec& a, const RequestSpec& b) { return a.arrival_s < b.arrival_s; });
  d.exact_token_counts = false;  // words, and the server's chat template adds its own tokens
  char rate[32] = "all at 0", desc[256];
  if (!std::isinf(p.rate)) std::snprintf(rate, sizeof rate, "%g conv/s", p.rate);
  std::snprintf(desc, sizeof desc,
                "multiturn: %d conversations x %d turns, system %d + user %d + reply %d words, "
                "starts %s, turns every %g s",
                p.n_conversations, p.n_turns, p.system_len, p.user_len, p.output_len, rate,
                p.think_time_s + p.turn_time_s);
  d.description = desc;
  return d;
}

}  // namespace sluice::loadgen
