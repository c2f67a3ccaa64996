#include "router/routing_key.h"

#include <cstdint>

namespace sluice::router {
namespace {

void append_ids(std::string& key, const nlohmann::json& ids) {
  for (const nlohmann::json& id : ids) {
    if (!id.is_number_integer()) continue;
    const uint32_t v = uint32_t(id.get<int64_t>());
    for (int b = 0; b < 4; ++b) key.push_back(char((v >> (8 * b)) & 0xff));
  }
}

void append_content(std::string& key, const nlohmann::json& content) {
  if (content.is_string()) {
    key += content.get_ref<const std::string&>();
  } else if (content.is_array()) {
    for (const nlohmann::json& part : content) {
      auto t = part.find("text");
      if (part.is_object() && t != part.end() && t->is_string()) {
        key += t->get_ref<const std::string&>();
      } else if (!part.is_null()) {
        key += part.dump();
      }
    }
  } else if (!content.is_null()) {
    key += content.dump();
  }
}

}  // namespace

RequestInfo describe_request(const nlohmann::json& body, bool chat) {
  RequestInfo info;
  if (!body.is_object()) return info;
  if (auto m = body.find("model"); m != body.end() && m->is_string()) info.model = *m;
  if (auto s = body.find("stream"); s != body.end() && s->is_boolean()) info.stream = *s;
  if (chat) {
    auto msgs = body.find("messages");
    if (msgs == body.end() || !msgs->is_array()) return info;
    for (const nlohmann::json& m : *msgs) {
      if (!m.is_object()) continue;
      if (auto r = m.find("role"); r != m.end() && r->is_string()) {
        info.key += r->get_ref<const std::string&>();
      }
      info.key += ": ";
      if (auto c = m.find("content"); c != m.end()) append_content(info.key, *c);
      if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) info.key += tc->dump();
      info.key += "\n";
    }
    return info;
  }
  auto p = body.find("prompt");
  if (p == body.end()) return info;
  if (p->is_string()) {
    info.key = p->get<std::string>();
  } else if (p->is_array() && !p->empty()) {
    const nlohmann::json& first = (*p)[0];
    if (first.is_string()) {
      info.key = first.get<std::string>();
    } else if (first.is_array()) {
      append_ids(info.key, first);
    } else {
      append_ids(info.key, *p);
    }
  }
  return info;
}

RequestInfo describe_agent_request(const nlohmann::json& body, AgentApi api) {
  if (!body.is_object()) return {};
  const char* preamble = api == AgentApi::kMessages ? "system" : "instructions";
  std::string head;
  if (auto p = body.find(preamble); p != body.end() && !p->is_null()) {
    head = std::string(preamble) + ": ";
    append_content(head, *p);
    head += "\n";
  }
  if (api == AgentApi::kMessages) {
    RequestInfo info = describe_request(body, /*chat=*/true);
    info.key = head + info.key;
    return info;
  }
  RequestInfo info = describe_request(body, /*chat=*/false);
  info.key = head;
  auto input = body.find("input");
  if (input == body.end()) return info;
  if (input->is_string()) {
    info.key += "user: " + input->get<std::string>() + "\n";
  } else if (input->is_array()) {
    for (const nlohmann::json& item : *input) {
      if (!item.is_object()) continue;
      auto role = item.find("role");
      auto type = item.find("type");
      if (role != item.end() && role->is_string()) {
        info.key += role->get_ref<const std::string&>();
      } else if (type != item.end() && type->is_string()) {
        info.key += type->get_ref<const std::string&>();
      }
      info.key += ": ";
      if (auto c = item.find("content"); c != item.end()) {
        append_content(info.key, *c);
      } else {
        info.key += item.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
      info.key += "\n";
    }
  }
  return info;
}

}  // namespace sluice::router
