// POST /v1/responses (OpenAI's Responses API) over the chat pipeline, and its in-memory store.
//
//   request:  input (a string, or items: message / function_call / function_call_output /
//             reasoning), instructions, tools (function), tool_choice, text.format,
//             max_output_tokens, temperature, top_p, reasoning.effort, parallel_tool_calls,
//             stream, store, previous_response_id, metadata
//   -> a chat completions body (chat_body): the same parser, template, grammar and tool-call
//      machinery as /v1/chat/completions; what is refused is refused with the Responses field
//      named.
//   answer:   {"object": "response", "output": [reasoning, message, function_call items], ...}
//   stream:   response.created, response.in_progress, then per item output_item.added,
//             (content_part.added, output_text.delta*, output_text.done, content_part.done |
//             reasoning_text.delta*, reasoning_text.done | function_call_arguments.delta*,
//             function_call_arguments.done), output_item.done; response.completed (or
//             response.incomplete at max_output_tokens; error + response.failed).
//
// store (default true) keeps the answer and its conversation in a bounded LRU (ResponseStore):
// GET /v1/responses/{id}, DELETE /v1/responses/{id}, and previous_response_id continues it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>

#include "http/api_error.h"
#include "server/streaming.h"

namespace sluice::server {

class ResponseStore {
 public:
  struct Entry {
    nlohmann::ordered_json response;  // what GET returns
    nlohmann::ordered_json messages;  // the conversation in chat form (no instructions)
  };
  explicit ResponseStore(size_t max_entries = 1024, size_t max_bytes = size_t(64) << 20)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  void put(const std::string& id, Entry entry);
  std::optional<Entry> get(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Slot {
    Entry entry;
    size_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  const size_t max_entries_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  mutable std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, Slot> slots_;
  size_t bytes_ = 0;
};

// A Responses request, converted.
struct ResponsesRequest {
  nlohmann::ordered_json chat_body;  // for parse_chat_request
  nlohmann::ordered_json history;    // chat messages: the previous conversation + this input
  nlohmann::ordered_json echo;       // request fields the response object repeats
  bool store = true;
  bool stream = false;
};

std::variant<ResponsesRequest, http::ApiError> parse_responses_request(
    const nlohmann::ordered_json& body, const ResponseStore& store);

// The writer of one response; a finished one goes into `store` when request.store.
std::unique_ptr<ApiWriter> make_responses_writer(const ResponsesRequest& request,
                                                 const std::string& model,
                                                 const Tokenizer& tokenizer, ResponseStore& store);

}  // namespace sluice::server
