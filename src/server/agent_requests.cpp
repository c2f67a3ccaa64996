#include "server/agent_requests.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using ojson = nlohmann::ordered_json;

namespace {

// obj[key] when obj is an object and it is a string, else "" (never throws: bodies are untrusted).
std::string str(const ojson& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// obj[key] when it is a boolean, else false.
bool flag(const ojson& obj, const char* key) {
  if (!obj.is_object()) return false;
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

void ResponseStore::put(const std::string& id, Entry entry) {
  constexpr auto kReplace = nlohmann::ordered_json::error_handler_t::replace;
  const size_t bytes = entry.response.dump(-1, ' ', false, kReplace).size() +
                       entry.messages.dump(-1, ' ', false, kReplace).size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = slots_.find(id); it != slots_.end()) {
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  if (bytes > max_bytes_ || max_entries_ == 0) return;
  lru_.push_front(id);
  slots_[id] = Slot{std::move(entry), bytes, lru_.begin()};
  bytes_ += bytes;
  while (slots_.size() > max_entries_ || bytes_ > max_bytes_) {
    auto victim = slots_.find(lru_.back());
    bytes_ -= victim->second.bytes;
    slots_.erase(victim);
    lru_.pop_back();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return false;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  slots_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.size();
}

namespace {

std::variant<std::string, ApiError> text_of(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    return bad_request(where + " must be a string or a list of content parts", "input");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& part = content[k];
    const std::string type = str(part, "type");
    if ((type != "input_text" && type != "output_text" && type != "text") ||
        !part.contains("text") || !part["text"].is_string()) {
      return bad_request(where + "[" + std::to_string(k) + "]: only input_text and output_text " +
                             "parts are supported (got '" + type + "')",
                         "input");
    }
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

// Responses input items -> chat messages, appended to `out`.
std::optional<ApiError> input_messages(const ojson& input, ojson& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array()) return bad_request("'input' must be a string or a list of items", "input");
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return bad_request(where + " must be an object", "input");
    std::string type = str(item, "type");
    if (type.empty() && item.contains("role")) type = "message";
    if (type == "message") {
      std::string role = str(item, "role");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        return bad_request(where + ".role must be 'user', 'assistant', 'system' or 'developer'",
                           "input");
      auto text = text_of(item.contains("content") ? item["content"] : ojson(), where + ".content");
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      out.push_back({{"role", role}, {"content", std::get<std::string>(text)}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string())
          return bad_request(where + "." + key + " must be a string", "input");
      ojson call = {{"id", item["call_id"]},
                    {"type", "function"},
                    {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Calls of one turn are one assistant message.
      if (!out.empty() && out.back()["role"] == "assistant" && out.back().contains("tool_calls")) {
        out.back()["tool_calls"].push_back(std::move(call));
      } else {
        out.push_back(
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({call})}});
      }
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return bad_request(where + ".call_id must be a string", "input");
      auto text = text_of(item.contains("output") ? item["output"] : ojson(), where + ".output");
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      out.push_back({{"role", "tool"},
                     {"tool_call_id", item["call_id"]},
                     {"content", std::get<std::string>(text)}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not shown to the model again (as chat templates do)
    } else {
      return bad_request(where + ": input items of type '" + type + "' are not supported", "input");
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<ResponsesRequest, ApiError> parse_responses_request(const ojson& body,
                                                                 const ResponseStore& store) {
  ResponsesRequest r;
  ojson& chat = r.chat_body;
  chat = ojson::object();
  ojson history = ojson::array();
  std::string previous;
  if (auto it = body.find("previous_response_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return bad_request("'previous_response_id' must be a string", "previous_response_id");
    previous = it->get<std::string>();
    std::optional<ResponseStore::Entry> e = store.get(previous);
    if (!e) {
      ApiError err = bad_request("previous response '" + previous +
                                     "' is not stored here (stored responses are kept in memory "
                                     "and the oldest are dropped)",
                                 "previous_response_id", "previous_response_not_found");
      err.status = 404;
      return err;
    }
    history = std::move(e->messages);
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return bad_request("'input' is required", "input");
  if (auto e = input_messages(*input, history)) return *e;
  r.history = history;
  ojson messages = ojson::array();
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", *it}});
  }
  for (const ojson& m : history) messages.push_back(m);
  if (messages.empty()) return bad_request("'input' must not be empty", "input");
  chat["messages"] = std::move(messages);

  for (const char* key :
       {"model", "temperature", "top_p", "top_k", "min_p", "seed", "parallel_tool_calls", "stream",
        "presence_penalty", "frequency_penalty", "chat_template_kwargs", "reasoning_budget"}) {
    if (auto it = body.find(key); it != body.end()) chat[key] = *it;
  }
  if (auto it = body.find("max_output_tokens"); it != body.end() && !it->is_null())
    chat["max_tokens"] = *it;
  if (auto it = body.find("n"); it != body.end() && !it->is_null())
    return bad_request("'n' is not a Responses field (one response per request)", "n");
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return bad_request("'tools' must be a list", "tools");
    ojson tools = ojson::array();
    for (size_t i = 0; i < it->size(); ++i) {
      const ojson& t = (*it)[i];
      if (!t.is_object() || str(t, "type") != "function")
        return bad_request("tools[" + std::to_string(i) +
                               "]: only function tools are supported (got '" + str(t, "type") +
                               "')",
                           "tools");
      ojson fn = ojson::object();
      for (const char* key : {"name", "description", "parameters", "strict"})
        if (auto f = t.find(key); f != t.end()) fn[key] = *f;
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (str(*it, "type") == "function" && it->contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*it)["name"]}}}};
    } else {
      chat["tool_choice"] = *it;
    }
  }
  if (auto it = body.find("text"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("'text' must be an object", "text");
    if (auto f = it->find("format"); f != it->end() && !f->is_null()) {
      const std::string type = str(*f, "type");
      if (type == "json_object") {
        chat["response_format"] = {{"type", "json_object"}};
      } else if (type == "json_schema") {
        ojson js = ojson::object();
        for (const char* key : {"name", "schema", "strict"})
          if (auto k = f->find(key); k != f->end()) js[key] = *k;
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else if (type != "text") {
        return bad_request("'text.format.type' must be 'text', 'json_object' or 'json_schema'",
                           "text.format");
      }
    }
  }
  if (auto it = body.find("reasoning"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("'reasoning' must be an object", "reasoning");
    if (auto e = it->find("effort"); e != it->end() && !e->is_null()) chat["reasoning_effort"] = *e;
  }
  if (auto it = body.find("store"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad_request("'store' must be a boolean", "store");
    r.store = it->get<bool>();
  }
  if (auto it = body.find("stream"); it != body.end() && it->is_boolean())
    r.stream = it->get<bool>();

  ojson& echo = r.echo;
  echo = ojson::object();
  auto field = [&](const char* key, ojson fallback) {
    auto it = body.find(key);
    echo[key] = it == body.end() ? std::move(fallback) : *it;
  };
  field("instructions", nullptr);
  field("max_output_tokens", nullptr);
  field("parallel_tool_calls", true);
  echo["previous_response_id"] = previous.empty() ? ojson(nullptr) : ojson(previous);
  field("reasoning", {{"effort", nullptr}, {"summary", nullptr}});
  echo["store"] = r.store;
  field("temperature", 1.0);
  field("text", {{"format", {{"type", "text"}}}});
  field("tool_choice", "auto");
  field("tools", ojson::array());
  field("top_p", 1.0);
  echo["truncation"] = "disabled";
  field("metadata", ojson::object());
  return r;
}

namespace {

// Text of a string or a list of text blocks.
std::variant<std::string, ApiError> block_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return bad_request(where + " must be a string or a list of blocks");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& b = content[k];
    if (!b.is_object() || str(b, "type") != "text" || !b.contains("text") || !b["text"].is_string())
      return bad_request(where + "[" + std::to_string(k) + "]: only text blocks are allowed here");
    if (!text.empty()) text += "\n";
    text += b["text"].get<std::string>();
  }
  return text;
}

std::optional<ApiError> convert_message(const ojson& m, size_t i, ojson& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return bad_request(where + " must be an object");
  const std::string role = str(m, "role");
  if (role != "user" && role != "assistant")
    return bad_request(where + ".role must be 'user' or 'assistant'");
  auto content = m.find("content");
  if (content == m.end()) return bad_request(where + ".content is required");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return std::nullopt;
  }
  if (!content->is_array()) return bad_request(where + ".content must be a string or blocks");
  std::string text, thinking;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const ojson& b = (*content)[k];
    const std::string bw = where + ".content[" + std::to_string(k) + "]";
    const std::string type = str(b, "type");
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        return bad_request(bw + ".text must be a string");
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "thinking" && role == "assistant") {
      if (b.contains("thinking") && b["thinking"].is_string())
        thinking += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
          !b["name"].is_string())
        return bad_request(bw + ": a tool_use block needs a string id and name");
      const ojson input = b.contains("input") ? b["input"] : ojson::object();
      if (!input.is_object()) return bad_request(bw + ".input must be an object");
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return bad_request(bw + ".tool_use_id must be a string");
      std::string result;
      if (auto c = b.find("content"); c != b.end() && !c->is_null()) {
        auto t = block_text(*c, bw + ".content");
        if (auto* e = std::get_if<ApiError>(&t)) return *e;
        result = std::get<std::string>(t);
      }
      if (flag(b, "is_error")) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else {
      return bad_request(bw + ": '" + type + "' blocks are not supported in " + role + " messages");
    }
  }
  if (role == "user") {
    if (!text.empty() || out.empty() || out.back()["role"] != "tool")
      out.push_back({{"role", "user"}, {"content", text}});
    return std::nullopt;
  }
  ojson msg = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!calls.empty()) {
    if (text.empty()) msg["content"] = nullptr;
    msg["tool_calls"] = std::move(calls);
  }
  out.push_back(std::move(msg));
  return std::nullopt;
}

}  // namespace

std::variant<ojson, ApiError> messages_to_chat(const ojson& body, bool count_tokens) {
  ojson chat = ojson::object();
  ojson messages = ojson::array();
  if (auto it = body.find("system"); it != body.end() && !it->is_null()) {
    auto t = block_text(*it, "'system'");
    if (auto* e = std::get_if<ApiError>(&t)) return *e;
    messages.push_back({{"role", "system"}, {"content", std::get<std::string>(t)}});
  }
  auto msgs = body.find("messages");
  if (msgs == body.end() || !msgs->is_array() || msgs->empty())
    return bad_request("'messages' must be a non-empty list", "messages");
  for (size_t i = 0; i < msgs->size(); ++i)
    if (auto e = convert_message((*msgs)[i], i, messages)) return *e;
  chat["messages"] = std::move(messages);

  if (auto it = body.find("max_tokens"); it != body.end() && !it->is_null()) {
    chat["max_tokens"] = *it;
  } else if (!count_tokens) {
    return bad_request("'max_tokens' is required", "max_tokens");
  }
  for (const char* key : {"model", "temperature", "top_p", "top_k", "stream"})
    if (auto it = body.find(key); it != body.end()) chat[key] = *it;
  if (auto it = body.find("temperature");
      it != body.end() && it->is_number() && (it->get<double>() < 0 || it->get<double>() > 1))
    return bad_request("'temperature' must be in [0, 1]", "temperature");
  if (auto it = body.find("stop_sequences"); it != body.end() && !it->is_null()) chat["stop"] = *it;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return bad_request("'tools' must be a list", "tools");
    ojson tools = ojson::array();
    for (size_t i = 0; i < it->size(); ++i) {
      const ojson& t = (*it)[i];
      if (!t.is_object() || !t.contains("name") || !t.contains("input_schema") ||
          (t.contains("type") && t["type"] != "custom"))
        return bad_request("tools[" + std::to_string(i) +
                               "]: only client tools {name, description, input_schema} are "
                               "supported",
                           "tools");
      ojson fn = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    const std::string type = str(*it, "type");
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      chat["tool_choice"] = "none";
    } else if (type == "tool" && it->contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*it)["name"]}}}};
    } else {
      return bad_request("'tool_choice.type' must be 'auto', 'any', 'tool' (with a name) or 'none'",
                         "tool_choice");
    }
    if (flag(*it, "disable_parallel_tool_use")) chat["parallel_tool_calls"] = false;
  }
  if (auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
    const std::string type = str(*it, "type");
    if (type == "enabled") {
      chat["chat_template_kwargs"] = {{"enable_thinking", true}};
      if (auto b = it->find("budget_tokens"); b != it->end() && !b->is_null()) {
        if (!b->is_number_integer() || b->get<int64_t>() < 0)
          return bad_request("'thinking.budget_tokens' must be a non-negative integer", "thinking");
        chat["reasoning_budget"] = *b;
      }
    } else if (type == "disabled") {
      chat["chat_template_kwargs"] = {{"enable_thinking", false}};
    } else {
      return bad_request("'thinking.type' must be 'enabled' or 'disabled'", "thinking");
    }
  }
  return chat;
}

}  // namespace sluice::server
