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

}  // namespace sluice::router
