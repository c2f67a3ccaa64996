// Qwen's XML tool calls (xml_tool_calls.h): detection on Qwen3.5's published template, values
// typed by the tools' schemas, streaming however the text is split, broken calls, and the
// template's own rendering of a call parsed back to the same arguments.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "message_events.h"
#include "template/chat_template.h"
#include "template/tool_calls.h"
#include "test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const ToolParamTypes> weather_types() {
  auto t = std::make_shared<ToolParamTypes>();
  t->tools["get_weather"] = {{"city", true}, {"days", false}, {"opts", false}};
  t->tools["note"] = {{"text", true}};
  return t;
}

ParsedToolCalls parse_xml(std::string_view text,
                          std::shared_ptr<const ToolParamTypes> types = weather_types()) {
  auto run = [&](const std::vector<std::string_view>& pieces) {
    ToolCallParser parser(ToolCallFormat::kQwenXml, 42, types);
    std::vector<ToolCallEvent> events;
    for (std::string_view p : pieces)
      for (ToolCallEvent& e : parser.feed(p)) events.push_back(std::move(e));
    for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
    return events;
  };
  return collect_tool_call_events(test::parse_every_way(run, text));
}

ojson args(const ToolCall& c) {
  return ojson::parse(c.arguments);
}

TEST(XmlToolCalls, DetectedOnQwen35) {
  const std::string source =
      test::read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/Qwen3.5-4B.jinja");
  ASSERT_FALSE(source.empty());
  EXPECT_EQ(detect_tool_call_format(source), ToolCallFormat::kQwenXml);
  EXPECT_EQ(tool_call_format_name(ToolCallFormat::kQwenXml), "qwen3_coder");
  const std::string qwen3 =
      test::read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/Qwen-Qwen3-0.6B.jinja");
  EXPECT_EQ(detect_tool_call_format(qwen3), ToolCallFormat::kHermes);
}

TEST(XmlToolCalls, ValuesTypedBySchema) {
  auto p = parse_xml(
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan "
      "\"Fran\" <b>\\cisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n"
      "{\"unit\": \"c\"}\n</parameter>\n</function>\n</tool_call>\n\n<tool_call>\n"
      "<function=note>\n<parameter=text>\n42\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.\n");
  EXPECT_FALSE(p.invalid) << p.error;
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(args(p.calls[0]),
            ojson({{"city", "San \"Fran\" <b>\\cisco"}, {"days", 3}, {"opts", {{"unit", "c"}}}}));
  EXPECT_EQ(p.calls[1].name, "note");
  EXPECT_EQ(args(p.calls[1]), ojson({{"text", "42"}}));  // a string parameter stays a string
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
}

TEST(XmlToolCalls, UnknownToolsGuessFromTheValue) {
  auto p = parse_xml(
      "<tool_call>\n<function=other>\n<parameter=n>\n7\n</parameter>\n<parameter=s>\nhello "
      "world\n</parameter>\n<parameter=multi>\nline 1\nline 2\n</parameter>\n</function>\n"
      "</tool_call>",
      nullptr);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(args(p.calls[0]), ojson({{"n", 7}, {"s", "hello world"}, {"multi", "line 1\nline 2"}}));
  auto empty = parse_xml("<tool_call>\n<function=ping>\n</function>\n</tool_call>");
  ASSERT_EQ(empty.calls.size(), 1u);
  EXPECT_EQ(empty.calls[0].arguments, "{}");
}

TEST(XmlToolCalls, BrokenCallsAndForgivenEnds) {
  // No </tool_call>: the call stands.
  auto open =
      parse_xml("<tool_call>\n<function=note>\n<parameter=text>\nhi\n</parameter>\n</function>");
  ASSERT_EQ(open.calls.size(), 1u);
  EXPECT_FALSE(open.invalid);
  // Not a function: the text is content.
  auto junk = parse_xml("<tool_call>\n{\"name\": \"x\"}\n</tool_call> tail");
  EXPECT_TRUE(junk.invalid);
  EXPECT_TRUE(junk.calls.empty());
  EXPECT_EQ(junk.content, "<tool_call>\n{\"name\": \"x\"}\n</tool_call> tail");
  // Cut off inside a value: invalid, what was reported stays.
  auto cut = parse_xml("<tool_call>\n<function=note>\n<parameter=text>\nhalf");
  EXPECT_TRUE(cut.invalid);
  EXPECT_TRUE(cut.calls.empty());
  // Lookalikes in plain text.
  auto text = parse_xml("a <tool <tool_cal> </tool_call> b");
  EXPECT_EQ(text.content, "a <tool <tool_cal> </tool_call> b");
  EXPECT_TRUE(text.calls.empty());
}

TEST(XmlToolCalls, TheTemplatesRenderingParsesBack) {
  const std::string source =
      test::read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/Qwen3.5-4B.jinja");
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  ASSERT_TRUE(t.ok()) << t.message();
  const ojson call_args = {{"city", "Paris"}, {"days", 3}, {"opts", {{"unit", "c"}}}};
  ChatTemplateInputs in;
  in.messages = messages_for_template(
      ToolCallFormat::kQwenXml,
      ojson::array(
          {{{"role", "user"}, {"content", "Weather?"}},
           {{"role", "assistant"},
            {"content", ""},
            {"tool_calls",
             {{{"id", "c1"},
               {"type", "function"},
               {"function", {{"name", "get_weather"}, {"arguments", call_args.dump()}}}}}}}}));
  Result<std::string> out = t->render(in);
  ASSERT_TRUE(out.ok()) << out.message();
  const size_t at = out->find("<tool_call>");
  ASSERT_NE(at, std::string::npos) << *out;
  const size_t end = out->find("</tool_call>", at);
  auto p = parse_xml(out->substr(at, end + 12 - at));
  ASSERT_EQ(p.calls.size(), 1u) << out->substr(at);
  EXPECT_EQ(args(p.calls[0]), call_args);
}

}  // namespace
}  // namespace sluice
