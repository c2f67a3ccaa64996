#include "template/chat_template.h"

#include "template/jinja_builtins.h"
#include "template/jinja_interp.h"
#include "template/jinja_parser.h"

namespace sluice {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source,
                                         const ChatTemplateLimits& limits) {
  auto program = jinja::parse_template(source, limits.max_parse_depth);
  if (!program.ok()) return make_error("chat template syntax error at ", program.message());
  return ChatTemplate(std::shared_ptr<const jinja::Program>(std::move(program).value()), limits);
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  auto globals = std::make_shared<jinja::Scope>(nullptr);
  jinja::install_globals(*globals);
  if (!inputs.extra_context.is_null()) {
    if (!inputs.extra_context.is_object())
      return make_error("extra template context must be a JSON object");
    for (const auto& [key, value] : inputs.extra_context.items()) {
      SLUICE_ASSIGN_OR_RETURN(jinja::Value v, jinja::from_json(value));
      globals->set(key, std::move(v));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(jinja::Value messages, jinja::from_json(inputs.messages));
  globals->set("messages", std::move(messages));
  if (!inputs.tools.is_null()) {
    SLUICE_ASSIGN_OR_RETURN(jinja::Value tools, jinja::from_json(inputs.tools));
    globals->set("tools", std::move(tools));
  }
  globals->set("add_generation_prompt", jinja::Value::boolean(inputs.add_generation_prompt));
  globals->set("bos_token", jinja::Value::string(inputs.bos_token));
  globals->set("eos_token", jinja::Value::string(inputs.eos_token));

  jinja::RenderLimits limits;
  limits.max_steps = limits_.max_steps;
  limits.max_output_bytes = limits_.max_output_bytes;
  limits.max_call_depth = limits_.max_call_depth;
  limits.max_arena_objects = limits_.max_objects;
  jinja::Interpreter interp(*program_, limits, inputs.now.value_or(std::time(nullptr)));
  return interp.render(std::move(globals));
}

}  // namespace sluice
