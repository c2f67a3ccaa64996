// The requests a serving benchmark sends: synthetic prompts of chosen token lengths (optionally
// sharing a prefix, for prefix-cache studies) or lines of a JSONL file.
//
// Token lengths are exact only with a tokenizer (`--tokenizer MODEL.gguf`): prompts are then
// encoded and trimmed to the target count. Without one, one random word counts as one token,
// which real tokenizers do not honour (a word is often 1-3 tokens); the summary says which.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::loadgen {

// One request to send.
struct RequestSpec {
  std::string prompt;         // /v1/completions prompt; the chat user message when no messages
  nlohmann::json messages;    // chat messages from a JSONL line; null: one user message = prompt
  int64_t input_tokens = 0;   // exact with a tokenizer (no BOS), else a word count
  int64_t output_tokens = 0;  // max_tokens
};

struct Dataset {
  std::vector<RequestSpec> requests;
  bool exact_token_counts = false;  // counted with a tokenizer
  std::string description;          // "synthetic: 128 in / 128 out tokens, ..." for reports
};

struct SyntheticParams {
  int n_prompts = 100;
  int input_len = 128;  // prompt tokens, prefix included
  int output_len = 128;
  int prefix_len = 0;      // leading tokens shared by every prompt (<= the shortest prompt)
  double range_ratio = 0;  // lengths uniform in [L(1-X), L(1+X)] (integers, inclusive)
  uint64_t seed = 0;
};

// Uniform integer in [floor(len * (1 - ratio)), floor(len * (1 + ratio))], at least 1.
int64_t draw_length(int64_t len, double ratio, std::mt19937_64& rng);

// Synthetic prompts built from random words. `tokenizer` (may be null) makes lengths exact.
Result<Dataset> make_synthetic(const SyntheticParams& p, const Tokenizer* tokenizer);

// `path`: one JSON object per line, {"prompt": "...", "output_len": N} or
// {"messages": [{"role": ..., "content": ...}, ...], "output_len": N}; output_len defaults to
// `default_output_len`. The first `n_prompts` lines are used, cycling when the file has fewer.
Result<Dataset> load_jsonl(const std::string& path, int n_prompts, int default_output_len,
                           const Tokenizer* tokenizer);

}  // namespace sluice::loadgen
