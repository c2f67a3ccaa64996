// The request bodies of the agent APIs, converted to chat completions bodies: one parser
// (parse_chat_request), one template, grammar and tool-call path for every API. Pure functions
// of JSON (fuzzed: fuzz/agent_request_fuzz.cpp).
//
//   POST /v1/responses  (responses_api.h)   input items, instructions, tools, text.format ...
//   POST /v1/messages   (messages_api.h)    system, content blocks, tools, thinking ...
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>

#include "http/api_error.h"

namespace sluice::server {

// Stored responses (store: true), by id: what GET /v1/responses/{id} returns and the
// conversation previous_response_id continues. Bounded by entries and bytes; least recently
// used first out. Thread-safe.
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

// Errors name the Responses field; an unknown previous_response_id is a 404.
std::variant<ResponsesRequest, http::ApiError> parse_responses_request(
    const nlohmann::ordered_json& body, const ResponseStore& store);

// The chat completions body of a Messages request; `count_tokens`: max_tokens not required.
std::variant<nlohmann::ordered_json, http::ApiError> messages_to_chat(
    const nlohmann::ordered_json& body, bool count_tokens = false);

}  // namespace sluice::server
