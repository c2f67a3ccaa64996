#include "server/streaming.h"

#include <memory>

#include "http/http_transport.h"
#include "server/openai_response.h"

namespace sluice::server {

using http::ApiError;
using http::current_connection_socket;
using http::send_error;
using http::send_json;
using http::to_wire;
namespace {

using State = RequestChannel::State;

// What one choice has produced so far.
struct ChoiceState {
  std::string text;
  int64_t n_tokens = 0;
  const char* finish = nullptr;
  ojson logprobs;  // non-streamed answer: accumulated (chat: content array; completions: object)
  // Tool calls (CompletionRequest::tool_format): the parser, and what it found so far.
  std::unique_ptr<ToolCallParser> parser;
  std::string content;          // text outside tool calls
  std::vector<ToolCall> calls;  // begun calls, arguments so far
  int n_complete = 0;           // calls that ended
};

// A generation in flight, shared by the handler, the content provider and its releaser.
struct Generation {
  ApiKind kind = ApiKind::kCompletion;
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  bool include_usage = false;
  int n_logprobs = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of them, found in the prefix cache at admission
  ResponseMeta meta;
  const Tokenizer* tokenizer = nullptr;
  EngineBridge* bridge = nullptr;
  std::shared_ptr<RequestChannel> channel;
  std::vector<ChoiceState> choices;
  State state = State::kPending;   // last state seen on the channel
  std::vector<ChoiceEvent> early;  // events that arrived with the admission
  bool ended = false;              // the channel reached a terminal state (handler thread only)
  std::function<void(const RequestChannel&, ojson&)> decorate;  // GenerationExtras::decorate

  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const ChoiceState& c : choices) n += c.n_tokens;
    return n;
  }

  // Client gone or stream abandoned: cancel and wait until the engine thread let go of it.
  void abandon() {
    if (ended) return;
    bridge->cancel(*channel);
    channel->wait_terminal();
    ended = true;
  }
};

std::string sse(const ojson& j) {
  return "data: " + to_wire(j) + "\n\n";
}

// Tool-call parsing of one choice's new text: content and calls as they become certain
// (streamed as OpenAI's delta.content / delta.tool_calls[i] chunks). A message with a call
// finishes with "tool_calls".
void absorb_tool_calls(Generation& g, int index, ChoiceState& c, const std::string& text,
                       const char* finish, ojson lp, bool streaming, std::string& out) {
  std::vector<ToolCallEvent> events = c.parser->feed(text);
  if (finish) {
    std::vector<ToolCallEvent> last = c.parser->finish();
    events.insert(events.end(), std::make_move_iterator(last.begin()),
                  std::make_move_iterator(last.end()));
  }
  std::string content;  // consecutive content events travel in one chunk
  auto flush_content = [&] {
    if (content.empty()) return;
    if (streaming)
      out += sse(chat_chunk(g.meta, index, ojson::object({{"content", content}}), std::move(lp),
                            nullptr, g.include_usage));
    lp = nullptr;
    content.clear();
  };
  for (ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::kContent:
        c.content += e.text;
        content += e.text;
        continue;
      case ToolCallEvent::Kind::kCallBegin: {
        flush_content();
        c.calls.push_back(ToolCall{e.id, e.name, ""});
        ojson call = {{"index", e.index},
                      {"id", e.id},
                      {"type", "function"},
                      {"function", {{"name", e.name}, {"arguments", ""}}}};
        if (streaming)
          out +=
              sse(chat_chunk(g.meta, index, ojson::object({{"tool_calls", ojson::array({call})}}),
                             nullptr, nullptr, g.include_usage));
        break;
      }
      case ToolCallEvent::Kind::kArguments: {
        flush_content();
        if (e.index >= 0 && size_t(e.index) < c.calls.size())
          c.calls[size_t(e.index)].arguments += e.text;
        ojson call = {{"index", e.index}, {"function", {{"arguments", e.text}}}};
        if (streaming)
          out +=
              sse(chat_chunk(g.meta, index, ojson::object({{"tool_calls", ojson::array({call})}}),
                             nullptr, nullptr, g.include_usage));
        break;
      }
      case ToolCallEvent::Kind::kCallEnd:
        ++c.n_complete;
        break;
      case ToolCallEvent::Kind::kInvalidCall:
        // Its text follows as content: the client sees what the model wrote.
        break;
    }
  }
  flush_content();
  if (finish && c.n_complete > 0 && std::string_view(finish) == "stop")
    c.finish = finish = "tool_calls";
  if (streaming && (finish || !lp.is_null()))
    out += sse(chat_chunk(g.meta, index, ojson::object(), std::move(lp), finish, g.include_usage));
}

// Folds one event into its choice. Streaming: appends the chunk to send (if any) to `out`.
void absorb(Generation& g, ChoiceEvent& ce, bool streaming, std::string& out) {
  ChoiceState& c = g.choices[size_t(ce.choice)];
  const EngineEvent& ev = ce.event;
  c.n_tokens += int64_t(ev.tokens.size());
  const char* finish = ev.finished() ? finish_reason_text(ev.finish) : nullptr;
  if (finish) c.finish = finish;

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
  if (c.parser) {
    absorb_tool_calls(g, ce.choice, c, ev.text, finish, std::move(lp), streaming, out);
    return;
  }
  if (!streaming || (ev.text.empty() && !finish && lp.is_null())) return;
  if (g.kind == ApiKind::kChat) {
    ojson delta = ojson::object();
    if (!ev.text.empty() || !finish) delta["content"] = ev.text;
    out += sse(
        chat_chunk(g.meta, ce.choice, std::move(delta), std::move(lp), finish, g.include_usage));
  } else {
    out +=
        sse(completion_chunk(g.meta, ce.choice, ev.text, std::move(lp), finish, g.include_usage));
  }
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
    send_error(res, g.channel->error());
    return;
  }
  ojson choices = ojson::array();
  for (size_t i = 0; i < g.choices.size(); ++i) {
    ChoiceState& c = g.choices[i];
    if (c.parser) {
      ojson choice = chat_choice(int(i), c.content, std::move(c.logprobs), c.finish);
      if (!c.calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& call : c.calls)
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        if (c.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = std::move(calls);
      }
      choices.push_back(std::move(choice));
      continue;
    }
    choices.push_back(g.kind == ApiKind::kChat
                          ? chat_choice(int(i), c.text, std::move(c.logprobs), c.finish)
                          : completion_choice(int(i), c.text, std::move(c.logprobs), c.finish));
  }
  ojson answer = full_response(g.meta, std::move(choices), g.prompt_tokens, g.completion_tokens(),
                               g.cached_tokens);
  if (g.decorate) g.decorate(*g.channel, answer);
  send_json(res, 200, answer);
}

// The single provider call that writes the whole stream (see streaming.h).
bool write_stream(Generation& g, httplib::DataSink& sink) {
  std::string out;
  if (g.kind == ApiKind::kChat) {
    for (size_t i = 0; i < g.choices.size(); ++i) {
      ojson delta = ojson::object({{"role", "assistant"}, {"content", ""}});
      out += sse(chat_chunk(g.meta, int(i), std::move(delta), nullptr, nullptr, g.include_usage));
    }
  }
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
        if (g.include_usage)
          out += sse(usage_chunk(g.meta, g.prompt_tokens, g.completion_tokens(), g.cached_tokens));
      } else {
        out += sse(g.channel->error().to_json());
      }
      out += "data: [DONE]\n\n";
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
  g->include_usage = request.include_usage;
  g->n_logprobs = request.n_logprobs;
  g->meta = make_response_meta(request.kind, model.name);
  g->tokenizer = model.tokenizer;
  g->bridge = &bridge;

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
  g->tool_format = request.tool_format;
  if (request.kind == ApiKind::kChat && request.tool_format != ToolCallFormat::kNone)
    for (ChoiceState& c : g->choices)
      c.parser = std::make_unique<ToolCallParser>(request.tool_format);

  auto submitted = bridge.submit(std::move(job));
  if (auto* e = std::get_if<ApiError>(&submitted)) {
    send_error(res, *e);
    return;
  }
  g->channel = std::get<std::shared_ptr<RequestChannel>>(std::move(submitted));
  // Wait for admission so that an engine-side rejection is still an HTTP error status.
  g->state = g->channel->wait(g->early, State::kPending);
  if (g->state == State::kFailed || g->state == State::kCancelled) {
    g->ended = true;
    send_error(res, g->channel->error());
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
