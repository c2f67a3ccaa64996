// `sluice template [MODEL.gguf] [--template FILE.jinja] --messages MESSAGES.json
//   [--tools TOOLS.json] [--context VARS.json] [--bos-token S] [--eos-token S]
//   [--add-generation-prompt] [--now "YYYY-MM-DD HH:MM:SS"]`
// prints the prompt a chat template renders, byte for byte (no newline added).
//
// The template comes from --template, else from the model's `tokenizer.chat_template`; BOS/EOS
// strings from --bos-token/--eos-token, else from the model's tokens. MESSAGES.json is a JSON
// array of messages, or an object with "messages" (and optionally "tools").
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "template/chat_template.h"

namespace sluice::cli {

namespace {

struct TemplateArgs {
  std::string model;
  std::string template_file;
  std::string messages_file;
  std::string tools_file;
  std::string context_file;
  std::string bos_token;
  std::string eos_token;
  std::string now;
  bool have_bos = false;
  bool have_eos = false;
  bool add_generation_prompt = false;
};

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<nlohmann::ordered_json> read_json(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_text(path));
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error("'", path, "' is not valid JSON");
  return j;
}

// The token string for the id stored under `key` ("" when the model has no such token).
Result<std::string> token_text(const GgufFile& model, const std::vector<std::string>& tokens,
                               const char* key) {
  if (!model.has(key)) return std::string();
  SLUICE_ASSIGN_OR_RETURN(int64_t id, model.get_int(key));
  if (id < 0 || static_cast<size_t>(id) >= tokens.size()) {
    return make_error("'", model.path(), "': ", key, " = ", id, " is outside the vocabulary (",
                      tokens.size(), " tokens)");
  }
  return tokens[static_cast<size_t>(id)];
}

// Template source and BOS/EOS strings from a GGUF model.
Status load_from_model(const TemplateArgs& a, std::string* source, std::string* bos,
                       std::string* eos) {
  SLUICE_ASSIGN_OR_RETURN(GgufFile model, GgufFile::open(a.model));
  if (a.template_file.empty()) {
    if (!model.has("tokenizer.chat_template")) {
      return make_error("'", a.model, "' has no tokenizer.chat_template (give --template FILE)");
    }
    SLUICE_ASSIGN_OR_RETURN(*source, model.get<std::string>("tokenizer.chat_template"));
  }
  if (a.have_bos && a.have_eos) return {};
  std::vector<std::string> tokens;
  if (model.has("tokenizer.ggml.tokens")) {
    SLUICE_ASSIGN_OR_RETURN(tokens, model.get_array<std::string>("tokenizer.ggml.tokens"));
  }
  if (!a.have_bos) {
    SLUICE_ASSIGN_OR_RETURN(*bos, token_text(model, tokens, "tokenizer.ggml.bos_token_id"));
  }
  if (!a.have_eos) {
    SLUICE_ASSIGN_OR_RETURN(*eos, token_text(model, tokens, "tokenizer.ggml.eos_token_id"));
  }
  return {};
}

Result<std::time_t> parse_now(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (!end || *end) {
    tm = {};
    end = strptime(text.c_str(), "%Y-%m-%d", &tm);
  }
  if (!end || *end) return make_error("--now expects \"YYYY-MM-DD HH:MM:SS\", got '", text, "'");
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

Result<std::string> render(const TemplateArgs& a) {
  if (a.model.empty() && a.template_file.empty()) {
    return make_error("give a MODEL.gguf or --template FILE.jinja");
  }
  std::string source;
  std::string bos = a.bos_token;
  std::string eos = a.eos_token;
  if (!a.template_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(source, read_text(a.template_file));
  }
  if (!a.model.empty()) SLUICE_RETURN_IF_ERROR(load_from_model(a, &source, &bos, &eos));

  ChatTemplateInputs in;
  in.bos_token = bos;
  in.eos_token = eos;
  in.add_generation_prompt = a.add_generation_prompt;
  SLUICE_ASSIGN_OR_RETURN(nlohmann::ordered_json messages, read_json(a.messages_file));
  if (messages.is_object() && messages.contains("messages")) {
    if (messages.contains("tools")) in.tools = messages["tools"];
    messages = nlohmann::ordered_json(messages["messages"]);
  }
  if (!messages.is_array())
    return make_error("'", a.messages_file, "' must hold a JSON array of messages");
  in.messages = std::move(messages);
  if (!a.tools_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(in.tools, read_json(a.tools_file));
  }
  if (!a.context_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(in.extra_context, read_json(a.context_file));
    if (!in.extra_context.is_object())
      return make_error("'", a.context_file, "' must hold a JSON object");
  }
  if (!a.now.empty()) {
    SLUICE_ASSIGN_OR_RETURN(in.now, parse_now(a.now));
  }

  SLUICE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  return tmpl.render(in);
}

}  // namespace

void register_template(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("template", "Render a chat template into a prompt");
  auto args = std::make_shared<TemplateArgs>();
  cmd->add_option("model", args->model,
                  "GGUF model whose tokenizer.chat_template and BOS/EOS to use");
  cmd->add_option("--template", args->template_file,
                  "Jinja chat template file (overrides the model's)");
  cmd->add_option("--messages", args->messages_file, "JSON file: array of messages")->required();
  cmd->add_option("--tools", args->tools_file, "JSON file: array of tool definitions");
  cmd->add_option("--context", args->context_file, "JSON file: object of extra template variables");
  CLI::Option* bos = cmd->add_option("--bos-token", args->bos_token, "BOS token string");
  CLI::Option* eos = cmd->add_option("--eos-token", args->eos_token, "EOS token string");
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt,
                "End with the assistant turn header");
  cmd->add_option("--now", args->now, "Time strftime_now() sees (local): \"YYYY-MM-DD HH:MM:SS\"");
  cmd->callback([args, bos, eos, &exit_code] {
    args->have_bos = bos->count() > 0;
    args->have_eos = eos->count() > 0;
    Result<std::string> out = render(*args);
    if (!out.ok()) {
      exit_code = report_error("template", out.message());
      return;
    }
    std::fwrite(out->data(), 1, out->size(), stdout);
    exit_code = 0;
  });
}

}  // namespace sluice::cli
