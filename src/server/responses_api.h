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

#include <memory>
#include <string>

#include "server/agent_requests.h"
#include "server/streaming.h"

namespace sluice::server {

// The writer of one response; a finished one goes into `store` when request.store.
std::unique_ptr<ApiWriter> make_responses_writer(const ResponsesRequest& request,
                                                 const std::string& model,
                                                 const Tokenizer& tokenizer, ResponseStore& store);

}  // namespace sluice::server
