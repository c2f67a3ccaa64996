// libFuzzer target: what the router and the server read from a client's request. The first
// byte picks the parser, the rest is its input:
//   0: router::describe_request on a chat body (model, stream flag, routing key)
//   1: router::describe_request on a completions body
//   2: server::parse_route_ids, the ids of GET /v1/cache/routes?ids=...
// Checks: no crash, hang or exception on any body the router accepts (a JSON object, parsed
// as RouterServer::forward parses it); the model and stream flag are the body's; a string
// prompt is its own key; accepted ids are digits and commas and print back to themselves.
//
//   scripts/fuzz 60 router_request_fuzz
// Seeds: fuzz/seeds/router_request_fuzz (chat, completions, token-id prompts, id lists).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "router/routing_key.h"
#include "server/route_log.h"

namespace {

void describe(std::string_view text, bool chat) {
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return;  // forward() refuses these
  const sluice::router::RequestInfo info = sluice::router::describe_request(body, chat);
  const auto m = body.find("model");
  if (m != body.end() && m->is_string() ? info.model != *m : !info.model.empty()) std::abort();
  const auto s = body.find("stream");
  if (info.stream != (s != body.end() && s->is_boolean() && s->get<bool>())) std::abort();
  const auto p = body.find("prompt");
  if (!chat && p != body.end() && p->is_string() && info.key != p->get_ref<const std::string&>())
    std::abort();
}

void route_ids(std::string_view list) {
  constexpr size_t kMaxIds = 4096;
  const auto ids = sluice::server::parse_route_ids(list, kMaxIds);
  if (!ids) return;
  if (ids->size() > kMaxIds) std::abort();
  std::string printed;
  for (uint64_t id : *ids) printed += (printed.empty() ? "" : ",") + std::to_string(id);
  const auto again = sluice::server::parse_route_ids(printed, kMaxIds);
  if (!again || *again != *ids) std::abort();
  if (ids->size() == kMaxIds) return;  // the rest of the list was not read
  for (char c : list)
    if (c != ',' && (c < '0' || c > '9')) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      describe(text, true);
      break;
    case 1:
      describe(text, false);
      break;
    default:
      route_ids(text);
      break;
  }
  return 0;
}
