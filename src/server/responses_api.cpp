#include "server/responses_api.h"

#include <chrono>

#include "server/openai_response.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using Kind = ToolCallEvent::Kind;

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
