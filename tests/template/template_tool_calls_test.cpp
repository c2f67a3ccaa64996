// Tool-call formats: detection over the real chat templates, the syntax each family writes, and
// the streaming parser. Every text is parsed whole and again split at every byte boundary and
// at random multi-splits (1-byte chunks included): the merged events must be identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "message_events.h"
#include "template/tool_calls.h"
#include "test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = ToolCallEvent::Kind;

std::vector<ToolCallEvent> run(ToolCallFormat format, const std::vector<std::string_view>& pieces) {
  ToolCallParser parser(format, 42);
  std::vector<ToolCallEvent> events;
  for (std::string_view piece : pieces) {
    for (ToolCallEvent& e : parser.feed(piece)) events.push_back(std::move(e));
  }
  for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
  return events;
}

using test::describe;

// Events of one call: begin, arguments*, end (or invalid), indices 0, 1, ... in order, unique
// ids; the arguments of an ended call are a JSON object.
void expect_well_formed(const std::vector<ToolCallEvent>& events, ToolCallFormat format) {
  int open = -1, next = 0;
  std::vector<std::string> ids;
  std::string args;
  for (const ToolCallEvent& e : events) {
    switch (e.kind) {
      case Kind::kContent:
        EXPECT_EQ(open, -1) << "content inside call " << open;
        EXPECT_FALSE(e.text.empty());
        break;
      case Kind::kCallBegin:
        EXPECT_EQ(open, -1);
        EXPECT_EQ(e.index, next);
        open = next++;
        args.clear();
        if (format == ToolCallFormat::kMistral) {
          EXPECT_EQ(e.id.size(), 9u) << e.id;
        } else {
          EXPECT_EQ(e.id.size(), 29u) << e.id;
          EXPECT_EQ(e.id.rfind("call_", 0), 0u) << e.id;
        }
        for (char c : e.id.substr(format == ToolCallFormat::kMistral ? 0 : 5)) {
          EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << e.id;
        }
        EXPECT_EQ(std::find(ids.begin(), ids.end(), e.id), ids.end()) << "duplicate id " << e.id;
        ids.push_back(e.id);
        break;
      case Kind::kArguments:
        EXPECT_EQ(e.index, open);
        args += e.text;
        break;
      case Kind::kCallEnd: {
        EXPECT_EQ(e.index, open);
        ojson parsed = ojson::parse(args, nullptr, false);
        EXPECT_TRUE(parsed.is_object()) << args;
        open = -1;
        break;
      }
      case Kind::kInvalidCall:
        EXPECT_EQ(e.index, open);
        EXPECT_FALSE(e.text.empty());
        open = -1;
        break;
      case Kind::kReasoning:
        ADD_FAILURE() << "the tool-call parser emitted reasoning";
        break;
    }
  }
  EXPECT_EQ(open, -1) << "a call neither ended nor failed";
}

// Parses `text` whole, then at every single split point, then in random chunks; all must agree.
std::vector<ToolCallEvent> parse_every_way(ToolCallFormat format, std::string_view text) {
  std::vector<ToolCallEvent> whole = test::parse_every_way(
      [format](const std::vector<std::string_view>& pieces) { return run(format, pieces); }, text);
  expect_well_formed(whole, format);
  return whole;
}

struct Call {
  std::string name;
  std::string arguments;  // JSON text, compared as JSON
};

struct Case {
  std::string text;
  std::string content;
  std::vector<Call> calls;
  bool invalid = false;
};

void check(ToolCallFormat format, const Case& c) {
  SCOPED_TRACE(std::string(tool_call_format_name(format)) + ": " + c.text);
  std::vector<ToolCallEvent> events = parse_every_way(format, c.text);
  ParsedToolCalls parsed = collect_tool_call_events(events);
  EXPECT_EQ(parsed.content, c.content);
  EXPECT_EQ(parsed.invalid, c.invalid) << parsed.error;
  ASSERT_EQ(parsed.calls.size(), c.calls.size()) << describe(events);
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(parsed.calls[i].name, c.calls[i].name);
    EXPECT_EQ(ojson::parse(parsed.calls[i].arguments), ojson::parse(c.calls[i].arguments))
        << parsed.calls[i].arguments;
  }
  // parse_tool_calls is the same machine.
  ParsedToolCalls direct = parse_tool_calls(format, c.text, 42);
  EXPECT_EQ(direct.content, parsed.content);
  ASSERT_EQ(direct.calls.size(), parsed.calls.size());
  for (size_t i = 0; i < direct.calls.size(); ++i) {
    EXPECT_EQ(direct.calls[i].id, parsed.calls[i].id);
    EXPECT_EQ(direct.calls[i].arguments, parsed.calls[i].arguments);
  }
}

// --- detection and syntax ----------------------------------------------------------------------

TEST(TemplateToolCalls, DetectsTheFamilyOfEveryRealTemplate) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/chat_templates");
  const std::map<std::string, ToolCallFormat> kExpected = {
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", ToolCallFormat::kNone},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolCallFormat::kNone},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ToolCallFormat::kNone},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::kNone},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ToolCallFormat::kNone},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kNone},
      {"llama-cpp-deepseek-r1.jinja", ToolCallFormat::kNone},
      {"meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::kNone},  // <function=...>
      {"meetkai-functionary-medium-v3.2.jinja", ToolCallFormat::kNone},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolCallFormat::kNone},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
  };
  size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string file = entry.path().filename().string();
    auto it = kExpected.find(file);
    if (it == kExpected.end()) {
      ADD_FAILURE() << file << ": a new template; add its expected family here";
      continue;
    }
    ++seen;
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(test::read_file(entry.path()))),
              tool_call_format_name(it->second))
        << file;
  }
  EXPECT_EQ(seen, kExpected.size());
}

TEST(TemplateToolCalls, DetectsFromMarkers) {
  EXPECT_EQ(detect_tool_call_format(""), ToolCallFormat::kNone);
  EXPECT_EQ(detect_tool_call_format("{{ '<tool_call>' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS] <tool_call>"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format(R"('"parameters": ' ipython)"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(R"("parameters" <|python_tag|> <function=)"),
            ToolCallFormat::kNone);
  EXPECT_EQ(detect_tool_call_format("<|python_tag|>"), ToolCallFormat::kNone);
}

// The syntax, filled with calls, is text the parser reads back as those calls.
TEST(TemplateToolCalls, SyntaxDescribesWhatTheParserReads) {
  for (ToolCallFormat f :
       {ToolCallFormat::kLlama3Json, ToolCallFormat::kHermes, ToolCallFormat::kMistral}) {
    SCOPED_TRACE(tool_call_format_name(f));
    ToolCallSyntax s = tool_call_syntax(f);
    EXPECT_EQ(s.format, f);
    EXPECT_FALSE(s.trigger.empty());
    EXPECT_FALSE(s.args_key.empty());
    auto call = [&](const char* name, const char* args) {
      return s.call_open + "{\"" + s.name_key + "\": \"" + name + "\", \"" + s.args_key +
             "\": " + args + "}" + s.call_close;
    };
    std::string text = s.prefix + call("a", R"({"x": [1, {"y": "}"}]})");
    size_t n = 1;
    if (s.parallel) {
      text += s.separator + call("b", "{}");
      n = 2;
    }
    text += s.suffix;
    ASSERT_NE(text.find(s.trigger), std::string::npos);
    if (s.trigger_at_start_only) {
      EXPECT_EQ(text.find(s.trigger), 0u);
    }
    ParsedToolCalls parsed = parse_tool_calls(f, text, 1);
    EXPECT_FALSE(parsed.invalid) << parsed.error;
    EXPECT_EQ(parsed.content, "") << text;
    ASSERT_EQ(parsed.calls.size(), n) << text;
    EXPECT_EQ(parsed.calls[0].name, "a");
    EXPECT_EQ(parsed.calls[0].arguments, R"({"x": [1, {"y": "}"}]})");
  }
  EXPECT_EQ(tool_call_syntax(ToolCallFormat::kMistral).id_length, 9u);
  EXPECT_EQ(tool_call_syntax(ToolCallFormat::kHermes).call_open, "<tool_call>\n");
  EXPECT_FALSE(tool_call_syntax(ToolCallFormat::kLlama3Json).parallel);
}

// --- the parser, per family ----------------------------------------------------------------------

TEST(TemplateToolCalls, Llama3Json) {
  const Case kCases[] = {
      {"Paris is sunny today.", "Paris is sunny today.", {}},
      {"", "", {}},
      {"  \n", "  \n", {}},
      {R"({"name": "get_weather", "parameters": {"location": "Paris", "unit": "celsius"}})",
       "",
       {{"get_weather", R"({"location": "Paris", "unit": "celsius"})"}}},
      {"\n\n<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Zürich\"}}",
       "",
       {{"get_weather", R"({"location": "Zürich"})"}}},
      // Other keys, either order, "arguments", nested values with brackets inside strings.
      {R"({"type": "function", "name": "f", "parameters": {"a": [1, -2.5e3, {"b": "x\"}]"}], "c": null, "d": true}})",
       "",
       {{"f", R"({"a": [1, -2.5e3, {"b": "x\"}]"}], "c": null, "d": true})"}}},
      {R"({"parameters": {"q": "cats"}, "name": "search", "n": 3})",
       "",
       {{"search", R"({"q": "cats"})"}}},
      {R"({"name": "search", "arguments": {}})", "", {{"search", "{}"}}},
      {"{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}\n",
       "",
       {{"a", "{}"}, {"b", R"({"x": 1})"}}},
      {R"({"name": "a", "parameters": {}} Hope that helps.)", " Hope that helps.", {{"a", "{}"}}},
      // Not calls: content.
      {R"({"answer": 42})", R"({"answer": 42})", {}},
      {R"({"name": "Bob", "age": 3})", R"({"name": "Bob", "age": 3})", {}},
      {R"({"name": "f", "parameters": "x"})", R"({"name": "f", "parameters": "x"})", {}},
      {R"({"name": 3, "parameters": {}})", R"({"name": 3, "parameters": {}})", {}},
      {"{not json} at all", "{not json} at all", {}},
      {R"({"name": "f")", R"({"name": "f")", {}},
      {"<|python_tag|>brave_search.call(query=\"x\")",
       "<|python_tag|>brave_search.call(query=\"x\")",
       {}},
      {"<|python_ta", "<|python_ta", {}},
      {R"(Answer: {"name": "f", "parameters": {}})",
       R"(Answer: {"name": "f", "parameters": {}})",
       {}},
      {R"({"name": "a", "parameters": {}}; {"oops": 1})", R"(; {"oops": 1})", {{"a", "{}"}}},
      // Calls that went wrong after they began: invalid; what was reported of them (name,
      // arguments so far) stands, their text is not repeated as content, the rest is content.
      {R"({"name": "f", "parameters": {"a": tru}})", "}", {}, true},
      {R"({"name": "f", "parameters": {"a": 1)", "", {}, true},
      {R"({"name": "f", "parameters": {}, "name": "g"})", R"(: "g"})", {}, true},
  };
  for (const Case& c : kCases) check(ToolCallFormat::kLlama3Json, c);
}

TEST(TemplateToolCalls, Hermes) {
  const Case kCases[] = {
      {"No tools needed: 2 < 3 and <b>bold</b>.", "No tools needed: 2 < 3 and <b>bold</b>.", {}},
      {"ends with <tool_ca", "ends with <tool_ca", {}},
      {"<<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>", "<", {{"a", "{}"}}},
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
       "\"Paris\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"location": "Paris"})"}}},
      {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
       "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
       "{\"location\": \"Paris\", \"tz\": [1, 2]}}\n</tool_call>\n",
       "Let me check.\n",
       {{"get_weather", R"({"location": "Paris"})"},
        {"get_time", R"({"location": "Paris", "tz": [1, 2]})"}}},
      {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\nDone: <tool>.",
       "\n\nDone: <tool>.",
       {{"a", "{}"}}},
      // Forgiven: a missing </tool_call>, a call without arguments, other keys.
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"</tool_call>\"}}<tool_call>"
       "{\"name\": \"b\"}",
       "",
       {{"a", R"({"s": "</tool_call>"})"}, {"b", "{}"}}},
      {"<tool_call>{\"id\": 7, \"name\": \"now\"}</tool_call>", "", {{"now", "{}"}}},
      // Broken calls: invalid; one that never began comes back as content, one that began keeps
      // what was reported; nothing is recognized after.
      {"<tool_call>\n{'name': 'f'}\n</tool_call>",
       "<tool_call>\n{'name': 'f'}\n</tool_call>",
       {},
       true},
      {"Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1,}}</tool_call> bye <tool_call>",
       "Hi }</tool_call> bye <tool_call>",
       {},
       true},
      {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", "
       "\"arguments\": {\"x\"",
       "",
       {{"a", "{}"}},
       true},
      {"<tool_call>", "<tool_call>", {}, true},
      {"<tool_call> nope", "<tool_call> nope", {}, true},
      {"<tool_call>{\"arguments\": {}}", "<tool_call>{\"arguments\": {}}", {}, true},
  };
  for (const Case& c : kCases) check(ToolCallFormat::kHermes, c);
}

TEST(TemplateToolCalls, Mistral) {
  const Case kCases[] = {
      {"Just text [TOOL] and [TOOL_CALL", "Just text [TOOL] and [TOOL_CALL", {}},
      {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": "
       "\"abc123XYZ\"}]",
       "",
       {{"get_weather", R"({"location": "Paris"})"}}},
      {"[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
       "\"arguments\": {\"y\": [true, false, null]}}]",
       "",
       {{"a", R"({"x": 1})"}, {"b", R"({"y": [true, false, null]})"}}},
      {"Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}] Anything else?",
       "Sure. Anything else?",
       {{"a", "{}"}}},
      {"[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}", "", {{"a", "{}"}}},
      {"[TOOL_CALLS][]", "", {}},
      {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}", "", {{"a", "{}"}}},  // no ']'
      {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}} {\"name\"",
       " {\"name\"",
       {{"a", "{}"}},
       true},
      {"[TOOL_CALLS]get_weather[ARGS]{}", "[TOOL_CALLS]get_weather[ARGS]{}", {}, true},
      {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": [1]}]",
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": [1]}]",
       {},
       true},
  };
  for (const Case& c : kCases) check(ToolCallFormat::kMistral, c);
}

TEST(TemplateToolCalls, NoneIsAllContent) {
  const std::string text =
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>[TOOL_CALLS]";
  check(ToolCallFormat::kNone, Case{text, text, {}});
}

// --- streaming
// ------------------------------------------------------------------------------------

std::string content_of(const std::vector<ToolCallEvent>& events) {
  std::string out;
  for (const ToolCallEvent& e : events) {
    if (e.kind == Kind::kContent) out += e.text;
  }
  return out;
}

// Content leaves as soon as it cannot start the marker; calls stream once named.
TEST(TemplateToolCalls, StreamsWithoutWaiting) {
  ToolCallParser hermes(ToolCallFormat::kHermes, 1);
  EXPECT_EQ(content_of(hermes.feed("Hello <tool")), "Hello ");
  EXPECT_EQ(content_of(hermes.feed("box")), "<toolbox");
  EXPECT_EQ(content_of(hermes.feed(" <")), " ");
  auto events = hermes.feed("tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ");
  ASSERT_EQ(events.size(), 2u) << describe(events);
  EXPECT_EQ(events[0].kind, Kind::kCallBegin);
  EXPECT_EQ(events[0].name, "f");
  EXPECT_EQ(events[1].kind, Kind::kArguments);
  EXPECT_EQ(events[1].text, "{\"a\": ");
  events = hermes.feed("\"x\"}");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "\"x\"}");
  events = hermes.feed("}");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, Kind::kCallEnd);
  EXPECT_TRUE(hermes.feed("\n</tool_call>\n").empty());
  EXPECT_EQ(content_of(hermes.feed("Done")), "\nDone");
  EXPECT_EQ(hermes.n_calls(), 1);

  ToolCallParser llama(ToolCallFormat::kLlama3Json, 1);
  EXPECT_TRUE(llama.feed(" {\"name\": \"f\", ").empty());  // undecided: held
  events = llama.feed("\"parameters\": {\"a");
  ASSERT_EQ(events.size(), 2u) << describe(events);
  EXPECT_EQ(events[0].kind, Kind::kCallBegin);
  EXPECT_EQ(events[1].text, "{\"a");

  ToolCallParser plain(ToolCallFormat::kLlama3Json, 1);
  EXPECT_EQ(content_of(plain.feed("  Hi")), "  Hi");

  ToolCallParser mistral(ToolCallFormat::kMistral, 1);
  EXPECT_EQ(content_of(mistral.feed("A [TOOL_")), "A ");
  events = mistral.feed("CALLS][{\"arguments\": {\"x\": 1}, \"name\": \"g\"");
  ASSERT_EQ(events.size(), 2u) << describe(events);  // arguments first: sent when named
  EXPECT_EQ(events[1].text, "{\"x\": 1}");
}

TEST(TemplateToolCalls, IdsAreUniqueAndReproducible) {
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  ParsedToolCalls a = parse_tool_calls(ToolCallFormat::kHermes, text, 5);
  ParsedToolCalls b = parse_tool_calls(ToolCallFormat::kHermes, text, 5);
  ASSERT_EQ(a.calls.size(), 50u);
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].id, b.calls[i].id);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(a.calls[i].id, a.calls[j].id);
  }
  ToolCallParser random1(ToolCallFormat::kMistral), random2(ToolCallFormat::kMistral);
  auto e1 = random1.feed("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
  auto e2 = random2.feed("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
  ASSERT_EQ(e1[0].kind, Kind::kCallBegin);
  EXPECT_EQ(e1[0].id.size(), 9u);
  EXPECT_NE(e1[0].id, e2[0].id);
}

// Random texts built from the pieces the parsers care about: whatever the text, every way of
// splitting it gives the same events, and they are well formed.
TEST(TemplateToolCalls, RandomTextsParseTheSameHoweverSplit) {
  const char* kPieces[] = {"<tool_call>",
                           "</tool_call>",
                           "[TOOL_CALLS]",
                           "<|python_tag|>",
                           "{",
                           "}",
                           "[",
                           "]",
                           "\"name\"",
                           "\"arguments\"",
                           "\"parameters\"",
                           ":",
                           ",",
                           " ",
                           "\n",
                           "\"f\"",
                           "1",
                           "x",
                           "<",
                           "\"\\\"}\"",
                           "{}",
                           "null",
                           ";",
                           "\"n\\u00e9\""};
  std::mt19937 rng(3);
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kHermes, ToolCallFormat::kMistral}) {
    for (int trial = 0; trial < 150; ++trial) {
      std::string text;
      const int n = 1 + int(rng() % 24);
      for (int i = 0; i < n; ++i) text += kPieces[rng() % std::size(kPieces)];
      SCOPED_TRACE(std::string(tool_call_format_name(f)) + ": " + text);
      std::vector<ToolCallEvent> events = parse_every_way(f, text);
      if (f == ToolCallFormat::kNone) {
        EXPECT_EQ(content_of(events), text);
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace sluice
