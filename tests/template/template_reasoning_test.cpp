// Reasoning: format detection over the real chat templates, and the MessageParser that splits a
// message into reasoning, content and tool calls. Every text is parsed whole, split at every
// byte boundary and in random chunks (1-byte chunks included): the merged events must agree.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "message_events.h"
#include "template/chat_template.h"
#include "template/reasoning.h"
#include "test_util.h"

namespace sluice {
namespace {

using Kind = ToolCallEvent::Kind;

struct ReasoningSetup {
  ReasoningFormat reasoning = ReasoningFormat::kThink;
  bool opens = false;
  ToolCallFormat tools = ToolCallFormat::kNone;
};

std::vector<ToolCallEvent> run_message(const ReasoningSetup& s,
                                       const std::vector<std::string_view>& pieces) {
  MessageParser parser(s.reasoning, s.opens, s.tools, 42);
  std::vector<ToolCallEvent> events;
  for (std::string_view piece : pieces)
    for (ToolCallEvent& e : parser.feed(piece)) events.push_back(std::move(e));
  for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
  return events;
}

ParsedToolCalls parse_every_way(const ReasoningSetup& s, std::string_view text) {
  return collect_tool_call_events(test::parse_every_way(
      [&s](const std::vector<std::string_view>& pieces) { return run_message(s, pieces); }, text));
}

TEST(Reasoning, ThinkBlockThenAnswer) {
  auto p = parse_every_way({}, "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello!");
  EXPECT_EQ(p.reasoning, "The user greets me.\nI greet back.");
  EXPECT_EQ(p.content, "Hello!");
  EXPECT_TRUE(p.calls.empty());
}

TEST(Reasoning, PromptOpenedTheThinking) {
  ReasoningSetup s;
  s.opens = true;
  auto p = parse_every_way(s, "\nLet me think: 2 + 2 = 4.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(p.reasoning, "Let me think: 2 + 2 = 4.");
  EXPECT_EQ(p.content, "The answer is 4.");
}

TEST(Reasoning, NoThinkBlockIsAllContent) {
  auto p = parse_every_way({}, "  Hello <b>there</b>, <thin ice>");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "  Hello <b>there</b>, <thin ice>");
}

TEST(Reasoning, MarkerLookalikesInsideTheReasoning) {
  auto p = parse_every_way({}, "<think>a < b, <</think and </thinking> x \n </think>ok <think>");
  EXPECT_EQ(p.reasoning, "a < b, <</think and </thinking> x");
  EXPECT_EQ(p.content, "ok <think>");
}

TEST(Reasoning, UnclosedReasoningStaysReasoning) {
  auto p = parse_every_way({}, "<think>\nstill thinking </thi");
  EXPECT_EQ(p.reasoning, "still thinking </thi");
  EXPECT_EQ(p.content, "");
  ReasoningSetup open;
  open.opens = true;
  auto q = parse_every_way(open, "  ");
  EXPECT_EQ(q.reasoning, "");
  EXPECT_EQ(q.content, "");
}

TEST(Reasoning, ToolCallsAfterTheThinking) {
  ReasoningSetup s;
  s.tools = ToolCallFormat::kHermes;
  auto p = parse_every_way(
      s,
      "<think>\nI need the weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(p.reasoning, "I need the weather.");
  EXPECT_EQ(p.content, "Let me check.\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_FALSE(p.invalid);
}

TEST(Reasoning, ToolCallInsideTheThinkingIsReasoning) {
  ReasoningSetup s;
  s.tools = ToolCallFormat::kHermes;
  s.opens = true;
  const std::string call =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  auto p = parse_every_way(s, "maybe " + call + "\n</think>\n\n" + call);
  EXPECT_EQ(p.reasoning, "maybe " + call);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, "{\"x\": 1}");
}

TEST(Reasoning, HarmonyChannels) {
  ReasoningSetup s;
  s.reasoning = ReasoningFormat::kHarmony;
  auto p = parse_every_way(s,
                           "<|channel|>analysis<|message|>User asks about <b> tags. "
                           "Easy.<|end|><|start|>assistant<|channel|>final<|message|>Use "
                           "<b>bold</b>.<|return|>");
  EXPECT_EQ(p.reasoning, "User asks about <b> tags. Easy.");
  EXPECT_EQ(p.content, "Use <b>bold</b>.");
  EXPECT_TRUE(p.calls.empty());
}

TEST(Reasoning, HarmonyToolCalls) {
  ReasoningSetup s;
  s.reasoning = ReasoningFormat::kHarmony;
  s.tools = ToolCallFormat::kHermes;  // ignored: Harmony writes its own calls
  auto p = parse_every_way(
      s,
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}"
      "<|call|><|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}"
      "<|call|>");
  EXPECT_EQ(p.reasoning, "Need the weather.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
}

TEST(Reasoning, HarmonyWithoutHeaderIsContent) {
  ReasoningSetup s;
  s.reasoning = ReasoningFormat::kHarmony;
  auto p = parse_every_way(s, "Plain answer <|channel|> text");
  EXPECT_EQ(p.content, "Plain answer <|channel|> text");
  auto q = parse_every_way(s, "<|channel|>final<|mess");
  EXPECT_EQ(q.content, "<|channel|>final<|mess");
  EXPECT_EQ(q.reasoning, "");
}

TEST(Reasoning, BudgetCloseTextEndsTheReasoning) {
  // What the engine writes when the budget is spent must close the reasoning for the parser.
  ReasoningSetup s;
  s.opens = true;
  auto p = parse_every_way(
      s, "half a thought" + std::string(reasoning_close_text(s.reasoning)) + "Answer.");
  EXPECT_EQ(p.reasoning, "half a thought");
  EXPECT_EQ(p.content, "Answer.");
  ReasoningSetup h;
  h.reasoning = ReasoningFormat::kHarmony;
  auto q = parse_every_way(h, "<|channel|>analysis<|message|>half" +
                                  std::string(reasoning_close_text(h.reasoning)) +
                                  "<|channel|>final<|message|>Answer.");
  EXPECT_EQ(q.reasoning, "half");
  EXPECT_EQ(q.content, "Answer.");
}

TEST(Reasoning, DetectedOnTheRealTemplatesThatThink) {
  SLUICE_REQUIRE_SHARED(templates, "testdata/chat_templates");
  const std::filesystem::path dir = templates;
  int thinking = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    const std::string source = test::read_file(entry.path().string());
    const ReasoningFormat f = detect_reasoning_format(source);
    const bool deepseek_r1 = name.find("DeepSeek-R1") != std::string::npos ||
                             name.find("deepseek-r1") != std::string::npos;
    EXPECT_EQ(f, deepseek_r1 ? ReasoningFormat::kThink : ReasoningFormat::kNone) << name;
    if (f != ReasoningFormat::kThink) continue;
    ++thinking;
    Result<ChatTemplate> t = ChatTemplate::parse(source);
    ASSERT_TRUE(t.ok()) << name << ": " << t.message();
    ChatTemplateInputs in;
    in.messages =
        nlohmann::ordered_json::array({{{"role", "user"}, {"content", "What is 2 + 2?"}}});
    in.add_generation_prompt = true;
    in.bos_token = "<s>";
    Result<std::string> prompt = t->render(in);
    ASSERT_TRUE(prompt.ok()) << name << ": " << prompt.message();
    // Every DeepSeek-R1 template here opens the thinking in its generation prompt.
    EXPECT_TRUE(prompt_opens_reasoning(f, *prompt)) << name << ": " << *prompt;
    in.add_generation_prompt = false;
    in.messages.push_back({{"role", "assistant"}, {"content", "<think>x</think>4"}});
    Result<std::string> history = t->render(in);
    ASSERT_TRUE(history.ok()) << name;
    EXPECT_FALSE(prompt_opens_reasoning(f, *history)) << name;
  }
  EXPECT_GE(thinking, 2);
}

// The templates of 2026 models (tests/template/data/README.md).
std::string model_template(const std::string& name) {
  return test::read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/" + name + ".jinja");
}

std::string render(const std::string& source, nlohmann::ordered_json extra,
                   nlohmann::ordered_json messages = nullptr) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return "";
  ChatTemplateInputs in;
  in.messages =
      messages.is_null()
          ? nlohmann::ordered_json::array({{{"role", "user"}, {"content", "What is 2 + 2?"}}})
          : messages;
  in.add_generation_prompt = true;
  in.extra_context = std::move(extra);
  in.now = std::time_t(1795000000);
  Result<std::string> out = t->render(in);
  EXPECT_TRUE(out.ok()) << out.message();
  return out.ok() ? *out : "";
}

TEST(Reasoning, Qwen3ThinksWhenAskedAndCallsToolsAfter) {
  const std::string source = model_template("Qwen-Qwen3-0.6B");
  ASSERT_FALSE(source.empty());
  const ReasoningFormat f = detect_reasoning_format(source);
  EXPECT_EQ(f, ReasoningFormat::kThink);
  EXPECT_EQ(detect_tool_call_format(source), ToolCallFormat::kHermes);
  // The model writes <think> itself; enable_thinking false closes an empty one in the prompt.
  EXPECT_FALSE(prompt_opens_reasoning(f, render(source, nlohmann::ordered_json::object())));
  const std::string off = render(source, {{"enable_thinking", false}});
  EXPECT_FALSE(prompt_opens_reasoning(f, off));
  EXPECT_NE(off.find("<think>\n\n</think>"), std::string::npos);
  // What Qwen3 writes: thinking, then a call.
  ReasoningSetup s;
  s.tools = ToolCallFormat::kHermes;
  auto p = parse_every_way(s,
                           "<think>\nThe user wants the weather. I will call get_weather.\n</think>"
                           "\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                           "{\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(p.reasoning, "The user wants the weather. I will call get_weather.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
  // History: reasoning_content goes back into the template as a think block.
  const std::string history = render(
      source, nlohmann::ordered_json::object(),
      nlohmann::ordered_json::array(
          {{{"role", "user"}, {"content", "hi"}},
           {{"role", "assistant"}, {"content", "Hello!"}, {"reasoning_content", "Greet back."}},
           {{"role", "user"}, {"content", "bye"}}}));
  EXPECT_NE(history.find("Hello!"), std::string::npos);
}

TEST(Reasoning, Qwen35OpensTheThinkingInItsPrompt) {
  const std::string source = model_template("Qwen3.5-4B");
  ASSERT_FALSE(source.empty());
  const ReasoningFormat f = detect_reasoning_format(source);
  EXPECT_EQ(f, ReasoningFormat::kThink);
  EXPECT_TRUE(prompt_opens_reasoning(f, render(source, nlohmann::ordered_json::object())));
  EXPECT_FALSE(prompt_opens_reasoning(f, render(source, {{"enable_thinking", false}})));
  ReasoningSetup s;
  s.opens = true;
  auto p = parse_every_way(s, "\n2 + 2 is 4.\n</think>\n\nThe answer is **4**.");
  EXPECT_EQ(p.reasoning, "2 + 2 is 4.");
  EXPECT_EQ(p.content, "The answer is **4**.");
}

TEST(Reasoning, GptOssSpeaksHarmony) {
  const std::string source = model_template("openai-gpt-oss-120b");
  ASSERT_FALSE(source.empty());
  EXPECT_EQ(detect_reasoning_format(source), ReasoningFormat::kHarmony);
  EXPECT_EQ(detect_tool_call_format(source), ToolCallFormat::kNone);
  const std::string prompt = render(source, {{"reasoning_effort", "high"}});
  EXPECT_NE(prompt.find("Reasoning: high"), std::string::npos);
  EXPECT_EQ(prompt.substr(prompt.size() - 18), "<|start|>assistant");
  ReasoningSetup s;
  s.reasoning = ReasoningFormat::kHarmony;
  auto p = parse_every_way(
      s,
      "<|channel|>analysis<|message|>We need to answer 2+2. Simple.<|end|><|start|>assistant"
      "<|channel|>final<|message|>2 + 2 = 4.");
  EXPECT_EQ(p.reasoning, "We need to answer 2+2. Simple.");
  EXPECT_EQ(p.content, "2 + 2 = 4.");
}

TEST(Reasoning, FormatNames) {
  EXPECT_EQ(reasoning_format_name(ReasoningFormat::kNone), "none");
  EXPECT_EQ(reasoning_format_name(ReasoningFormat::kThink), "think");
  EXPECT_EQ(reasoning_format_name(ReasoningFormat::kHarmony), "harmony");
  EXPECT_EQ(detect_reasoning_format("{{ '<|start|>assistant<|channel|>final' }}"),
            ReasoningFormat::kHarmony);
  EXPECT_FALSE(prompt_opens_reasoning(ReasoningFormat::kHarmony, "<think>"));
  EXPECT_TRUE(prompt_opens_reasoning(ReasoningFormat::kThink, "<|im_start|>assistant\n<think>\n"));
}

}  // namespace
}  // namespace sluice
