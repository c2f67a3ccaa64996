// libFuzzer target: the request bodies of the agent APIs (server/agent_requests.h). The first
// byte picks the parser, the rest is the body:
//   0: parse_responses_request (a store holding one response, "resp_a")
//   1: messages_to_chat
//   2: messages_to_chat for count_tokens
// Checks: no crash, hang or exception on any JSON object body; an accepted body becomes a chat
// body with a non-empty "messages" list of objects with a role; a refused one has a message.
//
//   scripts/fuzz 60 agent_request_fuzz
// Seeds: fuzz/seeds/agent_request_fuzz (Responses and Messages bodies from the tests).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/agent_requests.h"

namespace {

using ojson = nlohmann::ordered_json;

void check_chat(const ojson& chat) {
  auto m = chat.find("messages");
  if (m == chat.end() || !m->is_array() || m->empty()) std::abort();
  for (const ojson& msg : *m)
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) std::abort();
  (void)chat.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const ojson body = ojson::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return 0;  // the server answers 400 before
  using sluice::http::ApiError;
  if (data[0] % 3 == 0) {
    static sluice::server::ResponseStore store;
    if (store.size() == 0) {
      store.put("resp_a", {ojson::object({{"id", "resp_a"}}),
                           ojson::array({{{"role", "user"}, {"content", "hi"}}})});
    }
    auto r = sluice::server::parse_responses_request(body, store);
    if (auto* e = std::get_if<ApiError>(&r)) {
      if (e->message.empty()) std::abort();
    } else {
      check_chat(std::get<sluice::server::ResponsesRequest>(r).chat_body);
    }
  } else {
    auto r = sluice::server::messages_to_chat(body, data[0] % 3 == 2);
    if (auto* e = std::get_if<ApiError>(&r)) {
      if (e->message.empty()) std::abort();
    } else {
      check_chat(std::get<ojson>(r));
    }
  }
  return 0;
}
