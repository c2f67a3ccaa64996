// Serving one parsed generation request: submit its choices to the engine thread, then either
// stream Server-Sent Events or answer one JSON object, in the shape of the API that asked
// (an ApiWriter: OpenAI chat completions and completions here; Responses in responses_api.h;
// Anthropic Messages in messages_api.h).
//
// OpenAI streaming wire format (one TCP write per engine step that produced output):
//
//   data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": ...}}]}
//
//   data: {... "delta": {"reasoning_content": "...", "reasoning": "..."} ...}   (thinking)
//   data: {... "delta": {"content": " there"} ...}
//   ...
//   data: {... "delta": {}, "finish_reason": "length"}
//   data: {... "choices": [], "usage": {...}}      (stream_options.include_usage)
//   data: [DONE]
//
// Chat text goes through one MessageParser (template/reasoning.h) per choice when the model
// reasons or tools were offered: every API sees the same reasoning / content / tool-call
// events, whether streamed or not.
//
// The stream is written by a single call of httplib's chunked content provider that runs until
// the job ends, so a server stop() (which makes httplib stop calling providers) never cuts an
// in-flight stream short. A failed write means the client is gone: the job is cancelled and the
// call waits for the engine thread's acknowledgement before the connection closes.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/engine_bridge.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace sluice::server {

// What one choice has produced so far.
struct ChoiceOutput {
  std::string text;             // everything the model wrote
  std::string reasoning;        // parsed: the reasoning
  std::string content;          // parsed: answer text outside tool calls
  std::vector<ToolCall> calls;  // begun calls, arguments so far
  int n_complete = 0;           // calls that ended
  int64_t n_tokens = 0;
  const char* finish = nullptr;     // "stop", "length", "tool_calls" once finished
  int32_t stop_index = -1;          // the stop string that ended it
  nlohmann::ordered_json logprobs;  // non-streamed answer: accumulated
};

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// How one API writes a generation. Called on the handler's thread, one call at a time.
class ApiWriter {
 public:
  virtual ~ApiWriter() = default;
  // Streaming: what goes out before the first event.
  virtual std::string stream_begin(int n_choices) = 0;
  // Choice `index` advanced by one engine event: `events` are its parsed events (a choice
  // without a parser gets its text as one kContent event), `finish` is set on its last one.
  // Returns what to stream (ignored for a whole answer, but called either way, so a writer may
  // build its answer from the events).
  virtual std::string events(int index, const ChoiceOutput& c,
                             const std::vector<ToolCallEvent>& events, const char* finish,
                             nlohmann::ordered_json logprobs) = 0;
  // The stream's end after success / after a failure.
  virtual std::string stream_end(const std::vector<ChoiceOutput>& choices,
                                 const UsageCounts& usage) = 0;
  virtual std::string stream_error(const http::ApiError& e) = 0;
  // The whole answer.
  virtual nlohmann::ordered_json whole(std::vector<ChoiceOutput>& choices,
                                       const UsageCounts& usage) = 0;
  // An error answer in this API's shape.
  virtual void send_error(httplib::Response& res, const http::ApiError& e) const;
  // Whether streaming logprobs are computed for it (OpenAI only).
  virtual bool wants_logprobs() const { return false; }
};

// What disaggregated serving adds to a generation (server/kv_tiers.h).
struct GenerationExtras {
  std::vector<PrefixImport> imports;  // K/V brought in for the prompts (GenerationJob::imports)
  bool pin_prompt = false;            // GenerationJob::pin_prompt
  // Adds fields to the whole (non-streamed) answer once the job is done: kv_transfer_params.
  std::function<void(const RequestChannel&, nlohmann::ordered_json&)> decorate;
  // The API's writer; null: OpenAI chat completions / completions (by the request's kind).
  std::unique_ptr<ApiWriter> writer;
};

void serve_generation(CompletionRequest request, const ModelContext& model, EngineBridge& bridge,
                      ServerMetrics& metrics, httplib::Response& res, GenerationExtras extras = {});

// "data: JSON\n\n", and with an event name "event: NAME\ndata: JSON\n\n".
std::string sse(const nlohmann::ordered_json& j);
std::string sse(const std::string& event, const nlohmann::ordered_json& j);

}  // namespace sluice::server
