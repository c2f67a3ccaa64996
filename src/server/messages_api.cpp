#include "server/messages_api.h"

#include "http/http_transport.h"
#include "server/openai_response.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using Kind = ToolCallEvent::Kind;

namespace {

class MessagesWriter final : public ApiWriter {
 public:
  MessagesWriter(std::string model, std::vector<std::string> stops)
      : model_(std::move(model)), stops_(std::move(stops)), id_("msg_" + random_hex(16)) {}

  void send_error(httplib::Response& res, const ApiError& e) const override {
    http::send_anthropic_error(res, e);
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
    return sse("error", e.to_anthropic_json());
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
