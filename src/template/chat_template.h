// Chat templates: renders a model's `tokenizer.chat_template` (Jinja2) into a prompt exactly
// as Hugging Face transformers' apply_chat_template does, i.e. Python Jinja2 configured as
//
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//                                 extensions=[loopcontrols])
//   + filter tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
//     = json.dumps(...) (Python separators ", " / ": ")
//   + globals raise_exception(msg) and strftime_now(fmt)
//
// Values follow Python semantics (int/float arithmetic, str() / repr() printing, truthiness,
// dict key order) and Jinja's default Undefined. Templates are untrusted: rendering is bounded
// in steps, output bytes and recursion depth, and fails with a readable error instead.
//
//   auto tmpl = ChatTemplate::parse(source);          // syntax errors name line and column
//   ChatTemplateInputs in;
//   in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
//   in.add_generation_prompt = true;
//   Result<std::string> prompt = tmpl->render(in);
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sluice {

namespace jinja {
struct Program;
}

// Bounds on one render of an untrusted template.
struct ChatTemplateLimits {
  uint64_t max_steps = 10'000'000;      // evaluation steps (about a second of work)
  size_t max_output_bytes = 64u << 20;  // the prompt, and any single string/list built
  int max_call_depth = 64;              // nested macro calls
  int max_parse_depth = 200;            // nesting of expressions and blocks in the source
  size_t max_objects = 100'000;         // namespace() objects and macro definitions per render
};

// The variables a chat template sees.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: `tools` stays undefined, as transformers does
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  // More template variables (documents, enable_thinking, date_string, ...): an object.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  // The clock strftime_now() formats (local time); the current time when unset.
  std::optional<std::time_t> now;
};

// A parsed template. Immutable and cheap to copy (the syntax tree is shared); render() may
// be called concurrently from several threads.
class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source, const ChatTemplateLimits& limits = {});

  // The rendered prompt, or the error: raise_exception(msg) fails with exactly `msg`; other
  // errors read "line L, column C: <Jinja-style message>".
  Result<std::string> render(const ChatTemplateInputs& inputs) const;

 private:
  ChatTemplate(std::shared_ptr<const jinja::Program> program, const ChatTemplateLimits& limits)
      : program_(std::move(program)), limits_(limits) {}

  std::shared_ptr<const jinja::Program> program_;
  ChatTemplateLimits limits_;
};

}  // namespace sluice
