// OpenAI response schema: the JSON objects of chat.completion / text_completion answers, their
// streamed chunks, usage and logprobs. Pure functions of their inputs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "server/openai_request.h"

namespace sluice::server {

using ojson = nlohmann::ordered_json;

// What every response object of one request shares.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;       // "chatcmpl-<hex>" / "cmpl-<hex>"
  int64_t created = 0;  // Unix seconds
  std::string model;
};
ResponseMeta make_response_meta(ApiKind kind, const std::string& model);
// 2 * n_bytes random hex digits (ids of responses, messages, items).
std::string random_hex(size_t n_bytes);

// "stop" or "length" (the context filling up is reported as "length", as OpenAI does).
const char* finish_reason_text(FinishReason r);

// `cached_tokens` >= 0: also prompt_tokens_details.cached_tokens (OpenAI's and vLLM's field).
ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens = -1);

// Logprobs of the tokens of one engine event.
//   chat:        [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]
//   completions: appended to {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
ojson chat_logprobs(const Tokenizer& tok, const EngineEvent& ev);
ojson empty_completion_logprobs();
void append_completion_logprobs(ojson& lp, const Tokenizer& tok, const EngineEvent& ev,
                                size_t text_offset);

// One streamed chunk of choice `index`. `delta` is the chat delta object; `logprobs` and
// `finish` may be null. With `include_usage`, "usage": null is added (OpenAI's shape).
ojson chat_chunk(const ResponseMeta& meta, int index, ojson delta, ojson logprobs,
                 const char* finish, bool include_usage);
ojson completion_chunk(const ResponseMeta& meta, int index, const std::string& text, ojson logprobs,
                       const char* finish, bool include_usage);
// The final usage chunk of a stream: "choices": [] and the totals.
ojson usage_chunk(const ResponseMeta& meta, int64_t prompt_tokens, int64_t completion_tokens,
                  int64_t cached_tokens = -1);

// A whole (non-streamed) choice and response.
ojson chat_choice(int index, const std::string& text, ojson logprobs, const char* finish);
ojson completion_choice(int index, const std::string& text, ojson logprobs, const char* finish);
ojson full_response(const ResponseMeta& meta, ojson choices, int64_t prompt_tokens,
                    int64_t completion_tokens, int64_t cached_tokens = -1);

}  // namespace sluice::server
