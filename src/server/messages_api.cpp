#include "server/messages_api.h"

#include "http/http_transport.h"
#include "server/openai_response.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using Kind = ToolCallEvent::Kind;

namespace {

const char* anthropic_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

// Text of a string or a list of text blocks.
std::variant<std::string, ApiError> block_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return bad_request(where + " must be a string or a list of blocks");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& b = content[k];
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") ||
        !b["text"].is_string())
      return bad_request(where + "[" + std::to_string(k) + "]: only text blocks are allowed here");
    if (!text.empty()) text += "\n";
    text += b["text"].get<std::string>();
  }
  return text;
}

std::optional<ApiError> convert_message(const ojson& m, size_t i, ojson& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return bad_request(where + " must be an object");
  const std::string role = m.value("role", "");
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
    const std::string type = b.is_object() ? b.value("type", "") : "";
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
      if (b.value("is_error", false)) result = "Error: " + result;
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

ojson anthropic_error_json(const ApiError& e) {
  return {{"type", "error"},
          {"error", {{"type", anthropic_type(e.status)}, {"message", e.message}}}};
}

void send_anthropic_error(httplib::Response& res, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  http::send_json(res, e.status, anthropic_error_json(e));
}

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
    const std::string type = it->is_object() ? it->value("type", "") : "";
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
    if (it->value("disable_parallel_tool_use", false)) chat["parallel_tool_calls"] = false;
  }
  if (auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
    const std::string type = it->is_object() ? it->value("type", "") : "";
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

namespace {

class MessagesWriter final : public ApiWriter {
 public:
  MessagesWriter(std::string model, std::vector<std::string> stops)
      : model_(std::move(model)), stops_(std::move(stops)), id_("msg_" + random_hex(16)) {}

  void send_error(httplib::Response& res, const ApiError& e) const override {
    send_anthropic_error(res, e);
  }

  std::string stream_begin(int) override {
    ojson message = envelope();
    message["usage"] = {{"input_tokens", 0}, {"output_tokens", 0}};
    return event("message_start", {{"message", std::move(message)}}) +
           event("ping", ojson::object());
  }

  std::string events(int, const ChoiceOutput&, const std::vector<ToolCallEvent>& events,
                     const char* finish, ojson) override {
    std::string out;
    for (const ToolCallEvent& e : events) {
      switch (e.kind) {
        case Kind::kReasoning:
          if (open_ != Open::kThinking) {
            close(out);
            open(out, Open::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
          }
          text_ += e.text;
          out += delta({{"type", "thinking_delta"}, {"thinking", e.text}});
          break;
        case Kind::kContent:
          if (open_ != Open::kText) {
            close(out);
            open(out, Open::kText, {{"type", "text"}, {"text", ""}});
          }
          text_ += e.text;
          out += delta({{"type", "text_delta"}, {"text", e.text}});
          break;
        case Kind::kCallBegin:
          close(out);
          open(out, Open::kToolUse,
               {{"type", "tool_use"}, {"id", e.id}, {"name", e.name}, {"input", ojson::object()}});
          break;
        case Kind::kArguments:
          if (open_ != Open::kToolUse) break;
          text_ += e.text;
          out += delta({{"type", "input_json_delta"}, {"partial_json", e.text}});
          break;
        case Kind::kCallEnd:
          close(out);
          break;
        case Kind::kInvalidCall:
          break;
      }
    }
    if (finish) close(out);
    return out;
  }

  std::string stream_end(const std::vector<ChoiceOutput>& choices, const UsageCounts& u) override {
    std::string out;
    ojson d = {{"stop_reason", stop_reason(choices)}, {"stop_sequence", stop_sequence(choices)}};
    out += event("message_delta", {{"delta", std::move(d)}, {"usage", usage(u)}});
    return out + event("message_stop", ojson::object());
  }

  std::string stream_error(const ApiError& e) override {
    return sse("error", anthropic_error_json(e));
  }

  ojson whole(std::vector<ChoiceOutput>& choices, const UsageCounts& u) override {
    std::string unused;
    close(unused);
    ojson m = envelope();
    m["content"] = content_;
    m["stop_reason"] = stop_reason(choices);
    m["stop_sequence"] = stop_sequence(choices);
    m["usage"] = usage(u);
    return m;
  }

 private:
  enum class Open : uint8_t { kNone, kThinking, kText, kToolUse };

  ojson envelope() const {
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", ojson::array()},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr}};
  }

  static ojson usage(const UsageCounts& u) {
    return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens},
            {"output_tokens", u.completion_tokens}};
  }

  ojson stop_reason(const std::vector<ChoiceOutput>& choices) const {
    if (choices.empty() || !choices[0].finish) return "end_turn";
    const std::string_view f = choices[0].finish;
    if (f == "length") return "max_tokens";
    if (f == "tool_calls") return "tool_use";
    if (choices[0].stop_index >= 0) return "stop_sequence";
    return "end_turn";
  }

  ojson stop_sequence(const std::vector<ChoiceOutput>& choices) const {
    if (choices.empty() || choices[0].stop_index < 0 ||
        size_t(choices[0].stop_index) >= stops_.size())
      return nullptr;
    return stops_[size_t(choices[0].stop_index)];
  }

  static std::string event(const std::string& type, ojson fields) {
    ojson j;
    j["type"] = type;
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = std::move(it.value());
    return sse(type, j);
  }

  std::string delta(ojson d) const {
    return event("content_block_delta", {{"index", content_.size()}, {"delta", std::move(d)}});
  }

  void open(std::string& out, Open kind, ojson block) {
    open_ = kind;
    block_ = std::move(block);
    text_.clear();
    out += event("content_block_start", {{"index", content_.size()}, {"content_block", block_}});
  }

  void close(std::string& out) {
    switch (open_) {
      case Open::kNone:
        return;
      case Open::kThinking:
        block_["thinking"] = text_;
        break;
      case Open::kText:
        block_["text"] = text_;
        break;
      case Open::kToolUse: {
        ojson input = ojson::parse(text_.empty() ? "{}" : text_, nullptr, false);
        block_["input"] = input.is_object() ? input : ojson::object();
        break;
      }
    }
    out += event("content_block_stop", {{"index", content_.size()}});
    content_.push_back(std::move(block_));
    block_ = nullptr;
    open_ = Open::kNone;
    text_.clear();
  }

  const std::string model_;
  const std::vector<std::string> stops_;
  const std::string id_;
  ojson content_ = ojson::array();
  Open open_ = Open::kNone;
  ojson block_;
  std::string text_;
};

}  // namespace

std::unique_ptr<ApiWriter> make_messages_writer(const std::string& model,
                                                std::vector<std::string> stop_sequences) {
  return std::make_unique<MessagesWriter>(model, std::move(stop_sequences));
}

}  // namespace sluice::server
