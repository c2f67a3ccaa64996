// POST /v1/messages (Anthropic's Messages API) and /v1/messages/count_tokens over the chat
// pipeline.
//
//   request:  model, max_tokens (required), system (a string or text blocks), messages (content:
//             a string or blocks: text, tool_use, tool_result, thinking), tools (name,
//             description, input_schema), tool_choice (auto | any | tool | none,
//             disable_parallel_tool_use), stop_sequences, temperature, top_p, top_k, thinking
//             ({"type": "enabled", "budget_tokens"} | {"type": "disabled"}), stream
//   -> a chat completions body (parse_chat_request does the rest);
//   answer:   {"type": "message", "content": [thinking, text, tool_use blocks], "stop_reason":
//             end_turn | max_tokens | stop_sequence | tool_use, "usage": {...}}
//   stream:   message_start, ping, per block content_block_start, content_block_delta*
//             (thinking_delta, text_delta, input_json_delta), content_block_stop; message_delta
//             (stop_reason, usage), message_stop; a failure: event "error".
// Errors in Anthropic's shape: {"type": "error", "error": {"type": ..., "message": ...}}.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "server/agent_requests.h"
#include "server/streaming.h"

namespace sluice::server {

std::unique_ptr<ApiWriter> make_messages_writer(const std::string& model,
                                                std::vector<std::string> stop_sequences);

}  // namespace sluice::server
