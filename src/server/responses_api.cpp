#include "server/responses_api.h"

#include <chrono>

#include "server/openai_response.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using Kind = ToolCallEvent::Kind;

void ResponseStore::put(const std::string& id, Entry entry) {
  const size_t bytes = entry.response.dump().size() + entry.messages.dump().size();
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
    const std::string type = part.is_object() ? part.value("type", "") : "";
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
    std::string type = item.value("type", "");
    if (type.empty() && item.contains("role")) type = "message";
    if (type == "message") {
      std::string role = item.value("role", "");
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
      if (!t.is_object() || t.value("type", "") != "function")
        return bad_request("tools[" + std::to_string(i) +
                               "]: only function tools are supported (got '" +
                               (t.is_object() ? t.value("type", "") : std::string()) + "')",
                           "tools");
      ojson fn = ojson::object();
      for (const char* key : {"name", "description", "parameters", "strict"})
        if (auto f = t.find(key); f != t.end()) fn[key] = *f;
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_object() && it->value("type", "") == "function" && it->contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*it)["name"]}}}};
    } else {
      chat["tool_choice"] = *it;
    }
  }
  if (auto it = body.find("text"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("'text' must be an object", "text");
    if (auto f = it->find("format"); f != it->end() && !f->is_null()) {
      const std::string type = f->is_object() ? f->value("type", "") : "";
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

class ResponsesWriter final : public ApiWriter {
 public:
  ResponsesWriter(const ResponsesRequest& request, std::string model, const Tokenizer& tokenizer,
                  ResponseStore& store)
      : echo_(request.echo),
        history_(request.history),
        store_flag_(request.store),
        model_(std::move(model)),
        tokenizer_(tokenizer),
        store_(store),
        id_("resp_" + random_hex(16)),
        created_(std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()) {}

  std::string stream_begin(int) override {
    ojson r = response("in_progress", nullptr);
    std::string out = event("response.created", {{"response", r}});
    return out + event("response.in_progress", {{"response", std::move(r)}});
  }

  std::string events(int, const ChoiceOutput&, const std::vector<ToolCallEvent>& events,
                     const char* finish, ojson) override {
    std::string out;
    for (const ToolCallEvent& e : events) {
      switch (e.kind) {
        case Kind::kReasoning:
          if (open_ != Open::kReasoning) {
            close(out);
            open(out, Open::kReasoning,
                 {{"id", "rs_" + random_hex(16)},
                  {"type", "reasoning"},
                  {"summary", ojson::array()}});
          }
          text_ += e.text;
          out += event("response.reasoning_text.delta", {{"item_id", item_["id"]},
                                                         {"output_index", output_.size()},
                                                         {"content_index", 0},
                                                         {"delta", e.text}});
          break;
        case Kind::kContent:
          if (open_ != Open::kMessage) {
            close(out);
            open(out, Open::kMessage,
                 {{"id", "msg_" + random_hex(16)},
                  {"type", "message"},
                  {"status", "in_progress"},
                  {"role", "assistant"},
                  {"content", ojson::array()}});
            out += event("response.content_part.added", {{"item_id", item_["id"]},
                                                         {"output_index", output_.size()},
                                                         {"content_index", 0},
                                                         {"part", text_part("")}});
          }
          text_ += e.text;
          out += event("response.output_text.delta", {{"item_id", item_["id"]},
                                                      {"output_index", output_.size()},
                                                      {"content_index", 0},
                                                      {"delta", e.text},
                                                      {"logprobs", ojson::array()}});
          break;
        case Kind::kCallBegin:
          close(out);
          open(out, Open::kCall,
               {{"id", "fc_" + random_hex(16)},
                {"type", "function_call"},
                {"status", "in_progress"},
                {"arguments", ""},
                {"call_id", e.id},
                {"name", e.name}});
          break;
        case Kind::kArguments:
          if (open_ != Open::kCall) break;
          text_ += e.text;
          out += event(
              "response.function_call_arguments.delta",
              {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"delta", e.text}});
          break;
        case Kind::kCallEnd:
          close(out);
          break;
        case Kind::kInvalidCall:
          break;
      }
    }
    if (finish) {
      close(out);
      finish_ = finish;
    }
    return out;
  }

  std::string stream_end(const std::vector<ChoiceOutput>& choices,
                         const UsageCounts& usage) override {
    ojson r = finished(choices, usage);
    const std::string type =
        r["status"] == "incomplete" ? "response.incomplete" : "response.completed";
    return event(type, {{"response", std::move(r)}});
  }

  std::string stream_error(const ApiError& e) override {
    std::string out =
        event("error", {{"code", e.code.empty() ? ojson(e.type) : ojson(e.code)},
                        {"message", e.message},
                        {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)}});
    ojson r = response("failed", nullptr);
    r["error"] = {{"code", e.code.empty() ? e.type : e.code}, {"message", e.message}};
    return out + event("response.failed", {{"response", std::move(r)}});
  }

  ojson whole(std::vector<ChoiceOutput>& choices, const UsageCounts& usage) override {
    return finished(choices, usage);
  }

 private:
  enum class Open : uint8_t { kNone, kReasoning, kMessage, kCall };

  static ojson text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}};
  }

  std::string event(const std::string& type, ojson fields) {
    ojson j;
    j["type"] = type;
    j["sequence_number"] = seq_++;
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = std::move(it.value());
    return sse(type, j);
  }

  void open(std::string& out, Open kind, ojson item) {
    open_ = kind;
    item_ = std::move(item);
    text_.clear();
    out += event("response.output_item.added", {{"output_index", output_.size()}, {"item", item_}});
  }

  // Ends the open item: its done events, and the item joins the output.
  void close(std::string& out) {
    const ojson index = output_.size();
    switch (open_) {
      case Open::kNone:
        return;
      case Open::kReasoning:
        out += event("response.reasoning_text.done", {{"item_id", item_["id"]},
                                                      {"output_index", index},
                                                      {"content_index", 0},
                                                      {"text", text_}});
        item_["content"] = ojson::array({{{"type", "reasoning_text"}, {"text", text_}}});
        break;
      case Open::kMessage:
        out += event("response.output_text.done", {{"item_id", item_["id"]},
                                                   {"output_index", index},
                                                   {"content_index", 0},
                                                   {"text", text_},
                                                   {"logprobs", ojson::array()}});
        out += event("response.content_part.done", {{"item_id", item_["id"]},
                                                    {"output_index", index},
                                                    {"content_index", 0},
                                                    {"part", text_part(text_)}});
        item_["content"] = ojson::array({text_part(text_)});
        item_["status"] = "completed";
        answer_ += text_;
        break;
      case Open::kCall:
        out += event("response.function_call_arguments.done",
                     {{"item_id", item_["id"]}, {"output_index", index}, {"arguments", text_}});
        item_["arguments"] = text_;
        item_["status"] = "completed";
        calls_.push_back({{"id", item_["call_id"]},
                          {"type", "function"},
                          {"function", {{"name", item_["name"]}, {"arguments", text_}}}});
        break;
    }
    out += event("response.output_item.done", {{"output_index", index}, {"item", item_}});
    output_.push_back(std::move(item_));
    item_ = nullptr;
    open_ = Open::kNone;
    text_.clear();
  }

  ojson response(const std::string& status, ojson usage) const {
    ojson r;
    r["id"] = id_;
    r["object"] = "response";
    r["created_at"] = created_;
    r["status"] = status;
    r["background"] = false;
    r["error"] = nullptr;
    r["incomplete_details"] = nullptr;
    r["model"] = model_;
    r["output"] = output_;
    for (auto it = echo_.begin(); it != echo_.end(); ++it) r[it.key()] = it.value();
    r["usage"] = std::move(usage);
    return r;
  }

  ojson finished(const std::vector<ChoiceOutput>& choices, const UsageCounts& u) {
    std::string unused;
    close(unused);
    int64_t reasoning_tokens = 0;
    for (const ChoiceOutput& c : choices) {
      if (c.reasoning.empty()) continue;
      EncodeOptions eo;
      eo.add_special = false;
      if (auto ids = tokenizer_.encode(c.reasoning, eo); ids.ok())
        reasoning_tokens += int64_t(ids->size());
    }
    ojson usage = {{"input_tokens", u.prompt_tokens},
                   {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                   {"output_tokens", u.completion_tokens},
                   {"output_tokens_details",
                    {{"reasoning_tokens", std::min(reasoning_tokens, u.completion_tokens)}}},
                   {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    const bool incomplete = finish_ && std::string_view(finish_) == "length";
    ojson r = response(incomplete ? "incomplete" : "completed", std::move(usage));
    if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r["output_text"] = answer_;
    if (store_flag_) {
      ojson messages = history_;
      ojson reply = {{"role", "assistant"}, {"content", answer_}};
      if (!calls_.empty()) {
        if (answer_.empty()) reply["content"] = nullptr;
        reply["tool_calls"] = calls_;
      }
      messages.push_back(std::move(reply));
      store_.put(id_, ResponseStore::Entry{r, std::move(messages)});
    }
    return r;
  }

  const ojson echo_;
  const ojson history_;
  const bool store_flag_;
  const std::string model_;
  const Tokenizer& tokenizer_;
  ResponseStore& store_;
  const std::string id_;
  const int64_t created_;
  int64_t seq_ = 0;
  ojson output_ = ojson::array();
  Open open_ = Open::kNone;
  ojson item_;
  std::string text_;    // the open item's text or arguments
  std::string answer_;  // all message text
  ojson calls_ = ojson::array();
  const char* finish_ = nullptr;
};

}  // namespace

std::unique_ptr<ApiWriter> make_responses_writer(const ResponsesRequest& request,
                                                 const std::string& model,
                                                 const Tokenizer& tokenizer, ResponseStore& store) {
  return std::make_unique<ResponsesWriter>(request, model, tokenizer, store);
}

}  // namespace sluice::server
