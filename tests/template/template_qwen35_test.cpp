// Qwen3.5's published chat template (data/Qwen3.5-4B.jinja) rendered with enable_thinking
// unset, true and false, with history, tools, and without a generation prompt: each expected
// prompt is what Python Jinja2 3.1.6 renders when configured as Hugging Face transformers does
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, json.dumps-based
// tojson; bos_token and eos_token ""). sluice must reproduce it byte for byte.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"
#include "test_util.h"

namespace sluice {
namespace {

struct Qwen35Case {
  const char* name;
  const char* messages;  // JSON
  const char* tools;     // JSON; null: no tools
  const char* extra;     // JSON object of further variables (enable_thinking)
  bool add_generation_prompt;
  const char* expected;
};

// clang-format off
const Qwen35Case kQwen35Cases[] = {
    {"default",
     R"J([{"role": "user", "content": "What is 2 + 2?"}])J",
     R"J(null)J",
     R"J({})J", true,
     R"J(<|im_start|>user
What is 2 + 2?<|im_end|>
<|im_start|>assistant
<think>
)J"},
    {"thinking_on",
     R"J([{"role": "user", "content": "What is 2 + 2?"}])J",
     R"J(null)J",
     R"J({"enable_thinking": true})J", true,
     R"J(<|im_start|>user
What is 2 + 2?<|im_end|>
<|im_start|>assistant
<think>
)J"},
    {"thinking_off",
     R"J([{"role": "user", "content": "What is 2 + 2?"}])J",
     R"J(null)J",
     R"J({"enable_thinking": false})J", true,
     R"J(<|im_start|>user
What is 2 + 2?<|im_end|>
<|im_start|>assistant
<think>

</think>

)J"},
    {"history_off",
     R"J([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."}, {"role": "user", "content": "bye"}])J",
     R"J(null)J",
     R"J({"enable_thinking": false})J", true,
     R"J(<|im_start|>system
Be brief.<|im_end|>
<|im_start|>user
hi<|im_end|>
<|im_start|>assistant
Hello!<|im_end|>
<|im_start|>user
bye<|im_end|>
<|im_start|>assistant
<think>

</think>

)J"},
    {"history_on",
     R"J([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."}, {"role": "user", "content": "bye"}])J",
     R"J(null)J",
     R"J({"enable_thinking": true})J", true,
     R"J(<|im_start|>system
Be brief.<|im_end|>
<|im_start|>user
hi<|im_end|>
<|im_start|>assistant
Hello!<|im_end|>
<|im_start|>user
bye<|im_end|>
<|im_start|>assistant
<think>
)J"},
    {"tools_off",
     R"J([{"role": "user", "content": "Weather in Paris?"}])J",
     R"J([{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])J",
     R"J({"enable_thinking": false})J", true,
     R"J(<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<think>

</think>

)J"},
    {"no_generation_prompt_off",
     R"J([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"}])J",
     R"J(null)J",
     R"J({"enable_thinking": false})J", false,
     R"J(<|im_start|>user
hi<|im_end|>
<|im_start|>assistant
<think>
hmm
</think>

Hello!<|im_end|>
)J"},
};
// clang-format on

TEST(Qwen35Template, EnableThinkingRendersAsTransformers) {
  const std::string source =
      test::read_file(std::string(SLUICE_TESTS_DIR) + "/template/data/Qwen3.5-4B.jinja");
  ASSERT_FALSE(source.empty());
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  ASSERT_TRUE(t.ok()) << t.message();
  for (const Qwen35Case& c : kQwen35Cases) {
    ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::parse(c.messages);
    in.tools = nlohmann::ordered_json::parse(c.tools);
    in.extra_context = nlohmann::ordered_json::parse(c.extra);
    in.add_generation_prompt = c.add_generation_prompt;
    Result<std::string> out = t->render(in);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.message();
    EXPECT_EQ(*out, c.expected) << c.name;
  }
}

}  // namespace
}  // namespace sluice
