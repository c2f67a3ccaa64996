// `sluice run MODEL -p PROMPT`: generate text. Streams the continuation to stdout as it is
// produced, then prints prompt size, TTFT and prefill/decode speed to stderr; or, with
// --output-format json, one JSON object. --chat is an interactive chat using the model's
// chat template (each turn reuses the previous conversation's KV through the prefix cache).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/engine_session.h"
#include "cli/parallel_session.h"
#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "template/chat_template.h"

namespace sluice::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  int n_predict = -1;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  int64_t seed = -1;
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  EngineCliOptions engine;
  bool chat = false;
  bool no_bos = false;
  std::string output_format = "text";
  std::string json_schema_file;  // constrain the output (structured output)
  std::string grammar_file;
  std::string regex;
};

Result<std::string> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error("cannot read '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// --json-schema / --grammar / --regex: the output constraint, compiled for this engine's
// vocabulary.
Status apply_constraint(const RunOptions& o, const Engine& engine, GenerationParams& g) {
  const int given = !o.json_schema_file.empty() + !o.grammar_file.empty() + !o.regex.empty();
  if (given == 0) return {};
  if (given > 1) return make_error("give at most one of --json-schema, --grammar and --regex");
  Result<grammar::GrammarSpec> spec = make_error("no constraint");
  if (!o.json_schema_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(std::string text, slurp(o.json_schema_file));
    spec = grammar::schema_text_grammar(text);
    if (!spec.ok()) return make_error("'", o.json_schema_file, "': ", spec.message());
  } else if (!o.grammar_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(std::string text, slurp(o.grammar_file));
    spec = grammar::parse_gbnf(text);
  } else {
    spec = grammar::regex_grammar(o.regex);
  }
  if (!spec.ok()) return spec.status();
  SLUICE_ASSIGN_OR_RETURN(g.sampling.grammar,
                          grammar::compile_grammar(*spec, engine.grammar_vocab()));
  return {};
}

GenerationParams generation_params(const RunOptions& o) {
  GenerationParams g;
  g.sampling.temperature = o.temp;
  g.sampling.top_k = o.top_k;
  g.sampling.top_p = o.top_p;
  g.sampling.min_p = o.min_p;
  g.sampling.repetition_penalty = o.repeat_penalty;
  g.sampling.penalty_last_n = o.repeat_last_n;
  g.sampling.presence_penalty = o.presence_penalty;
  g.sampling.frequency_penalty = o.frequency_penalty;
  if (o.seed >= 0) g.sampling.seed = uint64_t(o.seed);
  g.max_tokens = o.n_predict;
  g.stop = o.stop;
  g.ignore_eos = o.ignore_eos;
  return g;
}

Result<std::unique_ptr<EngineSession>> open_session(const RunOptions& o) {
  EngineCliOptions e = o.engine;
  e.max_seqs = 1;  // one conversation: the default KV cache holds one full context
  return open_engine_session(o.model, e);
}

struct Generation {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  double ttft = 0, prefill_s = 0, decode_s = 0, total_s = 0;
};

// Runs one request to completion; `on_text` sees each piece of text as it is produced.
Result<Generation> generate(Engine& engine, std::vector<int32_t> prompt, const GenerationParams& g,
                            const std::function<void(const std::string&)>& on_text) {
  SLUICE_ASSIGN_OR_RETURN(RequestId id, engine.add_request(std::move(prompt), g));
  Generation out;
  while (engine.has_work()) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<EngineEvent> events, engine.step());
    for (const EngineEvent& ev : events) {
      if (ev.id != id) continue;
      out.tokens.insert(out.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      out.text += ev.text;
      if (on_text && !ev.text.empty()) on_text(ev.text);
      if (ev.finished()) out.finish = ev.finish;
    }
    if (out.finish != FinishReason::kNone) break;
  }
  const RequestTimes* t = engine.times(id);
  if (t && t->first_token >= 0) {
    out.ttft = t->first_token - t->arrival;
    out.prefill_s = t->first_token - std::max(t->scheduled, t->arrival);
    out.decode_s = t->tokens.size() > 1 ? t->tokens.back() - t->tokens.front() : 0;
    out.total_s = t->finished - t->arrival;
  }
  return out;
}

void print_timings(size_t n_prompt, const Generation& g) {
  const size_t n_gen = g.tokens.size();
  std::fprintf(stderr, "\n\nprompt: %zu tokens, TTFT %.1f ms, prefill %.1f tok/s\n", n_prompt,
               g.ttft * 1e3, g.prefill_s > 0 ? double(n_prompt) / g.prefill_s : 0.0);
  std::fprintf(stderr, "generated: %zu tokens (%s), decode %.1f tok/s, total %.2f s\n", n_gen,
               finish_reason_name(g.finish), g.decode_s > 0 ? double(n_gen - 1) / g.decode_s : 0.0,
               g.total_s);
}

Status run_once(const RunOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    std::ifstream f(o.prompt_file, std::ios::binary);
    if (!f) return make_error("cannot read prompt file '", o.prompt_file, "'");
    std::stringstream ss;
    ss << f.rdbuf();
    prompt = ss.str();
  }
  SLUICE_ASSIGN_OR_RETURN(auto s, open_session(o));
  EncodeOptions eo;
  if (o.no_bos) eo.add_bos = false;
  SLUICE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, s->tokenizer.encode(prompt, eo));
  const std::vector<int32_t> prompt_ids = ids;
  const bool json = o.output_format == "json";
  auto on_text = [&](const std::string& t) {
    if (json) return;
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  };
  GenerationParams params = generation_params(o);
  SLUICE_RETURN_IF_ERROR(apply_constraint(o, *s->engine, params));
  SLUICE_ASSIGN_OR_RETURN(Generation g, generate(*s->engine, std::move(ids), params, on_text));
  if (json) {
    nlohmann::ordered_json j;
    j["prompt_tokens"] = prompt_ids;
    j["tokens"] = g.tokens;
    j["text"] = g.text;
    j["finish_reason"] = finish_reason_name(g.finish);
    j["timings"] = {
        {"ttft_ms", g.ttft * 1e3},
        {"prefill_tokens_per_s", g.prefill_s > 0 ? double(prompt_ids.size()) / g.prefill_s : 0.0},
        {"decode_tokens_per_s", g.decode_s > 0 ? double(g.tokens.size() - 1) / g.decode_s : 0.0},
        {"total_s", g.total_s}};
    const EngineStats& es = s->engine->stats();
    if (o.engine.spec != "none") {
      j["spec"] = {{"mode", o.engine.spec},
                   {"draft_tokens", es.spec_draft_tokens},
                   {"accepted_tokens", es.spec_accepted_tokens},
                   {"acceptance_rate", es.spec_acceptance_rate()},
                   {"mean_accepted_length", es.spec_mean_accepted_length()}};
    }
    // Replace invalid UTF-8 rather than throwing (the text is complete characters anyway).
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_timings(prompt_ids.size(), g);
    const EngineStats& es = s->engine->stats();
    if (o.engine.spec != "none") {
      std::fprintf(stderr,
                   "speculative (%s): %llu draft tokens, %.1f%% accepted, %.2f tokens per step\n",
                   o.engine.spec.c_str(), (unsigned long long)es.spec_draft_tokens,
                   100 * es.spec_acceptance_rate(), es.spec_mean_accepted_length());
    }
  }
  return {};
}

Status run_chat(const RunOptions& o) {
  SLUICE_ASSIGN_OR_RETURN(auto s, open_session(o));
  const GgufFile& f = s->model.file();
  if (!f.has("tokenizer.chat_template")) {
    return make_error("'", o.model, "' has no tokenizer.chat_template; --chat needs one");
  }
  SLUICE_ASSIGN_OR_RETURN(std::string source, f.get<std::string>("tokenizer.chat_template"));
  SLUICE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  const Vocab& v = s->tokenizer.vocab();
  ChatTemplateInputs in;
  in.bos_token = v.bos() >= 0 ? std::string(s->tokenizer.piece(v.bos(), true)) : "";
  in.eos_token = v.eos() >= 0 ? std::string(s->tokenizer.piece(v.eos(), true)) : "";
  in.add_generation_prompt = true;
  if (!o.prompt.empty()) in.messages.push_back({{"role", "system"}, {"content", o.prompt}});
  GenerationParams g = generation_params(o);
  SLUICE_RETURN_IF_ERROR(apply_constraint(o, *s->engine, g));
  std::string line;
  std::fprintf(stderr, "chat: type a message, an empty line or Ctrl-D ends\n");
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    in.messages.push_back({{"role", "user"}, {"content", line}});
    SLUICE_ASSIGN_OR_RETURN(std::string rendered, tmpl.render(in));
    EncodeOptions eo;
    eo.parse_special = true;
    // The template usually writes BOS itself; add it only when it did not.
    eo.add_bos = in.bos_token.empty() || rendered.rfind(in.bos_token, 0) != 0;
    SLUICE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, s->tokenizer.encode(rendered, eo));
    auto on_text = [](const std::string& t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
    };
    SLUICE_ASSIGN_OR_RETURN(Generation gen, generate(*s->engine, ids, g, on_text));
    std::printf("\n");
    in.messages.push_back({{"role", "assistant"}, {"content", gen.text}});
  }
  return {};
}

}  // namespace

void register_run(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text with a model");
  cmd->add_option("model", o->model, "GGUF file or hf://OWNER/REPO/FILE.gguf")->required();
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "Prompt text (with --chat: system prompt)");
  auto* f = cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  p->excludes(f);
  cmd->add_option("-n,--n-predict", o->n_predict,
                  "Tokens to generate (-1: until end or context full)")
      ->capture_default_str();
  cmd->add_option("--temp", o->temp, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", o->min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed (-1: random)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", o->repeat_last_n, "Window of the repetition penalty")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o->presence_penalty, "Presence penalty")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--no-bos", o->no_bos, "Do not add BOS to the prompt");
  add_engine_options(cmd, o->engine);
  cmd->add_option("--json-schema", o->json_schema_file,
                  "Constrain the output to JSON valid under this JSON Schema file (strict: no "
                  "undeclared keys)");
  cmd->add_option("--grammar", o->grammar_file,
                  "Constrain the output to this GBNF grammar file (llama.cpp syntax)");
  cmd->add_option("--regex", o->regex, "Constrain the output to match this regular expression");
  cmd->add_flag("--chat", o->chat, "Interactive chat with the model's chat template");
  cmd->add_option("--output-format", o->output_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    if (auto code = take_rank("run", o->model, o->engine)) {
      exit_code = *code;
      return;
    }
    if (!o->chat && o->prompt.empty() && o->prompt_file.empty()) {
      exit_code = report_error("run", "give a prompt with -p TEXT or -f FILE (or use --chat)");
      return;
    }
    Status st = o->chat ? run_chat(*o) : run_once(*o);
    if (!st.ok()) exit_code = report_error("run", st.message());
  });
}

}  // namespace sluice::cli
