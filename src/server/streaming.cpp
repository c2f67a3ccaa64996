#include "server/streaming.h"

#include <memory>

#include "http/http_transport.h"
#include "server/openai_response.h"
#include "template/reasoning.h"

namespace sluice::server {

using http::ApiError;
using http::current_connection_socket;
using http::send_json;
using http::to_wire;
using Kind = ToolCallEvent::Kind;

std::string sse(const ojson& j) {
  return "data: " + to_wire(j) + "\n\n";
}

std::string sse(const std::string& event, const ojson& j) {
  return "event: " + event + "\ndata: " + to_wire(j) + "\n\n";
}

void ApiWriter::send_error(httplib::Response& res, const ApiError& e) const {
  http::send_error(res, e);
}

namespace {

using State = RequestChannel::State;

// OpenAI's chat.completion(.chunk) and text_completion shapes.
class OpenAiWriter final : public ApiWriter {
 public:
  OpenAiWriter(ResponseMeta meta, bool include_usage, bool parsed)
      : meta_(std::move(meta)), include_usage_(include_usage), parsed_(parsed) {}

  bool wants_logprobs() const override { return true; }

  std::string stream_begin(int n_choices) override {
    std::string out;
    if (meta_.kind != ApiKind::kChat) return out;
    for (int i = 0; i < n_choices; ++i) {
      ojson delta = ojson::object({{"role", "assistant"}, {"content", ""}});
      out += sse(chat_chunk(meta_, i, std::move(delta), nullptr, nullptr, include_usage_));
    }
    return out;
  }

  std::string events(int index, const ChoiceOutput&, const std::vector<ToolCallEvent>& events,
                     const char* finish, ojson lp) override {
    if (meta_.kind != ApiKind::kChat) {
      const std::string text = events.empty() ? "" : events[0].text;
      if (text.empty() && !finish && lp.is_null()) return "";
      return sse(completion_chunk(meta_, index, text, std::move(lp), finish, include_usage_));
    }
    if (!parsed_) {
      const std::string text = events.empty() ? "" : events[0].text;
      if (text.empty() && !finish && lp.is_null()) return "";
      ojson delta = ojson::object();
      if (!text.empty() || !finish) delta["content"] = text;
      return sse(chat_chunk(meta_, index, std::move(delta), std::move(lp), finish, include_usage_));
    }
    std::string out;
    auto chunk = [&](ojson delta, ojson chunk_lp) {
      out += sse(
          chat_chunk(meta_, index, std::move(delta), std::move(chunk_lp), nullptr, include_usage_));
    };
    // Consecutive text of one kind travels in one chunk; logprobs ride on the first one.
    std::string text;
    Kind text_kind = Kind::kContent;
    auto flush = [&] {
      if (text.empty()) return;
      if (text_kind == Kind::kContent) {
        chunk(ojson::object({{"content", text}}), std::move(lp));
      } else {
        chunk(ojson::object({{"reasoning_content", text}, {"reasoning", text}}), std::move(lp));
      }
      lp = nullptr;
      text.clear();
    };
    for (const ToolCallEvent& e : events) {
      switch (e.kind) {
        case Kind::kContent:
        case Kind::kReasoning:
          if (e.kind != text_kind) flush();
          text_kind = e.kind;
          text += e.text;
          break;
        case Kind::kCallBegin: {
          flush();
          ojson call = {{"index", e.index},
                        {"id", e.id},
                        {"type", "function"},
                        {"function", {{"name", e.name}, {"arguments", ""}}}};
          chunk(ojson::object({{"tool_calls", ojson::array({call})}}), nullptr);
          break;
        }
        case Kind::kArguments: {
          flush();
          ojson call = {{"index", e.index}, {"function", {{"arguments", e.text}}}};
          chunk(ojson::object({{"tool_calls", ojson::array({call})}}), nullptr);
          break;
        }
        case Kind::kCallEnd:
        case Kind::kInvalidCall:  // its text follows as content: the client sees what was written
          break;
      }
    }
    flush();
    if (finish || !lp.is_null())
      out += sse(chat_chunk(meta_, index, ojson::object(), std::move(lp), finish, include_usage_));
    return out;
  }

  std::string stream_end(const std::vector<ChoiceOutput>&, const UsageCounts& u) override {
    std::string out;
    if (include_usage_)
      out += sse(usage_chunk(meta_, u.prompt_tokens, u.completion_tokens, u.cached_tokens));
    return out + "data: [DONE]\n\n";
  }

  std::string stream_error(const ApiError& e) override {
    return sse(e.to_json()) + "data: [DONE]\n\n";
  }

  ojson whole(std::vector<ChoiceOutput>& choices, const UsageCounts& u) override {
    ojson out = ojson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      ChoiceOutput& c = choices[i];
      if (meta_.kind != ApiKind::kChat) {
        out.push_back(completion_choice(int(i), c.text, std::move(c.logprobs), c.finish));
        continue;
      }
      if (!parsed_) {
        out.push_back(chat_choice(int(i), c.text, std::move(c.logprobs), c.finish));
        continue;
      }
      ojson choice = chat_choice(int(i), c.content, std::move(c.logprobs), c.finish);
      if (!c.reasoning.empty()) {
        choice["message"]["reasoning_content"] = c.reasoning;
        choice["message"]["reasoning"] = c.reasoning;
      }
      if (!c.calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& call : c.calls)
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        if (c.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = std::move(calls);
      }
      out.push_back(std::move(choice));
    }
    return full_response(meta_, std::move(out), u.prompt_tokens, u.completion_tokens,
                         u.cached_tokens);
  }

 private:
  ResponseMeta meta_;
  bool include_usage_;
  bool parsed_;  // chat text goes through a MessageParser
};

// A generation in flight, shared by the handler, the content provider and its releaser.
struct Generation {
  ApiKind kind = ApiKind::kCompletion;
  int n_logprobs = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of them, found in the prefix cache at admission
  const Tokenizer* tokenizer = nullptr;
  EngineBridge* bridge = nullptr;
  std::shared_ptr<RequestChannel> channel;
  std::vector<ChoiceOutput> choices;
  std::vector<std::unique_ptr<MessageParser>> parsers;  // per choice; null: text as it comes
  std::unique_ptr<ApiWriter> writer;
  State state = State::kPending;   // last state seen on the channel
  std::vector<ChoiceEvent> early;  // events that arrived with the admission
  bool ended = false;              // the channel reached a terminal state (handler thread only)
  std::function<void(const RequestChannel&, ojson&)> decorate;  // GenerationExtras::decorate

  UsageCounts usage() const {
    UsageCounts u;
    u.prompt_tokens = prompt_tokens;
    u.cached_tokens = cached_tokens;
    for (const ChoiceOutput& c : choices) u.completion_tokens += c.n_tokens;
    return u;
  }

  // Client gone or stream abandoned: cancel and wait until the engine thread let go of it.
  void abandon() {
    if (ended) return;
    bridge->cancel(*channel);
    channel->wait_terminal();
    ended = true;
  }
};

// Folds parsed events into their choice.
void fold(ChoiceOutput& c, const std::vector<ToolCallEvent>& events) {
  for (const ToolCallEvent& e : events) {
    switch (e.kind) {
      case Kind::kContent:
        c.content += e.text;
        break;
      case Kind::kReasoning:
        c.reasoning += e.text;
        break;
      case Kind::kCallBegin:
        c.calls.push_back(ToolCall{e.id, e.name, ""});
        break;
      case Kind::kArguments:
        if (e.index >= 0 && size_t(e.index) < c.calls.size())
          c.calls[size_t(e.index)].arguments += e.text;
        break;
      case Kind::kCallEnd:
        ++c.n_complete;
        break;
      case Kind::kInvalidCall:
        break;
    }
  }
}

// Folds one engine event into its choice. Streaming: appends what to send to `out`.
void absorb(Generation& g, ChoiceEvent& ce, bool streaming, std::string& out) {
  ChoiceOutput& c = g.choices[size_t(ce.choice)];
  const EngineEvent& ev = ce.event;
  c.n_tokens += int64_t(ev.tokens.size());
  if (ev.stop_index >= 0) c.stop_index = ev.stop_index;
  const char* finish = ev.finished() ? finish_reason_text(ev.finish) : nullptr;

  ojson lp = nullptr;
  if (g.n_logprobs >= 0 && !ev.samples.empty()) {
    if (g.kind == ApiKind::kChat) {
      ojson content = chat_logprobs(*g.tokenizer, ev);
      if (streaming) {
        lp = ojson::object({{"content", std::move(content)}});
      } else {
        if (c.logprobs.is_null()) c.logprobs = ojson::object({{"content", ojson::array()}});
        for (ojson& e : content) c.logprobs["content"].push_back(std::move(e));
      }
    } else {
      ojson& target = streaming ? lp : c.logprobs;
      if (target.is_null()) target = empty_completion_logprobs();
      append_completion_logprobs(target, *g.tokenizer, ev, c.text.size());
    }
  }
  c.text += ev.text;
  std::vector<ToolCallEvent> events;
  if (MessageParser* parser = g.parsers[size_t(ce.choice)].get()) {
    events = parser->feed(ev.text);
    if (finish) {
      std::vector<ToolCallEvent> last = parser->finish();
      events.insert(events.end(), std::make_move_iterator(last.begin()),
                    std::make_move_iterator(last.end()));
    }
  } else if (!ev.text.empty()) {
    ToolCallEvent e;
    e.text = ev.text;
    events.push_back(std::move(e));
  }
  fold(c, events);
  // A message with a call finishes with "tool_calls".
  if (finish && c.n_complete > 0 && std::string_view(finish) == "stop") finish = "tool_calls";
  if (finish) c.finish = finish;
  std::string s = g.writer->events(ce.choice, c, events, finish, std::move(lp));
  if (streaming) out += s;
}

void answer_whole(Generation& g, httplib::Response& res) {
  State state = g.state;
  std::vector<ChoiceEvent> events = std::move(g.early);
  std::string unused;
  for (ChoiceEvent& ce : events) absorb(g, ce, /*streaming=*/false, unused);
  while (!RequestChannel::terminal(state)) {
    events.clear();
    state = g.channel->wait(events, state);
    for (ChoiceEvent& ce : events) absorb(g, ce, /*streaming=*/false, unused);
  }
  g.ended = true;
  if (state != State::kDone) {
    g.writer->send_error(res, g.channel->error());
    return;
  }
  const UsageCounts usage = g.usage();
  ojson answer = g.writer->whole(g.choices, usage);
  if (g.decorate) g.decorate(*g.channel, answer);
  send_json(res, 200, answer);
}

// The single provider call that writes the whole stream (see streaming.h).
bool write_stream(Generation& g, httplib::DataSink& sink) {
  std::string out = g.writer->stream_begin(int(g.choices.size()));
  State state = g.state;
  std::vector<ChoiceEvent> events = std::move(g.early);
  bool first = true;
  while (true) {
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        g.abandon();
        return false;
      }
      out.clear();
    }
    if (g.ended) break;
    if (!first) {
      events.clear();
      state = g.channel->wait(events, state);
    }
    first = false;
    for (ChoiceEvent& ce : events) absorb(g, ce, /*streaming=*/true, out);
    if (RequestChannel::terminal(state)) {
      g.ended = true;
      if (state == State::kDone) {
        const UsageCounts usage = g.usage();
        out += g.writer->stream_end(g.choices, usage);
      } else {
        out += g.writer->stream_error(g.channel->error());
      }
    }
  }
  sink.done();
  return true;
}

}  // namespace

void serve_generation(CompletionRequest request, const ModelContext& model, EngineBridge& bridge,
                      ServerMetrics& metrics, httplib::Response& res, GenerationExtras extras) {
  auto g = std::make_shared<Generation>();
  g->kind = request.kind;
  g->tokenizer = model.tokenizer;
  g->bridge = &bridge;
  const bool parsed =
      request.kind == ApiKind::kChat &&
      (request.tool_format != ToolCallFormat::kNone || request.reasoning != ReasoningFormat::kNone);
  g->writer = std::move(extras.writer);
  if (!g->writer) {
    g->writer = std::make_unique<OpenAiWriter>(make_response_meta(request.kind, model.name),
                                               request.include_usage, parsed);
  }
  g->n_logprobs = g->writer->wants_logprobs() ? request.n_logprobs : -1;
  g->decorate = std::move(extras.decorate);

  GenerationJob job;
  job.watch_socket = current_connection_socket();
  job.imports = std::move(extras.imports);
  job.pin_prompt = extras.pin_prompt;
  int64_t generation_prompt_tokens = 0;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    g->prompt_tokens += int64_t(request.prompts[p].size());
    for (int i = 0; i < request.n; ++i) {
      const int index = int(p) * request.n + i;
      job.prompts.push_back(request.prompts[p]);
      job.params.push_back(request.params_for(index));
      generation_prompt_tokens += int64_t(request.prompts[p].size());
    }
  }
  g->choices.resize(job.prompts.size());
  g->parsers.resize(job.prompts.size());
  if (parsed) {
    for (auto& p : g->parsers)
      p = std::make_unique<MessageParser>(request.reasoning, request.reasoning_open,
                                          request.tool_format, request.tool_types);
  }

  auto submitted = bridge.submit(std::move(job));
  if (auto* e = std::get_if<ApiError>(&submitted)) {
    g->writer->send_error(res, *e);
    return;
  }
  g->channel = std::get<std::shared_ptr<RequestChannel>>(std::move(submitted));
  // Wait for admission so that an engine-side rejection is still an HTTP error status.
  g->state = g->channel->wait(g->early, State::kPending);
  if (g->state == State::kFailed || g->state == State::kCancelled) {
    g->ended = true;
    g->writer->send_error(res, g->channel->error());
    return;
  }
  metrics.count_prompt_tokens(uint64_t(generation_prompt_tokens));
  g->cached_tokens = g->channel->cached_tokens();

  if (!request.stream) {
    answer_whole(*g, res);
    return;
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [g](size_t, httplib::DataSink& sink) { return write_stream(*g, sink); },
      // Runs when the response is destroyed, on this connection's thread, before its socket
      // closes: a stream that never started or broke off is cancelled and acknowledged here.
      [g](bool) { g->abandon(); });
}

}  // namespace sluice::server
