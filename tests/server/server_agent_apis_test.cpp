// Reasoning, the Responses API and Anthropic's Messages API over stories260K: a template whose
// generation prompt opens "<think>" makes everything the model writes reasoning until a budget
// closes it, which makes the split observable with a model that never thinks on its own.
// The request converters, the response store and the reasoning grammar are tested directly.
#include <cmath>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server/agent_requests.h"
#include "server/openai_structured.h"
#include "server_test_util.h"

namespace sluice::test {
namespace {

using ojson = nlohmann::ordered_json;
using server::ServerConfig;

const std::string kThinkTemplate =
    "{{ bos_token }}{% for message in messages %}{{ message['content'] or '' }}{% endfor %}"
    "{% if add_generation_prompt %}{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

json user(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

std::unique_ptr<TestServer> think_server(ServerConfig cfg = {}) {
  cfg.chat_template = kThinkTemplate;
  EngineKnobs knobs;
  knobs.n_ctx = 1024;
  const std::string model = shared_path(kStoriesModel);
  if (model.empty()) return nullptr;
  return TestServer::start(model, cfg, knobs);
}

// Every SSE event of a stream with its name: {"event": NAME, "data": JSON}.
std::vector<std::pair<std::string, json>> named_events(const std::string& raw) {
  std::vector<std::pair<std::string, json>> out;
  std::istringstream in(raw);
  std::string line, name;
  while (std::getline(in, line)) {
    if (line.rfind("event: ", 0) == 0) name = line.substr(7);
    if (line.rfind("data: ", 0) == 0) out.emplace_back(name, json::parse(line.substr(6)));
  }
  return out;
}

TEST(ServerReasoning, ThinkingIsSplitFromTheAnswerStreamedOrNot) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto s = think_server();
  ASSERT_TRUE(s);
  json body = {{"messages", user("Once upon a time")}, {"max_tokens", 24}, {"temperature", 0}};
  HttpResult r = post(s->port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& msg = r.j()["choices"][0]["message"];
  const std::string reasoning = msg["reasoning_content"];
  EXPECT_FALSE(reasoning.empty());
  EXPECT_EQ(msg["reasoning"], reasoning);
  EXPECT_EQ(msg["content"], "");
  body["stream"] = true;
  SseResult st = stream(s->port, "/v1/chat/completions", body);
  std::string streamed;
  for (const json& e : st.events)
    for (const json& c : e["choices"])
      if (c["delta"].contains("reasoning_content")) streamed += c["delta"]["reasoning_content"];
  EXPECT_EQ(streamed, reasoning);
  EXPECT_EQ(streamed_text(st), "");

  // --reasoning-format none: the same text stays in content.
  ServerConfig raw;
  raw.reasoning_format = "none";
  auto plain = think_server(raw);
  ASSERT_TRUE(plain);
  body.erase("stream");
  HttpResult p = post(plain->port, "/v1/chat/completions", body);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_FALSE(p.j()["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_NE(p.j()["choices"][0]["message"]["content"].get<std::string>().find(reasoning),
            std::string::npos);
}

TEST(ServerReasoning, TemplateKwargsAndBudgets) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  ServerConfig cfg;
  cfg.reasoning_budget = 3;  // the server's default
  auto s = think_server(cfg);
  ASSERT_TRUE(s);
  // enable_thinking false reaches the template: no reasoning at all.
  json off = {{"messages", user("Once upon a time")},
              {"max_tokens", 12},
              {"temperature", 0},
              {"chat_template_kwargs", {{"enable_thinking", false}}}};
  HttpResult r = post(s->port, "/v1/chat/completions", off);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(r.j()["choices"][0]["message"].contains("reasoning_content")) << r.body;
  EXPECT_FALSE(r.j()["choices"][0]["message"]["content"].get<std::string>().empty());
  // The default budget closes the thinking after 3 tokens; the answer follows.
  json on = {{"messages", user("Once upon a time")}, {"max_tokens", 40}, {"temperature", 0}};
  HttpResult b = post(s->port, "/v1/chat/completions", on);
  ASSERT_EQ(b.status, 200) << b.body;
  const json& m = b.j()["choices"][0]["message"];
  EXPECT_FALSE(m["reasoning_content"].get<std::string>().empty());
  EXPECT_FALSE(m["content"].get<std::string>().empty()) << b.body;
  // A request's own budget wins; -1 lifts it: all reasoning again.
  on["reasoning_budget"] = -1;
  HttpResult u = post(s->port, "/v1/chat/completions", on);
  ASSERT_EQ(u.status, 200) << u.body;
  EXPECT_EQ(u.j()["choices"][0]["message"]["content"], "");
  EXPECT_GT(u.j()["choices"][0]["message"]["reasoning_content"].get<std::string>().size(),
            m["reasoning_content"].get<std::string>().size());
  on["reasoning_budget"] = -2;
  EXPECT_EQ(post(s->port, "/v1/chat/completions", on).status, 400);
  on["reasoning_effort"] = "extreme";
  on.erase("reasoning_budget");
  EXPECT_EQ(post(s->port, "/v1/chat/completions", on).status, 400);
}

TEST(ServerReasoning, TheSchemaConstrainsTheAnswerNotTheThinking) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto s = think_server();
  ASSERT_TRUE(s);
  const json schema = {
      {"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}, {"required", {"n"}}};
  const json format = {{"type", "json_schema"},
                       {"json_schema", {{"name", "x"}, {"schema", schema}}}};
  // Greedy thinking is the same with and without the schema (it does not reach the thinking).
  json body = {{"messages", user("Once upon a time")}, {"max_tokens", 30}, {"temperature", 0}};
  HttpResult free_run = post(s->port, "/v1/chat/completions", body);
  body["response_format"] = format;
  HttpResult constrained = post(s->port, "/v1/chat/completions", body);
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  ASSERT_EQ(constrained.status, 200) << constrained.body;
  EXPECT_EQ(constrained.j()["choices"][0]["message"]["reasoning_content"],
            free_run.j()["choices"][0]["message"]["reasoning_content"]);
  // Once a budget closes the thinking, the answer is the schema's, streamed or not.
  body["reasoning_budget"] = 4;
  body["max_tokens"] = 200;
  for (bool streamed : {false, true}) {
    body["stream"] = streamed;
    std::string answer;
    if (streamed) {
      answer = streamed_text(stream(s->port, "/v1/chat/completions", body));
    } else {
      HttpResult r = post(s->port, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      answer = r.j()["choices"][0]["message"]["content"];
    }
    const json parsed = json::parse(answer, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << answer;
    EXPECT_TRUE(parsed["n"].is_number()) << answer;
  }
}

// A Qwen3-like template: tool calls in Hermes <tool_call> blocks, thinking opened by the prompt.
const std::string kThinkToolsTemplate =
    "{{ bos_token }}{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for message in messages %}{% if message['tool_calls'] %}{% for c in message['tool_calls'] "
    "%}<tool_call>\n{{ c['function'] | tojson }}\n</tool_call>{% endfor %}{% else %}"
    "{{ message['content'] or '' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<think>\n{% endif %}";

TEST(ServerReasoning, ToolCallsAfterTheThinkingStreamAsDeltas) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  ServerConfig cfg;
  cfg.chat_template = kThinkToolsTemplate;
  EngineKnobs knobs;
  knobs.n_ctx = 1024;
  auto s = TestServer::start(model, cfg, knobs);
  ASSERT_TRUE(s);
  const json tool = {{"type", "function"},
                     {"function",
                      {{"name", "get_weather"},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"city", {{"type", "string"}, {"maxLength", 8}}}}},
                         {"required", {"city"}}}}}}};
  json body = {{"messages", user("Weather in Paris?")},
               {"tools", json::array({tool})},
               {"tool_choice", "required"},
               {"parallel_tool_calls", false},
               {"reasoning_budget", 5},
               {"max_tokens", 300},
               {"temperature", 0}};
  HttpResult r = post(s->port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& choice = r.j()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  EXPECT_FALSE(choice["message"]["reasoning_content"].get<std::string>().empty());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.dump();
  EXPECT_TRUE(args["city"].is_string());
  // Streamed: reasoning deltas first, then the call's name and argument deltas.
  body["stream"] = true;
  SseResult st = stream(s->port, "/v1/chat/completions", body);
  std::string reasoning, arguments, name;
  bool call_after_reasoning = true, saw_call = false;
  for (const json& e : st.events) {
    for (const json& c : e["choices"]) {
      const json& d = c["delta"];
      if (d.contains("reasoning_content")) {
        reasoning += d["reasoning_content"].get<std::string>();
        call_after_reasoning &= !saw_call;
      }
      if (d.contains("tool_calls")) {
        saw_call = true;
        const json& tc = d["tool_calls"][0];
        if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
        arguments += tc["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_TRUE(call_after_reasoning);
  EXPECT_EQ(reasoning, choice["message"]["reasoning_content"]);
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, call["function"]["arguments"]);
  EXPECT_EQ(streamed_finish(st), "tool_calls");
}

TEST(ServerReasoning, Qwen35ThinksThenCallsToolsInXml) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  ServerConfig cfg;
  cfg.chat_template = read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/Qwen3.5-4B.jinja");
  EngineKnobs knobs;
  knobs.n_ctx = 4096;
  knobs.n_blocks = 1024;
  auto s = TestServer::start(model, cfg, knobs);
  ASSERT_TRUE(s);
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 9},
      "unit": {"enum": ["c", "f"]}}, "required": ["city", "days"]}}}])");
  json body = {{"messages", user("Weather in Paris for 3 days?")},
               {"tools", tools},
               {"tool_choice", "required"},
               {"parallel_tool_calls", false},
               {"reasoning_budget", 6},
               {"max_tokens", 400},
               {"temperature", 0}};
  HttpResult r = post(s->port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& choice = r.j()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  EXPECT_FALSE(choice["message"]["reasoning_content"].get<std::string>().empty());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  const json args =
      json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"].is_string()) << args;
  // Typed by the schema, not a string ("integer" admits 5.0 in JSON Schema).
  ASSERT_TRUE(args["days"].is_number()) << args;
  EXPECT_EQ(args["days"].get<double>(), std::floor(args["days"].get<double>())) << args;
  if (args.contains("unit")) {
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
  }
  // The call goes back through the template (arguments as an object) on the next turn.
  json next = body;
  next["messages"].push_back(choice["message"]);
  next["messages"].push_back({{"role", "tool"},
                              {"tool_call_id", choice["message"]["tool_calls"][0]["id"]},
                              {"content", "sunny"}});
  next["tool_choice"] = "none";
  next["max_tokens"] = 8;
  EXPECT_EQ(post(s->port, "/v1/chat/completions", next).status, 200);
}

TEST(ServerReasoning, GptOssThinksThenCallsToolsInHarmony) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  ServerConfig cfg;
  cfg.chat_template =
      read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/openai-gpt-oss-120b.jinja");
  EngineKnobs knobs;
  knobs.n_ctx = 4096;
  knobs.n_blocks = 1024;
  auto s = TestServer::start(model, cfg, knobs);
  ASSERT_TRUE(s);
  // (gpt-oss's template needs a description: "// " + tool.description fails without one, in
  // Jinja2 as here.)
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
    "required": ["city"]}}}])");
  json body = {{"messages", user("Weather in Paris?")},
               {"tools", tools},
               {"tool_choice", "required"},
               {"reasoning_effort", "low"},
               {"reasoning_budget", 5},
               {"max_tokens", 300},
               {"temperature", 0}};
  for (bool streamed : {false, true}) {
    body["stream"] = streamed;
    json call;
    std::string reasoning;
    if (!streamed) {
      HttpResult r = post(s->port, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const json& choice = r.j()["choices"][0];
      EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
      ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
      call = choice["message"]["tool_calls"][0]["function"];
      reasoning = choice["message"].value("reasoning_content", "");
    } else {
      SseResult st = stream(s->port, "/v1/chat/completions", body);
      call = {{"name", ""}, {"arguments", ""}};
      for (const json& e : st.events) {
        for (const json& c : e["choices"]) {
          const json& d = c["delta"];
          if (d.contains("reasoning_content"))
            reasoning += d["reasoning_content"].get<std::string>();
          if (!d.contains("tool_calls")) continue;
          const json& f = d["tool_calls"][0]["function"];
          if (f.contains("name")) call["name"] = f["name"];
          call["arguments"] =
              call["arguments"].get<std::string>() + f["arguments"].get<std::string>();
        }
      }
      EXPECT_EQ(streamed_finish(st), "tool_calls");
    }
    // The grammar lets an analysis message come first; this model goes straight to the call.
    EXPECT_EQ(reasoning.find("<|"), std::string::npos) << reasoning;
    EXPECT_EQ(call["name"], "get_weather");
    const json args = json::parse(call["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << call;
    EXPECT_TRUE(args["city"].is_string());
  }
}

TEST(ServerResponses, AnswerStreamStoreAndContinue) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto s = think_server();
  ASSERT_TRUE(s);
  json body = {{"input", "Once upon a time"}, {"instructions", "Tell a story."},
               {"max_output_tokens", 40},     {"temperature", 0},
               {"reasoning_budget", 3},       {"metadata", {{"k", "v"}}}};
  HttpResult r = post(s->port, "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& resp = r.j();
  EXPECT_EQ(resp["object"], "response");
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(resp["instructions"], "Tell a story.");
  EXPECT_EQ(resp["metadata"]["k"], "v");
  ASSERT_EQ(resp["output"].size(), 2u) << r.body;
  EXPECT_EQ(resp["output"][0]["type"], "reasoning");
  EXPECT_EQ(resp["output"][1]["type"], "message");
  const std::string text = resp["output"][1]["content"][0]["text"];
  EXPECT_EQ(resp["output_text"], text);
  EXPECT_EQ(resp["usage"]["output_tokens"], 40);
  EXPECT_GT(resp["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);

  // Streamed: the same items; sequence numbers count up; indices agree.
  body["stream"] = true;
  HttpResult sr = post(s->port, "/v1/responses", body);
  ASSERT_EQ(sr.status, 200);
  auto events = named_events(sr.body);
  ASSERT_GE(events.size(), 6u);
  std::string deltas, reasoning;
  std::vector<std::string> names;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& [name, data] = events[i];
    EXPECT_EQ(data["type"], name);
    EXPECT_EQ(data["sequence_number"], i);
    names.push_back(name);
    if (name == "response.output_text.delta") {
      EXPECT_EQ(data["output_index"], 1);
      deltas += data["delta"].get<std::string>();
    }
    if (name == "response.reasoning_text.delta") reasoning += data["delta"].get<std::string>();
  }
  EXPECT_EQ(names.front(), "response.created");
  EXPECT_EQ(names[1], "response.in_progress");
  EXPECT_EQ(names.back(), "response.incomplete");
  EXPECT_EQ(deltas, text);
  EXPECT_EQ(reasoning, resp["output"][0]["content"][0]["text"]);
  const json& last = events.back().second["response"];
  EXPECT_EQ(last["output"].size(), 2u);

  // Stored: GET it, continue it, DELETE it.
  const std::string id = resp["id"];
  HttpResult got = http_call(s->port, "GET", "/v1/responses/" + id);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.j()["output_text"], text);
  json next = {{"input", "The end."},
               {"previous_response_id", id},
               {"max_output_tokens", 2},
               {"temperature", 0}};
  HttpResult n = post(s->port, "/v1/responses", next);
  ASSERT_EQ(n.status, 200) << n.body;
  // The previous input and answer are in the prompt (its instructions are not carried over).
  EXPECT_GT(n.j()["usage"]["input_tokens"].get<int>(), resp["usage"]["input_tokens"].get<int>());
  EXPECT_EQ(n.j()["previous_response_id"], id);
  EXPECT_EQ(http_call(s->port, "DELETE", "/v1/responses/" + id).status, 200);
  EXPECT_EQ(http_call(s->port, "GET", "/v1/responses/" + id).status, 404);
  EXPECT_EQ(http_call(s->port, "DELETE", "/v1/responses/" + id).status, 404);
  EXPECT_EQ(post(s->port, "/v1/responses", next).status, 404);
  // store: false keeps nothing.
  HttpResult unstored =
      post(s->port, "/v1/responses", {{"input", "x"}, {"max_output_tokens", 1}, {"store", false}});
  ASSERT_EQ(unstored.status, 200);
  EXPECT_EQ(
      http_call(s->port, "GET", "/v1/responses/" + unstored.j()["id"].get<std::string>()).status,
      404);
  // PUT is not a method of the route.
  EXPECT_EQ(http_call(s->port, "PUT", "/v1/responses/" + id).status, 405);
}

TEST(ServerResponses, RefusalsNameTheField) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto s = think_server();
  ASSERT_TRUE(s);
  auto refused = [&](json body, const std::string& param) {
    HttpResult r = post(s->port, "/v1/responses", body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.j()["error"]["param"], param) << r.body;
  };
  refused({{"max_output_tokens", 4}}, "input");
  refused({{"input", 3}}, "input");
  refused({{"input", json::array({{{"type", "input_image"}}})}}, "input");
  refused({{"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}}, "tools");
  refused({{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, "text.format");
  refused({{"input", "x"}, {"n", 2}}, "n");
  refused({{"input", "x"}, {"store", "yes"}}, "store");
  refused({{"input", "x"}, {"temperature", 9}}, "temperature");
}

TEST(ServerMessages, AnswerStreamCountAndErrors) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  ServerConfig cfg;
  cfg.api_key = "sekrit";
  auto s = think_server(cfg);
  ASSERT_TRUE(s);
  const httplib::Headers key = {{"x-api-key", "sekrit"}, {"anthropic-version", "2023-06-01"}};
  json body = {{"model", "stories260K"},
               {"max_tokens", 30},
               {"temperature", 0},
               {"system", "You tell stories."},
               {"thinking", {{"type", "enabled"}, {"budget_tokens", 3}}},
               {"messages", user("Once upon a time")}};
  HttpResult r = post(s->port, "/v1/messages", body, key);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& m = r.j();
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  ASSERT_EQ(m["content"].size(), 2u) << r.body;
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][1]["type"], "text");
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["usage"]["output_tokens"], 30);

  body["stream"] = true;
  HttpResult sr = post(s->port, "/v1/messages", body, key);
  ASSERT_EQ(sr.status, 200);
  auto events = named_events(sr.body);
  ASSERT_GE(events.size(), 8u);
  EXPECT_EQ(events.front().first, "message_start");
  EXPECT_EQ(events[1].first, "ping");
  EXPECT_EQ(events[events.size() - 2].first, "message_delta");
  EXPECT_EQ(events[events.size() - 2].second["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(events.back().first, "message_stop");
  std::string thinking, text;
  int starts = 0, stops = 0;
  for (const auto& [name, data] : events) {
    EXPECT_EQ(data["type"], name);
    if (name == "content_block_start") {
      EXPECT_EQ(data["index"], starts++);
    }
    if (name == "content_block_stop") {
      EXPECT_EQ(data["index"], stops++);
    }
    if (name == "content_block_delta" && data["delta"]["type"] == "thinking_delta")
      thinking += data["delta"]["thinking"].get<std::string>();
    if (name == "content_block_delta" && data["delta"]["type"] == "text_delta")
      text += data["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(stops, 2);
  EXPECT_EQ(thinking, m["content"][0]["thinking"]);
  EXPECT_EQ(text, m["content"][1]["text"]);

  // count_tokens counts what the prompt is.
  body.erase("stream");
  HttpResult c = post(s->port, "/v1/messages/count_tokens", body, key);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j()["input_tokens"].get<int>(), m["usage"]["input_tokens"].get<int>() +
                                                  m["usage"]["cache_read_input_tokens"].get<int>());

  // A stop sequence the text reaches.
  json stop = body;
  stop["thinking"] = {{"type", "disabled"}};
  stop["max_tokens"] = 200;
  HttpResult whole = post(s->port, "/v1/messages", stop, key);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const std::string all = whole.j()["content"][0]["text"];
  ASSERT_GT(all.size(), 12u);
  const std::string word = all.substr(all.size() / 2, 3);
  stop["stop_sequences"] = {word};
  HttpResult stopped = post(s->port, "/v1/messages", stop, key);
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  EXPECT_EQ(stopped.j()["stop_reason"], "stop_sequence") << stopped.body;
  EXPECT_EQ(stopped.j()["stop_sequence"], word);

  // Errors in Anthropic's shape, from the handler and from routing.
  auto anthropic_error = [](const HttpResult& e, int status, const std::string& type) {
    EXPECT_EQ(e.status, status) << e.body;
    EXPECT_EQ(e.j()["type"], "error") << e.body;
    EXPECT_EQ(e.j()["error"]["type"], type) << e.body;
    EXPECT_FALSE(e.j()["error"]["message"].get<std::string>().empty());
  };
  json no_max = body;
  no_max.erase("max_tokens");
  anthropic_error(post(s->port, "/v1/messages", no_max, key), 400, "invalid_request_error");
  anthropic_error(post(s->port, "/v1/messages", body, {{"x-api-key", "wrong"}}), 401,
                  "authentication_error");
  anthropic_error(post(s->port, "/v1/messages", body), 401, "authentication_error");
  json other = body;
  other["model"] = "claude-x";
  anthropic_error(post(s->port, "/v1/messages", other, key), 404, "not_found_error");
  anthropic_error(http_call(s->port, "POST", "/v1/messages", "{", key), 400,
                  "invalid_request_error");
  // Bearer works too.
  EXPECT_EQ(post(s->port, "/v1/messages", body, {{"Authorization", "Bearer sekrit"}}).status, 200);
}

TEST(AgentRequests, ResponsesItemsBecomeChatMessages) {
  server::ResponseStore store;
  const ojson body = ojson::parse(R"({
    "model": "m", "instructions": "sys",
    "input": [
      {"type": "message", "role": "developer", "content": "dev"},
      {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "summary": []},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\":1}"},
      {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}
    ],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}],
    "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}, "strict": true}},
    "max_output_tokens": 7, "reasoning": {"effort": "high"}, "store": false})");
  auto r = server::parse_responses_request(body, store);
  ASSERT_TRUE(std::holds_alternative<server::ResponsesRequest>(r))
      << std::get<http::ApiError>(r).message;
  const server::ResponsesRequest& rr = std::get<server::ResponsesRequest>(r);
  const ojson& msgs = rr.chat_body["messages"];
  ASSERT_EQ(msgs.size(), 6u) << msgs.dump();
  EXPECT_EQ(msgs[0], ojson({{"role", "system"}, {"content", "sys"}}));
  EXPECT_EQ(msgs[1], ojson({{"role", "system"}, {"content", "dev"}}));
  EXPECT_EQ(msgs[2]["content"], "a\nb");
  EXPECT_EQ(msgs[3]["role"], "assistant");
  EXPECT_EQ(msgs[3]["tool_calls"].size(), 2u);  // one turn's calls: one message
  EXPECT_EQ(msgs[3]["tool_calls"][1]["function"]["name"], "g");
  EXPECT_EQ(msgs[4], ojson({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "one"}}));
  EXPECT_EQ(msgs[5]["content"], "two");
  EXPECT_EQ(rr.chat_body["max_tokens"], 7);
  EXPECT_EQ(rr.chat_body["reasoning_effort"], "high");
  EXPECT_EQ(rr.chat_body["tool_choice"]["function"]["name"], "f");
  EXPECT_EQ(rr.chat_body["response_format"]["json_schema"]["name"], "o");
  // Key order of the schemas survives (the order a model writes properties in).
  EXPECT_EQ(rr.chat_body["tools"][0]["function"]["parameters"]["properties"].begin().key(), "z");
  EXPECT_FALSE(rr.store);
  // The history excludes the instructions.
  EXPECT_EQ(rr.history.size(), 5u);
}

TEST(AgentRequests, MessagesBlocksBecomeChatMessages) {
  const ojson body = ojson::parse(R"({
    "model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}],
    "messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": ""},
                                        {"type": "text", "text": "calling"},
                                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"q": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
                                   {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                                    "content": [{"type": "text", "text": "bad"}]},
                                   {"type": "text", "text": "and?"}]}
    ],
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["END"], "thinking": {"type": "enabled", "budget_tokens": 32}})");
  auto r = server::messages_to_chat(body);
  ASSERT_TRUE(std::holds_alternative<ojson>(r)) << std::get<http::ApiError>(r).message;
  const ojson& chat = std::get<ojson>(r);
  const ojson& msgs = chat["messages"];
  ASSERT_EQ(msgs.size(), 6u) << msgs.dump();
  EXPECT_EQ(msgs[0]["content"], "s1\ns2");
  EXPECT_EQ(msgs[2]["content"], "calling");
  EXPECT_EQ(msgs[2]["reasoning_content"], "hmm");
  EXPECT_EQ(msgs[2]["tool_calls"][0]["function"]["arguments"], "{\"q\":1}");
  EXPECT_EQ(msgs[3], ojson({{"role", "tool"}, {"tool_call_id", "t1"}, {"content", "r1"}}));
  EXPECT_EQ(msgs[4]["content"], "Error: bad");
  EXPECT_EQ(msgs[5], ojson({{"role", "user"}, {"content", "and?"}}));
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["stop"], ojson::array({"END"}));
  EXPECT_EQ(chat["reasoning_budget"], 32);
  EXPECT_EQ(chat["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"], ojson({{"type", "object"}}));

  for (
      const char* bad :
      {R"({"messages": [{"role": "user", "content": "x"}]})",
       R"({"max_tokens": 1, "messages": []})",
       R"({"max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]})",
       R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
       R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "bash_20250124", "name": "bash"}]})",
       R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "maybe"}})",
       R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5})"}) {
    auto e = server::messages_to_chat(ojson::parse(bad));
    EXPECT_TRUE(std::holds_alternative<http::ApiError>(e)) << bad;
  }
  // count_tokens does not need max_tokens.
  EXPECT_TRUE(std::holds_alternative<ojson>(server::messages_to_chat(
      ojson::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), true)));
}

TEST(AgentRequests, ResponseStoreIsBoundedLeastRecentlyUsedFirst) {
  server::ResponseStore store(3, 1 << 20);
  auto entry = [](int i) {
    return server::ResponseStore::Entry{ojson({{"id", i}}), ojson::array()};
  };
  for (int i = 0; i < 3; ++i) store.put("r" + std::to_string(i), entry(i));
  ASSERT_TRUE(store.get("r0"));  // r0 is now the most recent
  store.put("r3", entry(3));     // r1 goes
  EXPECT_TRUE(store.get("r0"));
  EXPECT_FALSE(store.get("r1"));
  EXPECT_TRUE(store.get("r2"));
  EXPECT_TRUE(store.get("r3"));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_TRUE(store.erase("r2"));
  EXPECT_FALSE(store.erase("r2"));
  // The byte bound: one big entry pushes the others out; one over the bound is not kept.
  server::ResponseStore small(100, 200);
  small.put("a", entry(1));
  small.put("b", server::ResponseStore::Entry{ojson({{"t", std::string(185, 'x')}}), ojson()});
  EXPECT_FALSE(small.get("a"));
  EXPECT_TRUE(small.get("b"));
  small.put("c", server::ResponseStore::Entry{ojson({{"t", std::string(300, 'x')}}), ojson()});
  EXPECT_FALSE(small.get("c"));
}

TEST(AgentRequests, ReasoningGrammarLetsTheThinkingThrough) {
  grammar::GrammarSpec answer;
  answer.rules.emplace_back("root", grammar::Expr::lit("{}"));
  auto think = [&](bool opens) {
    auto g = grammar::lower(server::reasoning_grammar(answer, ReasoningFormat::kThink, opens));
    EXPECT_TRUE(g.ok()) << g.message();
    return *g;
  };
  const auto closed = think(false), open = think(true);
  EXPECT_TRUE(grammar::matches(closed, "{}"));
  EXPECT_TRUE(grammar::matches(closed, "<think>\nhmm </thin </think>\n\n{}"));
  EXPECT_TRUE(grammar::matches(closed, "\n<think></think>{}"));
  EXPECT_FALSE(grammar::matches(closed, "<think>a</think>b</think>{}"));  // the answer is {}
  EXPECT_FALSE(grammar::matches(closed, "hmm</think>{}"));
  EXPECT_TRUE(grammar::matches(open, "a <b> </think </think>\n{}"));
  EXPECT_TRUE(grammar::matches(open, "</think>{}"));
  EXPECT_FALSE(grammar::matches(open, "{}"));
  EXPECT_FALSE(grammar::matches(open, "x</think>y"));
  auto harmony =
      grammar::lower(server::reasoning_grammar(answer, ReasoningFormat::kHarmony, false));
  ASSERT_TRUE(harmony.ok());
  EXPECT_TRUE(grammar::matches(*harmony, "<|channel|>final<|message|>{}"));
  EXPECT_TRUE(grammar::matches(*harmony,
                               "<|channel|>analysis<|message|>so <|en "
                               "d|><|end|><|start|>assistant<|channel|>final<|message|>{}"));
  EXPECT_FALSE(grammar::matches(*harmony, "{}"));
}

}  // namespace
}  // namespace sluice::test
