// What the router reads from a request body: the model it names, whether it streams, and its
// routing key (the bytes the prefix trees match; policy.h). No tokenizer: the key is text.
//
//   chat:        "<role>: <content>\n" per message (content parts' text concatenated; tool
//                calls as their JSON), so a conversation's next turn extends its key
//   completions: the prompt text; token ids as 4 little-endian bytes each; of a batch of
//                prompts, the first
//   messages:    (Anthropic) "system: <system>\n", then as chat
//   responses:   "instructions: <instructions>\n", then the input: a string as one user
//                message, items as chat messages ("<role or type>: <content or JSON>\n")
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sluice::router {

struct RequestInfo {
  std::string model;  // "" if absent
  bool stream = false;
  std::string key;
};

RequestInfo describe_request(const nlohmann::json& body, bool chat);

enum class AgentApi { kMessages, kResponses };
RequestInfo describe_agent_request(const nlohmann::json& body, AgentApi api);

}  // namespace sluice::router
