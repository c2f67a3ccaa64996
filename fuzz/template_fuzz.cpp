// libFuzzer target: parses the input as a chat template and renders it with a small
// conversation (messages, tools, extra variables) under tight limits. Any crash, sanitizer
// report, hang or unbounded allocation is a bug: hostile templates must end in an error.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON
//   -DSLUICE_SANITIZE=address ninja -C build-fuzz template_fuzz build-fuzz/fuzz/template_fuzz
//   -max_len=4096 -timeout=10 -rss_limit_mb=2048 CORPUS_DIR
// A good seed corpus: ../shared/testdata/chat_templates/*.jinja.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "template/chat_template.h"

namespace {

const sluice::ChatTemplateInputs& inputs() {
  static const sluice::ChatTemplateInputs in = [] {
    sluice::ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b> & 'x' \"y\" ünï 中文"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"},
      {"role": "assistant", "content": "<think>hmm</think>It is 21."}
    ])");
    in.tools =
        nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string",
      "enum": ["Paris", "Rome"]}, "days": {"type": "array", "items": {"type": "integer"}}},
      "required": ["city"]}}}])");
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.add_generation_prompt = true;
    in.extra_context =
        nlohmann::ordered_json::parse(R"({"documents": [{"title": "T", "text": "doc"}],
      "n": 3, "f": 1.5, "flag": false})");
    in.now = 1768478400;  // fixed: no dependence on the wall clock
    return in;
  }();
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::ChatTemplateLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_objects = 2'000;
  auto tmpl = sluice::ChatTemplate::parse(
      std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!tmpl.ok()) return 0;
  auto out = tmpl->render(inputs());
  (void)out;
  return 0;
}
