// The requests a serving benchmark sends: synthetic prompts of chosen token lengths (optionally
// sharing a prefix, for prefix-cache studies), lines of a JSONL file, a replayed Mooncake trace
// (token ids with the trace's real prefix sharing and arrival times) or multi-turn chats that
// grow turn by turn. The builders are pure functions of their parameters (file reads aside; no
// network), so `sluice sim` replays the same requests as `sluice bench serve` sends.
//
// Token lengths are exact only with a tokenizer (`--tokenizer MODEL.gguf`): prompts are then
// encoded and trimmed to the target count. Without one, one random word counts as one token,
// which real tokenizers do not honour (a word is often 1-3 tokens); the summary says which.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::loadgen {

// How the HTTP client sends a request (the simulator ignores it and reads prompt_ids).
enum class SendAs {
  kEndpoint,  // by --endpoint: /v1/completions with `prompt`, or chat with `messages` / `prompt`
  kTokenIds,  // /v1/completions with "prompt": prompt_ids (a list of token ids), any --endpoint
  kChat,      // /v1/chat/completions with `messages`, any --endpoint
};

// One request to send.
struct RequestSpec {
  std::string prompt;         // /v1/completions prompt; the chat user message when no messages
  nlohmann::json messages;    // chat messages; null: one user message = prompt
  int64_t input_tokens = 0;   // exact with a tokenizer (no BOS) or token ids, else a word count
  int64_t output_tokens = 0;  // max_tokens
  // The prompt as token ids: what kTokenIds sends, and what the simulator feeds its engine
  // (mooncake: the real prompt; multiturn: a one-id-per-word stand-in of the conversation).
  std::vector<int32_t> prompt_ids;
  SendAs send_as = SendAs::kEndpoint;
  // Seconds after the run start at which to send it; < 0: none. When any request of a run has
  // one, run_load sends at these times instead of the --rate schedule (see runner.h).
  double arrival_s = -1;
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

// ---- Replays: token ids valid for the target model ----

// Which ids a replay draws: [vocab_size/16, vocab_size - vocab_size/16) without a tokenizer (a
// margin that avoids the control tokens vocabularies keep at either end: SPM's <unk>/<s>/</s>
// at 0-2, Llama 3's 256 specials and Qwen's ~300 at the top); with one, every normal or byte
// token in that range (control, unknown, unused and user-defined tokens skipped).
struct TokenIdSpace {
  int32_t vocab_size = 0;
  std::vector<int32_t> ids;  // the drawable ids, ascending; never empty once built

  int32_t at(uint64_t r) const { return ids[size_t(r % ids.size())]; }
};

// `vocab_size` 0: the tokenizer's. Errors when neither is given, or nothing is drawable.
Result<TokenIdSpace> make_token_id_space(int32_t vocab_size, const Tokenizer* tokenizer);

// A Mooncake trace (../shared/testdata/traces/*.jsonl): {"timestamp": ms, "input_length": L,
// "output_length": O, "hash_ids": [...]}, one ceil(L / 512) block hash per 512 prompt tokens.
// Each hash id becomes a fixed block of ids drawn by a generator seeded by (hash id, seed), so
// equal ids give equal blocks and prompts share prefixes exactly where the trace says they do.
//
//   block_size b = max(1, round(512 * scale_tokens))
//   input  L' = max(1, round(L * scale_tokens)), capped at n_hash_ids * b
//   output O' = max(1, round(O * scale_tokens))
//   prompt_ids = block(h_0) ++ block(h_1) ++ ... cut to L' (the last block is partial)
//   arrival_s = (timestamp - first timestamp of the window) / 1000 * scale_time
struct MooncakeParams {
  std::string path;
  int start = 0;               // first line used (0-based, blank lines not counted)
  int n_prompts = 0;           // lines used from `start`; 0: all
  double scale_tokens = 1;     // lengths and block size
  double scale_time = 1;       // inter-arrival times (10: ten times slower)
  int32_t vocab_size = 0;      // 0: the tokenizer's
  uint64_t seed = 0;           // mixed into every block's generator
  int trace_block_size = 512;  // tokens per hash id in the file
};

// Requests with prompt_ids, send_as = kTokenIds and arrival_s set. Errors name the file and
// line ("trace.jsonl:17: 'hash_ids' has 3 ids, input_length 2000 needs 4").
Result<Dataset> load_mooncake(const MooncakeParams& p, const Tokenizer* tokenizer);

// One (not blank) line of a Mooncake trace as load_mooncake reads it: the request (arrival_s
// not yet set) and its timestamp in ms. `p` must be valid (load_mooncake checks it) and `space`
// not empty; errors start with `where` ("trace.jsonl:17: ").
struct MooncakeLine {
  RequestSpec request;
  double timestamp_ms = 0;
};
Result<MooncakeLine> parse_mooncake_line(std::string_view line, const MooncakeParams& p,
                                         const TokenIdSpace& space, const std::string& where);

// The ids of one hash block (exposed for tests and the simulator): `n` ids, a pure function of
// (hash_id, seed, space).
std::vector<int32_t> mooncake_block(int64_t hash_id, uint64_t seed, size_t n,
                                    const TokenIdSpace& space);

// Multi-turn chats: conversation c, turn t (0-based) sends
//   messages = [system, user_0, assistant_0, ..., user_t]
// one system prompt shared by every conversation, user turns random words (seeded by seed, c,
// t), assistant turns a fixed synthetic reply of output_len words (open loop: the real reply is
// not known when the next turn is built, so a server's prefix cache can reuse each turn's
// prompt up to the previous user turn, not the reply it generated).
//
// Arrivals: conversation starts by a Poisson process of `rate` conversations/s (all at 0 when
// rate is +inf), turn t at start + t * (think_time_s + turn_time_s); requests sorted by time.
// prompt_ids: one id per word of system, user and assistant texts in order (word -> id by a
// stable hash into the TokenIdSpace), so turn t+1's ids extend turn t's; input_tokens is that
// word count. send_as = kChat.
struct MultiturnParams {
  int n_conversations = 10;
  int n_turns = 5;
  int system_len = 200;  // words of the shared system prompt
  int user_len = 50;     // words per user turn
  int output_len = 50;   // max_tokens and words of each synthetic assistant reply
  double rate = std::numeric_limits<double>::infinity();  // conversations/s
  double think_time_s = 1;  // user think time between a reply and the next turn
  double turn_time_s = 1;   // nominal duration of one turn (the reply being generated)
  int32_t vocab_size = 0;   // 0: the tokenizer's; neither: prompt_ids left empty (HTTP only)
  uint64_t seed = 0;
};

Result<Dataset> make_multiturn(const MultiturnParams& p, const Tokenizer* tokenizer);

}  // namespace sluice::loadgen
