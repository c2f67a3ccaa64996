// Chat templates rendering tool use: the tools listed, assistant tool calls and tool results in
// the history. The expected prompts were rendered by Python Jinja2 3.1.6 configured as
// transformers' apply_chat_template (as in template_golden_test.cpp) from the OpenAI-style
// messages below after messages_for_template (arguments as JSON objects, as Hugging Face's tool
// use documentation passes them). And the round trip: what a family's template writes for an
// assistant's tool calls is what ToolCallParser reads back from the model.
#include <gtest/gtest.h>

#include <string>

#include "template/chat_template.h"
#include "template/tool_calls.h"
#include "test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kTools =
    R"J([{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}},
 {"type": "function", "function": {"name": "get_time", "description": "Local time in a city.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}}, "required": ["location"]}}}])J";

// Two parallel calls and their results (Hermes, Qwen2.5, Mistral).
constexpr const char* kTwoCalls =
    R"J([{"role": "system", "content": "You are a helpful assistant."},
 {"role": "user", "content": "Weather and time in Paris?"},
 {"role": "assistant", "content": null, "tool_calls": [
   {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\", \"unit\": \"celsius\"}"}},
   {"id": "call00002", "type": "function", "function": {"name": "get_time", "arguments": "{\"location\": \"Paris\"}"}}]},
 {"role": "tool", "tool_call_id": "call00001", "content": "22 C, sunny"},
 {"role": "tool", "tool_call_id": "call00002", "content": "14:05"},
 {"role": "assistant", "content": "It is 22 C and sunny in Paris, and 14:05."},
 {"role": "user", "content": "Thanks!"}])J";

// One call (the Llama 3.1 template raises on more).
constexpr const char* kOneCall = R"J([{"role": "system", "content": "You are a helpful assistant."},
 {"role": "user", "content": "Weather in Paris?"},
 {"role": "assistant", "content": null, "tool_calls": [
   {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\", \"unit\": \"celsius\"}"}}]},
 {"role": "tool", "tool_call_id": "call00001", "content": "22 C, sunny"},
 {"role": "assistant", "content": "It is 22 C and sunny in Paris."},
 {"role": "user", "content": "Thanks!"}])J";

struct HistoryCase {
  const char* template_file;
  const char* messages;
  const char* bos;
  const char* eos;
  const char* expected;
};

// clang-format off
const HistoryCase kHistory[] = {
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", kTwoCalls, "<|begin_of_text|>", "<|im_end|>",
     R"G(<|begin_of_text|><|im_start|>system
You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. Here are the available tools: <tools> {"type": "function", "function": {"name": "get_weather", "description": "get_weather(location: str, unit: str) - Current weather in a city.

    Args:
        location(str): City name        unit(str): Temperature unit", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}
{"type": "function", "function": {"name": "get_time", "description": "get_time(location: str) - Local time in a city.

    Args:
        location(str): City name", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}}, "required": ["location"]}} </tools>Use the following pydantic model json schema for each tool call you will make: {"properties": {"name": {"title": "Name", "type": "string"}, "arguments": {"title": "Arguments", "type": "object"}}, "required": ["name", "arguments"], "title": "FunctionCall", "type": "object"}}
For each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:
<tool_call>
{"name": <function-name>, "arguments": <args-dict>}
</tool_call><|im_end|>
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
Weather and time in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}
</tool_call>
<tool_call>
{"name": "get_time", "arguments": {"location": "Paris"}}
</tool_call><|im_end|>
<|im_start|>tool
<tool_response>
22 C, sunny
</tool_response>
<tool_response>
14:05
</tool_response>
<|im_end|><|im_start|>assistant
It is 22 C and sunny in Paris, and 14:05.<|im_end|>
<|im_start|>user
Thanks!<|im_end|>
<|im_start|>assistant
)G"},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", kTwoCalls, "", "<|im_end|>",
     R"G(<|im_start|>system
You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}}
{"type": "function", "function": {"name": "get_time", "description": "Local time in a city.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}}, "required": ["location"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather and time in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}
</tool_call>
<tool_call>
{"name": "get_time", "arguments": {"location": "Paris"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
22 C, sunny
</tool_response>
<tool_response>
14:05
</tool_response><|im_end|>
<|im_start|>assistant
It is 22 C and sunny in Paris, and 14:05.<|im_end|>
<|im_start|>user
Thanks!<|im_end|>
<|im_start|>assistant
)G"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", kOneCall, "<|begin_of_text|>", "<|eot_id|>",
     R"G(<|begin_of_text|><|start_header_id|>system<|end_header_id|>

Environment: ipython
Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024

You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>

Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.

Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.

{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "City name"
                },
                "unit": {
                    "type": "string",
                    "enum": [
                        "celsius",
                        "fahrenheit"
                    ],
                    "description": "Temperature unit"
                }
            },
            "required": [
                "location"
            ]
        }
    }
}

{
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "City name"
                }
            },
            "required": [
                "location"
            ]
        }
    }
}

Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>

{"name": "get_weather", "parameters": {"location": "Paris", "unit": "celsius"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>

"22 C, sunny"<|eot_id|><|start_header_id|>assistant<|end_header_id|>

It is 22 C and sunny in Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>

Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>

)G"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", kTwoCalls, "<s>", "</s>",
     R"G(<s>[INST]Weather and time in Paris?[/INST][TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}, "id": "call00001"}, {"name": "get_time", "arguments": {"location": "Paris"}, "id": "call00002"}]</s>[TOOL_RESULTS]{"content": 22 C, sunny, "call_id": "call00001"}[/TOOL_RESULTS][TOOL_RESULTS]{"content": 14:05, "call_id": "call00002"}[/TOOL_RESULTS]It is 22 C and sunny in Paris, and 14:05.</s>[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}}, {"type": "function", "function": {"name": "get_time", "description": "Local time in a city.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}}, "required": ["location"]}}}][/AVAILABLE_TOOLS][INST]You are a helpful assistant.

Thanks![/INST])G"},
};
// clang-format on

Result<std::string> render(const std::string& source, const ojson& messages, bool generation_prompt,
                           const HistoryCase& c) {
  SLUICE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  ChatTemplateInputs in;
  in.messages = messages_for_template(detect_tool_call_format(source), messages);
  in.tools = ojson::parse(kTools);
  in.add_generation_prompt = generation_prompt;
  in.bos_token = c.bos;
  in.eos_token = c.eos;
  return tmpl.render(in);
}

TEST(TemplateToolHistory, RendersToolsCallsAndResultsAsTransformers) {
  for (const HistoryCase& c : kHistory) {
    SCOPED_TRACE(c.template_file);
    SLUICE_REQUIRE_SHARED(path, std::string("testdata/chat_templates/") + c.template_file);
    Result<std::string> out = render(test::read_file(path), ojson::parse(c.messages), true, c);
    ASSERT_TRUE(out.ok()) << out.message();
    EXPECT_EQ(*out, c.expected);
  }
}

// Without messages_for_template, `arguments | tojson` double-encodes OpenAI's string arguments.
TEST(TemplateToolHistory, StringArgumentsWouldBeDoubleEncoded) {
  SLUICE_REQUIRE_SHARED(path, "testdata/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  auto tmpl = ChatTemplate::parse(test::read_file(path));
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ChatTemplateInputs in;
  in.messages = ojson::parse(kTwoCalls);
  auto raw = tmpl->render(in);
  ASSERT_TRUE(raw.ok()) << raw.message();
  EXPECT_NE(raw->find(R"("arguments": "{\"location\": \"Paris\")"), std::string::npos) << *raw;
  in.messages = messages_for_template(ToolCallFormat::kHermes, in.messages);
  auto fixed = tmpl->render(in);
  ASSERT_TRUE(fixed.ok()) << fixed.message();
  EXPECT_NE(fixed->find(R"("arguments": {"location": "Paris", "unit": "celsius"})"),
            std::string::npos)
      << *fixed;
}

struct RoundTrip {
  const char* template_file;
  ToolCallFormat format;
  const char* messages;
  const char* call_start;  // the text after which the assistant's message begins
  const char* call_end;    // and the text that ends it
};

// The assistant's tool calls as each template writes them parse back into the same calls.
TEST(TemplateToolHistory, ParserReadsWhatTheTemplateWrites) {
  const RoundTrip kCases[] = {
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes, kTwoCalls,
       "<|im_start|>assistant\n", "<|im_end|>"},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::kHermes, kTwoCalls,
       "<|im_start|>assistant\n", "<|im_end|>"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes, kTwoCalls,
       "<|im_start|>assistant\n", "<|im_end|>"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json, kOneCall,
       "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json, kOneCall,
       "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3Json, kOneCall,
       "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral, kTwoCalls, "[/INST]",
       "</s>"},
  };
  for (const RoundTrip& c : kCases) {
    SCOPED_TRACE(c.template_file);
    SLUICE_REQUIRE_SHARED(path, std::string("testdata/chat_templates/") + c.template_file);
    const std::string source = test::read_file(path);
    ASSERT_EQ(detect_tool_call_format(source), c.format);
    // The conversation up to the assistant's tool calls.
    ojson messages = ojson::array();
    for (const ojson& m : ojson::parse(c.messages)) {
      messages.push_back(m);
      if (m.contains("tool_calls")) break;
    }
    auto out = render(source, messages, false, HistoryCase{c.template_file, "", "<s>", "</s>", ""});
    ASSERT_TRUE(out.ok()) << out.message();
    size_t begin = out->rfind(c.call_start);
    ASSERT_NE(begin, std::string::npos) << *out;
    begin += std::string_view(c.call_start).size();
    size_t end = out->find(c.call_end, begin);
    ASSERT_NE(end, std::string::npos) << *out;
    const std::string message = out->substr(begin, end - begin);

    ParsedToolCalls parsed = parse_tool_calls(c.format, message, 1);
    EXPECT_FALSE(parsed.invalid) << parsed.error;
    EXPECT_EQ(parsed.content, "") << message;
    const ojson& calls = messages.back()["tool_calls"];
    ASSERT_EQ(parsed.calls.size(), calls.size()) << message;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(parsed.calls[i].name, calls[i]["function"]["name"]);
      EXPECT_EQ(ojson::parse(parsed.calls[i].arguments),
                ojson::parse(calls[i]["function"]["arguments"].get<std::string>()));
    }
  }
}

// Mistral's templates take only 9-alphanumeric ids: others map to one, the same in the call and
// in its result, so the history renders.
TEST(TemplateToolHistory, MistralIdsAreMappedConsistently) {
  SLUICE_REQUIRE_SHARED(path, "testdata/chat_templates/mistralai-Mistral-Nemo-Instruct-2407.jinja");
  ojson messages = ojson::parse(kTwoCalls);
  messages[2]["tool_calls"][0]["id"] = "call_Xy12Ab34Cd56Ef78Gh90Ij12";
  messages[3]["tool_call_id"] = "call_Xy12Ab34Cd56Ef78Gh90Ij12";
  ojson mapped = messages_for_template(ToolCallFormat::kMistral, messages);
  const std::string id = mapped[2]["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 9u);
  EXPECT_EQ(mapped[3]["tool_call_id"], id);
  EXPECT_EQ(mapped[2]["tool_calls"][1]["id"], "call00002");  // already valid: unchanged
  auto tmpl = ChatTemplate::parse(test::read_file(path));
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ChatTemplateInputs in;
  in.messages = messages;
  EXPECT_FALSE(tmpl->render(in).ok());  // the template rejects the long id itself
  in.messages = mapped;
  auto out = tmpl->render(in);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_NE(out->find("\"call_id\": \"" + id + "\""), std::string::npos) << *out;
}

TEST(TemplateToolHistory, MessagesForTemplate) {
  ojson messages = ojson::parse(kTwoCalls);
  messages[2]["tool_calls"][1]["function"]["arguments"] = "not json";
  EXPECT_EQ(messages_for_template(ToolCallFormat::kNone, messages), messages);
  ojson out = messages_for_template(ToolCallFormat::kHermes, messages);
  EXPECT_EQ(out[2]["tool_calls"][0]["function"]["arguments"],
            ojson::parse(R"({"location": "Paris", "unit": "celsius"})"));
  EXPECT_EQ(out[2]["tool_calls"][1]["function"]["arguments"], "not json");  // left as it is
  EXPECT_EQ(out[3], messages[3]);
}

}  // namespace
}  // namespace sluice
