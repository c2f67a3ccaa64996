// Structured output and tool calls over real HTTP: every output follows its constraint,
// streamed and whole alike; constraint errors are 400s that name the field; tool calls in the
// template family's syntax come back as message.tool_calls / delta.tool_calls.
#include <fstream>
#include <regex>
#include <sstream>

#include "grammar/json_schema.h"
#include "server_test_util.h"

namespace sluice::test {
namespace {

using server::ServerConfig;

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

json chat(json extra) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Tell me about a person."}}}},
            {"max_tokens", 300},
            {"temperature", 1}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

ServerConfig plain_template() {
  ServerConfig c;
  c.chat_template = kPlainTemplate;
  return c;
}

void expect_valid(const json& schema, const std::string& text) {
  json instance = json::parse(text, nullptr, false);
  ASSERT_FALSE(instance.is_discarded()) << "not JSON: " << text;
  Result<bool> v = grammar::json_schema_validate(schema, instance);
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_TRUE(*v) << text;
}

TEST(ServerStructured, JsonSchemaOutputsValidateStreamedAndWhole) {
  SLUICE_REQUIRE_SERVER(s, plain_template());
  for (int seed = 0; seed < 6; ++seed) {
    json body = chat(
        {{"seed", seed},
         {"response_format",
          {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kPerson}}}}}});
    HttpResult whole = post(s->port, "/v1/chat/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const std::string text = whole.j()["choices"][0]["message"]["content"];
    EXPECT_EQ(whole.j()["choices"][0]["finish_reason"], "stop") << text;
    expect_valid(kPerson, text);
    body["stream"] = true;
    SseResult st = stream(s->port, "/v1/chat/completions", body);
    ASSERT_EQ(st.status, 200);
    EXPECT_EQ(streamed_text(st), text) << "seed " << seed;
  }
  // One schema, twelve requests: compiled once, masks on /metrics.
  const std::string m = http_call(s->port, "GET", "/metrics").body;
  EXPECT_NE(m.find("sluice_grammar_compiles_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("sluice_grammar_cache_hits_total 11\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("sluice_grammar_masks_total 0\n"), std::string::npos) << m;
}

TEST(ServerStructured, OtherConstraintFields) {
  SLUICE_REQUIRE_SERVER(s, plain_template());
  // llama.cpp's json_schema on /v1/completions.
  HttpResult r = post(
      s->port, "/v1/completions",
      {{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"seed", 1}, {"json_schema", kPerson}});
  ASSERT_EQ(r.status, 200) << r.body;
  expect_valid(kPerson, r.j()["choices"][0]["text"]);
  // vLLM's guided_choice and guided_regex, llama.cpp's GBNF grammar.
  for (int seed = 0; seed < 4; ++seed) {
    r = post(s->port, "/v1/chat/completions",
             chat({{"seed", seed}, {"guided_choice", {"red", "green", "blue"}}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string c = r.j()["choices"][0]["message"]["content"];
    EXPECT_TRUE(c == "red" || c == "green" || c == "blue") << c;
    r = post(s->port, "/v1/chat/completions",
             chat({{"seed", seed}, {"guided_regex", "[0-9]{3}-[a-z]{2,4}"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string x = r.j()["choices"][0]["message"]["content"];
    EXPECT_TRUE(std::regex_match(x, std::regex("[0-9]{3}-[a-z]{2,4}"))) << x;
    r = post(s->port, "/v1/chat/completions",
             chat({{"seed", seed},
                   {"grammar", "root ::= (\"yes\" | \"no\") \" because \" [a-z ]{1,20} \".\""}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string g = r.j()["choices"][0]["message"]["content"];
    EXPECT_TRUE(std::regex_match(g, std::regex("(yes|no) because [a-z ]{1,20}\\."))) << g;
  }
  // json_object: the output starts as an object (a tiny model may not close it in time).
  r = post(s->port, "/v1/chat/completions",
           chat({{"seed", 2}, {"max_tokens", 20}, {"response_format", {{"type", "json_object"}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["message"]["content"].get<std::string>().substr(0, 1), "{");
}

TEST(ServerStructured, ConstraintErrorsNameTheField) {
  SLUICE_REQUIRE_SERVER(s, plain_template());
  struct Case {
    json extra;
    std::string param, needle;
  };
  const std::vector<Case> cases = {
      {{{"response_format", {{"type", "xml"}}}}, "response_format", "type"},
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format", "json_schema"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"schema", {{"uniqueItems", true}, {"type", "array"}}}}}}}},
       "response_format",
       "uniqueItems"},
      {{{"grammar", "root ::= \"a\" | \n  oops ::="}}, "grammar", "gbnf"},
      {{{"guided_regex", "(?=x)"}}, "guided_regex", "lookahead"},
      {{{"guided_choice", json::array()}}, "guided_choice", "guided_choice"},
      {{{"json_schema", kPerson}, {"grammar", "root ::= \"a\""}}, "grammar", "at most one"},
      {{{"tool_choice", "required"}}, "tool_choice", "needs 'tools'"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
        {"tool_choice", "required"}},
       "tool_choice",
       "no tool-call format"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "bad name"}}}}}}},
       "tools",
       "letters"},
  };
  for (const Case& c : cases) {
    HttpResult r = post(s->port, "/v1/chat/completions", chat(c.extra));
    EXPECT_EQ(r.status, 400) << c.extra.dump() << " -> " << r.body;
    EXPECT_EQ(r.j()["error"]["param"], c.param) << r.body;
    EXPECT_NE(r.j()["error"]["message"].get<std::string>().find(c.needle), std::string::npos)
        << r.body;
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const json kWeatherTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                  "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "get_time",
   "parameters": {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 12}},
                  "required": ["zone"]}}}
])");

// Calls of one streamed choice, merged by index as OpenAI clients do.
json streamed_calls(const SseResult& st) {
  json calls = json::array();
  for (const json& e : st.events) {
    if (!e.contains("choices")) continue;
    for (const json& c : e["choices"]) {
      if (!c["delta"].contains("tool_calls")) continue;
      for (const json& d : c["delta"]["tool_calls"]) {
        const size_t i = d["index"];
        while (calls.size() <= i)
          calls.push_back({{"function", {{"name", ""}, {"arguments", ""}}}});
        if (d.contains("id")) calls[i]["id"] = d["id"];
        if (d.contains("type")) calls[i]["type"] = d["type"];
        if (d["function"].contains("name")) calls[i]["function"]["name"] = d["function"]["name"];
        calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                            d["function"]["arguments"].get<std::string>();
      }
    }
  }
  return calls;
}

TEST(ServerStructured, RequiredAndNamedToolCallsInTheHermesFormat) {
  SLUICE_REQUIRE_SHARED(tmpl, "testdata/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  ServerConfig cfg;
  cfg.chat_template = read_file(tmpl);
  EngineKnobs knobs;
  knobs.n_ctx = 1536;
  knobs.n_blocks = 1024;
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto s = TestServer::start(model, cfg, knobs);
  ASSERT_TRUE(s);
  for (int seed = 0; seed < 4; ++seed) {
    for (const json& choice :
         {json("required"), json({{"type", "function"}, {"function", {{"name", "get_time"}}}})}) {
      json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
                   {"tools", kWeatherTools},
                   {"tool_choice", choice},
                   {"parallel_tool_calls", seed % 2 == 0},
                   {"max_tokens", 400},
                   {"temperature", 1},
                   {"seed", seed}};
      HttpResult r = post(s->port, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const json& choice0 = r.j()["choices"][0];
      // One call: the grammar ends after it. Parallel calls: a random-weight model may go on
      // calling until max_tokens (the last call is then cut off: its arguments do not parse, as
      // OpenAI reports a truncated call).
      if (seed % 2 == 1) {
        EXPECT_EQ(choice0["finish_reason"], "tool_calls") << r.body;
      }
      const json& calls = choice0["message"]["tool_calls"];
      ASSERT_TRUE(calls.is_array() && !calls.empty()) << r.body;
      if (seed % 2 == 1) {
        EXPECT_EQ(calls.size(), 1u);
      }
      for (size_t k = 0; k < calls.size(); ++k) {
        const json& call = calls[k];
        if (k + 1 == calls.size() && choice0["finish_reason"] == "length") break;
        EXPECT_EQ(call["type"], "function");
        EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
        const std::string name = call["function"]["name"];
        if (choice.is_object()) {
          EXPECT_EQ(name, "get_time");
        }
        const json& params = name == "get_weather" ? kWeatherTools[0]["function"]["parameters"]
                                                   : kWeatherTools[1]["function"]["parameters"];
        expect_valid(params, call["function"]["arguments"]);
      }
      body["stream"] = true;
      SseResult st = stream(s->port, "/v1/chat/completions", body);
      ASSERT_EQ(st.status, 200);
      EXPECT_EQ(streamed_finish(st), choice0["finish_reason"].get<std::string>());
      json merged = streamed_calls(st);
      ASSERT_EQ(merged.size(), calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(merged[i]["function"]["name"], calls[i]["function"]["name"]);
        EXPECT_EQ(merged[i]["function"]["arguments"], calls[i]["function"]["arguments"]);
      }
    }
  }
  // auto: the model may answer in text; whatever it wrote comes back, as content or calls.
  HttpResult r = post(s->port, "/v1/chat/completions",
                      {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                       {"tools", kWeatherTools},
                       {"max_tokens", 30},
                       {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.j()["choices"][0]["message"]["content"].is_string()) << r.body;
}

// The other two families: Llama 3.x JSON (the whole message is the call) and Mistral
// ([TOOL_CALLS][...], 9-character ids).
TEST(ServerStructured, RequiredToolCallsInTheLlama3AndMistralFormats) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  for (const char* name :
       {"meta-llama-Llama-3.2-3B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407"}) {
    SLUICE_REQUIRE_SHARED(tmpl, std::string("testdata/chat_templates/") + name + ".jinja");
    ServerConfig cfg;
    cfg.chat_template = read_file(tmpl);
    EngineKnobs knobs;
    knobs.n_ctx = 2048;
    knobs.n_blocks = 1024;
    auto s = TestServer::start(model, cfg, knobs);
    ASSERT_TRUE(s);
    for (int seed = 0; seed < 3; ++seed) {
      json body = {{"messages", {{{"role", "user"}, {"content", "What time is it in zone 3?"}}}},
                   {"tools", kWeatherTools},
                   {"tool_choice", "required"},
                   {"parallel_tool_calls", false},
                   {"max_tokens", 300},
                   {"temperature", 1},
                   {"seed", seed}};
      HttpResult r = post(s->port, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const json& c = r.j()["choices"][0];
      EXPECT_EQ(c["finish_reason"], "tool_calls") << name << " " << r.body;
      ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << name << " " << r.body;
      EXPECT_TRUE(c["message"]["content"].is_null()) << r.body;
      const json& call = c["message"]["tool_calls"][0];
      const std::string fn = call["function"]["name"];
      expect_valid(fn == "get_weather" ? kWeatherTools[0]["function"]["parameters"]
                                       : kWeatherTools[1]["function"]["parameters"],
                   call["function"]["arguments"]);
      if (std::string(name).find("Mistral") != std::string::npos) {
        EXPECT_EQ(call["id"].get<std::string>().size(), 9u);
      }
      body["stream"] = true;
      SseResult st = stream(s->port, "/v1/chat/completions", body);
      json merged = streamed_calls(st);
      ASSERT_EQ(merged.size(), 1u) << name;
      EXPECT_EQ(merged[0]["function"]["arguments"], call["function"]["arguments"]);
    }
  }
}

}  // namespace
}  // namespace sluice::test
