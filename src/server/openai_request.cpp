#include "server/openai_request.h"

#include "server/openai_structured.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace sluice::server {

using http::ApiError;
using http::bad_request;
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxJsonDepth = 64;
constexpr int kMaxChoices = 128;     // n
constexpr size_t kMaxPrompts = 128;  // prompts in one /v1/completions request
constexpr size_t kMaxStops = 16;
constexpr size_t kMaxLogitBias = 1024;
constexpr int kDefaultCompletionTokens = 16;  // OpenAI's legacy completions default

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

const char* type_name(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    case ojson::value_t::binary:
      return "binary";
    case ojson::value_t::discarded:
      return "discarded";
    default:
      return "a number";
  }
}

// An integer-valued JSON number (5 or 5.0) as int64, if it is one and fits.
std::optional<int64_t> as_integer(const ojson& j) {
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() &&
        j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return j.get<int64_t>();
  }
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return int64_t(d);
  }
  return std::nullopt;
}

// Reads optional fields of one JSON object; remembers the first error and returns nullopt
// from then on, so parsing code reads straight through and checks ok() once.
class Fields {
 public:
  explicit Fields(const ojson& obj) : obj_(obj) {}

  // The value of `key`, or nullptr when absent or null (null means "default" everywhere).
  const ojson* get(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<double> number(const char* key, double lo, double hi, bool lo_open = false) {
    const ojson* v = get(key);
    if (!v || error) return std::nullopt;
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d > hi || d < lo || (lo_open && d == lo)) {
      fail(bad_request(std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") + fmt(lo) +
                           ", " + fmt(hi) + "] (got " + fmt(d) + ")",
                       key));
      return std::nullopt;
    }
    return d;
  }

  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) {
    const ojson* v = get(key);
    if (!v || error) return std::nullopt;
    const std::optional<int64_t> i = v->is_boolean() ? std::nullopt : as_integer(*v);
    if (!i) return wrong_type(key, "an integer", *v);
    if (*i < lo || *i > hi) {
      fail(bad_request(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "] (got " + std::to_string(*i) + ")",
                       key));
      return std::nullopt;
    }
    return i;
  }

  std::optional<bool> boolean(const char* key) {
    const ojson* v = get(key);
    if (!v || error) return std::nullopt;
    if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
    return v->get<bool>();
  }

  std::optional<std::string> string(const char* key) {
    const ojson* v = get(key);
    if (!v || error) return std::nullopt;
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    return v->get<std::string>();
  }

  void fail(ApiError e) {
    if (!error) error = std::move(e);
  }
  bool ok() const { return !error.has_value(); }

  std::optional<ApiError> error;

 private:
  std::nullopt_t wrong_type(const char* key, const char* want, const ojson& got) {
    fail(bad_request(std::string("'") + key + "' must be " + want + " (got " + type_name(got) + ")",
                     key));
    return std::nullopt;
  }

  const ojson& obj_;
};

ApiError context_error(const ModelContext& m, size_t n_prompt, int64_t max_tokens,
                       const char* param) {
  std::string msg = "this model's maximum context length is " + std::to_string(m.n_ctx) +
                    " tokens; the prompt has " + std::to_string(n_prompt) + " tokens";
  if (max_tokens > 0)
    msg += " and " + std::to_string(max_tokens) + " more were requested (max_tokens)";
  return bad_request(msg, param, "context_length_exceeded");
}

// Fields shared by chat and completions: sampling, stop, n, stream. `max_tokens` is read by
// the caller (it depends on the prompt).
void parse_common(Fields& f, CompletionRequest& r, const ModelContext& m) {
  SamplingParams& s = r.params.sampling;
  if (auto v = f.number("temperature", 0, 2)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1, /*lo_open=*/true)) s.top_p = float(*v);
  if (auto v = f.integer("top_k", -1, std::numeric_limits<int32_t>::max())) s.top_k = int32_t(*v);
  if (auto v = f.number("min_p", 0, 1)) s.min_p = float(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) s.presence_penalty = float(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
  if (auto v = f.number("repetition_penalty", 0, 10, /*lo_open=*/true))
    s.repetition_penalty = float(*v);
  if (const ojson* v = f.get("seed"); v && f.ok()) {
    if (v->is_number_unsigned()) {
      s.seed = v->get<uint64_t>();
    } else if (auto i = f.integer("seed", std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max())) {
      s.seed = uint64_t(*i);
    }
  }
  if (auto v = f.integer("n", 1, kMaxChoices)) r.n = int(*v);
  if (auto v = f.boolean("ignore_eos")) r.params.ignore_eos = *v;
  (void)f.string("user");  // accepted for compatibility, not used

  if (const ojson* v = f.get("stop"); v && f.ok()) {
    std::vector<std::string> stops;
    if (v->is_string()) {
      stops.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const ojson& s1 : *v) {
        if (!s1.is_string()) {
          f.fail(bad_request("'stop' must be a string or a list of strings", "stop"));
          break;
        }
        stops.push_back(s1.get<std::string>());
      }
    } else {
      f.fail(bad_request(
          std::string("'stop' must be a string or a list of strings (got ") + type_name(*v) + ")",
          "stop"));
    }
    if (stops.size() > kMaxStops) {
      f.fail(bad_request("'stop' holds at most " + std::to_string(kMaxStops) + " strings", "stop"));
    }
    for (std::string& st : stops) {
      if (!st.empty()) r.params.stop.push_back(std::move(st));
    }
  }

  if (const ojson* v = f.get("logit_bias"); v && f.ok()) {
    if (!v->is_object()) {
      f.fail(
          bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias"));
    } else if (v->size() > kMaxLogitBias) {
      f.fail(bad_request("'logit_bias' holds at most " + std::to_string(kMaxLogitBias) + " entries",
                         "logit_bias"));
    } else {
      for (const auto& [key, bias] : v->items()) {
        int64_t id = -1;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= m.n_vocab) {
          f.fail(bad_request("'logit_bias' key '" + key + "' is not a token id in [0, " +
                                 std::to_string(m.n_vocab) + ")",
                             "logit_bias"));
          break;
        }
        if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 ||
            bias.get<double>() > 100) {
          f.fail(bad_request("'logit_bias' values must be numbers in [-100, 100]", "logit_bias"));
          break;
        }
        s.logit_bias[int32_t(id)] = float(bias.get<double>());
      }
    }
  }

  if (auto v = f.boolean("stream")) r.stream = *v;
  if (const ojson* v = f.get("stream_options"); v && f.ok()) {
    if (!r.stream) {
      f.fail(
          bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options"));
    } else if (!v->is_object()) {
      f.fail(bad_request("'stream_options' must be an object", "stream_options"));
    } else {
      Fields so(*v);
      if (auto u = so.boolean("include_usage")) r.include_usage = *u;
      if (!so.ok()) {
        ApiError e = *so.error;
        e.param = "stream_options." + e.param;
        f.fail(std::move(e));
      }
    }
  }
  // response_format and the other output constraints: parse_structured_output().
}

// max_tokens / max_completion_tokens, checked against each prompt's length. Without one: chat
// generates until the context is full, completions 16 tokens (OpenAI's defaults).
void parse_max_tokens(Fields& f, CompletionRequest& r, const ModelContext& m,
                      const char* prompt_param) {
  const std::optional<int64_t> mt = f.integer("max_tokens", 1, std::numeric_limits<int32_t>::max());
  const std::optional<int64_t> mct =
      f.integer("max_completion_tokens", 1, std::numeric_limits<int32_t>::max());
  if (!f.ok()) return;
  const std::optional<int64_t> max_tokens = mct ? mct : mt;
  for (const std::vector<int32_t>& p : r.prompts) {
    if (int64_t(p.size()) >= m.n_ctx) {
      f.fail(context_error(m, p.size(), 0, prompt_param));
      return;
    }
    if (max_tokens && int64_t(p.size()) + *max_tokens > m.n_ctx) {
      f.fail(context_error(m, p.size(), *max_tokens, mct ? "max_completion_tokens" : "max_tokens"));
      return;
    }
  }
  if (max_tokens) {
    r.params.max_tokens = int32_t(*max_tokens);
  } else {
    r.params.max_tokens = r.kind == ApiKind::kChat ? 0 : kDefaultCompletionTokens;
  }
}

// The model's text tokenization for a completion prompt: special-token text is parsed (as
// llama.cpp and HF tokenizers do) and BOS is added as the vocabulary says.
std::variant<std::vector<int32_t>, ApiError> tokenize_text(const ModelContext& m,
                                                           const std::string& text,
                                                           bool add_special, const char* param) {
  EncodeOptions eo;
  eo.parse_special = true;
  eo.add_special = add_special;
  Result<std::vector<TokenId>> ids = m.tokenizer->encode(text, eo);
  if (!ids.ok())
    return bad_request("cannot tokenize '" + std::string(param) + "': " + ids.message(), param);
  return std::move(*ids);
}

std::optional<ApiError> token_ids(const ojson& arr, const ModelContext& m, const char* param,
                                  std::vector<int32_t>& out) {
  const int32_t n_tokens = m.tokenizer->vocab().n_tokens();
  for (const ojson& t : arr) {
    const std::optional<int64_t> id = t.is_boolean() ? std::nullopt : as_integer(t);
    if (!id || *id < 0 || *id >= n_tokens) {
      return bad_request(std::string("'") + param +
                             "' holds a value that is not a token id in [0, " +
                             std::to_string(n_tokens) + ")",
                         param);
    }
    out.push_back(int32_t(*id));
  }
  return std::nullopt;
}

// messages -> the template's message list: role and text content (parts joined with "\n"),
// plus the tool-related keys templates read.
std::variant<ojson, ApiError> parse_messages(const ojson* msgs) {
  if (!msgs) return bad_request("'messages' is required", "messages");
  if (!msgs->is_array()) return bad_request("'messages' must be an array", "messages");
  if (msgs->empty()) return bad_request("'messages' must not be empty", "messages");
  ojson out = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request(where + " must be an object", "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get<std::string>().empty()) {
      return bad_request(where + ".role must be a non-empty string", "messages");
    }
    ojson msg;
    msg["role"] = role->get<std::string>();
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (role->get<std::string>() != "assistant") {
        return bad_request(where + ".content is required", "messages");
      }
      msg["content"] = nullptr;
    } else if (content->is_string()) {
      msg["content"] = content->get<std::string>();
    } else if (content->is_array()) {
      std::string text;
      for (size_t k = 0; k < content->size(); ++k) {
        const ojson& part = (*content)[k];
        auto type = part.is_object() ? part.find("type") : part.end();
        auto t = part.is_object() ? part.find("text") : part.end();
        if (type == part.end() || !type->is_string() || type->get<std::string>() != "text" ||
            t == part.end() || !t->is_string()) {
          return bad_request(where + ".content[" + std::to_string(k) +
                                 "]: only {\"type\": \"text\", \"text\": ...} parts are supported",
                             "messages");
        }
        if (k > 0) text += "\n";
        text += t->get<std::string>();
      }
      msg["content"] = std::move(text);
    } else {
      return bad_request(where + ".content must be a string or a list of text parts", "messages");
    }
    for (const char* key : {"name", "tool_calls", "tool_call_id", "reasoning_content"}) {
      if (auto it = m.find(key); it != m.end() && !it->is_null()) msg[key] = ojson(*it);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// Renders the chat template and tokenizes the result; BOS is added only when the vocabulary
// wants one and the template did not write it. `extra`: more template variables.
struct RenderedChat {
  std::vector<int32_t> tokens;
  bool opens_reasoning = false;  // the prompt ends inside the model's reasoning
};
std::variant<RenderedChat, ApiError> render_chat(const ModelContext& m, const ojson& messages,
                                                 const ojson* tools, bool add_generation_prompt,
                                                 const ojson& extra = ojson::object()) {
  if (!m.chat_template) {
    return bad_request(
        "the model has no chat template; start the server with --chat-template FILE "
        "or use /v1/completions",
        "messages", "no_chat_template");
  }
  ChatTemplateInputs in;
  in.messages = messages_for_template(m.tool_format, messages);
  if (tools && tools->is_array()) in.tools = ojson(*tools);
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = m.bos_text;
  in.eos_token = m.eos_text;
  in.extra_context = extra;
  Result<std::string> rendered = m.chat_template->render(in);
  if (!rendered.ok()) {
    return bad_request("the chat template failed on these messages: " + rendered.message(),
                       "messages");
  }
  EncodeOptions eo;
  eo.parse_special = true;
  eo.add_bos =
      m.tokenizer->vocab().add_bos() && (m.bos_text.empty() || rendered->rfind(m.bos_text, 0) != 0);
  Result<std::vector<TokenId>> ids = m.tokenizer->encode(*rendered, eo);
  if (!ids.ok())
    return bad_request("cannot tokenize the rendered chat: " + ids.message(), "messages");
  RenderedChat out;
  out.tokens = std::move(*ids);
  out.opens_reasoning =
      add_generation_prompt && prompt_opens_reasoning(m.reasoning_format, *rendered);
  return out;
}

// chat_template_kwargs (an object of template variables) and reasoning_effort.
std::variant<ojson, ApiError> template_variables(Fields& f) {
  ojson extra = ojson::object();
  if (const ojson* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object())
      return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (auto it = kw->begin(); it != kw->end(); ++it) extra[it.key()] = ojson(it.value());
  }
  if (auto effort = f.string("reasoning_effort")) {
    if (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "minimal")
      return bad_request("'reasoning_effort' must be 'minimal', 'low', 'medium' or 'high'",
                         "reasoning_effort");
    extra["reasoning_effort"] = *effort;
  }
  if (!f.ok()) return *f.error;
  return extra;
}

ParseResult finish(Fields& f, CompletionRequest& r, const ModelContext& m) {
  if (f.ok()) {
    if (Status st = r.params.sampling.validate(m.n_vocab); !st.ok())
      f.fail(bad_request(st.message()));
  }
  if (!f.ok()) return *f.error;
  return std::move(r);
}

}  // namespace

GenerationParams CompletionRequest::params_for(int index) const {
  GenerationParams p = params;
  p.sampling.n_logprobs = n_logprobs;
  if (p.sampling.seed) p.sampling.seed = *p.sampling.seed + uint64_t(index);
  return p;
}

template <class J>
std::variant<J, ApiError> parse_json_body(const std::string& body) {
  struct TooDeep {};
  try {
    J j = J::parse(body, [](int depth, typename J::parse_event_t, J&) {
      if (depth > kMaxJsonDepth) throw TooDeep{};
      return true;
    });
    if (!j.is_object()) return bad_request("the request body must be a JSON object");
    return j;
  } catch (const TooDeep&) {
    return bad_request("the request JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels");
  } catch (const ojson::exception& e) {
    return bad_request(std::string("the request body is not valid JSON: ") + e.what());
  }
}
template std::variant<nlohmann::json, ApiError> parse_json_body<nlohmann::json>(const std::string&);
template std::variant<ojson, ApiError> parse_json_body<ojson>(const std::string&);

template <class J>
std::optional<ApiError> check_model(const J& body, const ModelContext& model) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return bad_request("'model' must be a string", "model");
  const std::string& given = it->template get_ref<const std::string&>();
  if (given == model.name) return std::nullopt;
  for (const std::string& a : model.aliases)
    if (given == a) return std::nullopt;
  std::string served = "'" + model.name + "'";
  for (const std::string& a : model.aliases)
    if (a != model.name) served += ", '" + a + "'";
  ApiError e;
  e.status = 404;
  e.message = "the model '" + given + "' does not exist; this server serves " + served;
  e.param = "model";
  e.code = "model_not_found";
  return e;
}
template std::optional<ApiError> check_model(const nlohmann::json&, const ModelContext&);
template std::optional<ApiError> check_model(const ojson&, const ModelContext&);

ParseResult parse_chat_request(const ojson& body, const ModelContext& m) {
  CompletionRequest r;
  r.kind = ApiKind::kChat;
  Fields f(body);
  parse_common(f, r, m);
  // Chat logprobs: logprobs (bool) + top_logprobs (0..20).
  const std::optional<bool> lp = f.boolean("logprobs");
  const std::optional<int64_t> top = f.integer("top_logprobs", 0, kMaxLogprobs);
  if (top && !lp.value_or(false)) {
    f.fail(bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs"));
  }
  if (lp.value_or(false)) r.n_logprobs = int(top.value_or(0));
  if (!f.ok()) return *f.error;

  auto messages = parse_messages(f.get("messages"));
  if (auto* e = std::get_if<ApiError>(&messages)) return *e;
  bool add_generation_prompt = true;
  if (auto v = f.boolean("add_generation_prompt")) add_generation_prompt = *v;
  auto extra = template_variables(f);
  if (auto* e = std::get_if<ApiError>(&extra)) return *e;
  int32_t budget = m.reasoning_budget;
  if (auto b = f.integer("reasoning_budget", -1, std::numeric_limits<int32_t>::max()))
    budget = int32_t(*b);
  if (!f.ok()) return *f.error;
  if (m.reasoning_format != ReasoningFormat::kNone) {
    r.reasoning = m.reasoning_format;
    r.params.render_special = true;  // the markers may be special tokens
  }
  auto render = [&](const ojson& tools) -> std::variant<bool, ApiError> {
    auto rendered = render_chat(m, std::get<ojson>(messages), tools.is_null() ? nullptr : &tools,
                                add_generation_prompt, std::get<ojson>(extra));
    if (auto* e = std::get_if<ApiError>(&rendered)) return *e;
    RenderedChat& chat = std::get<RenderedChat>(rendered);
    r.prompts.push_back(std::move(chat.tokens));
    return chat.opens_reasoning;
  };
  auto tools = parse_structured_output(body, m, /*chat=*/true, r, render);
  if (auto* e = std::get_if<ApiError>(&tools)) return *e;
  if (r.reasoning != ReasoningFormat::kNone && budget >= 0) {
    ReasoningBudgetParams& b = r.params.reasoning;
    b.budget = budget;
    b.starts_open = r.reasoning_open;
    b.close_tokens = m.reasoning_close_tokens;
    if (r.reasoning == ReasoningFormat::kThink) {
      b.open_marker = std::string(kThinkOpen);
      b.close_marker = std::string(kThinkClose);
    } else {
      b.open_marker = std::string(kHarmonyAnalysis);
      b.close_marker = std::string(kHarmonyEnd);
    }
  }
  parse_max_tokens(f, r, m, "messages");
  return finish(f, r, m);
}

ParseResult parse_completion_request(const ojson& body, const ModelContext& m) {
  CompletionRequest r;
  r.kind = ApiKind::kCompletion;
  Fields f(body);
  parse_common(f, r, m);
  if (const ojson* v = f.get("logprobs"); v && f.ok()) {
    if (auto k = f.integer("logprobs", 0, kMaxLogprobs)) r.n_logprobs = int(*k);
  }
  if (auto echo = f.boolean("echo"); echo && *echo) {
    f.fail(bad_request("'echo' is not supported", "echo"));
  }
  if (auto suffix = f.string("suffix"); suffix && !suffix->empty()) {
    f.fail(bad_request("'suffix' is not supported", "suffix"));
  }
  if (auto best_of = f.integer("best_of", 1, kMaxChoices); best_of && *best_of != r.n) {
    f.fail(bad_request("'best_of' other than n is not supported", "best_of"));
  }
  if (!f.ok()) return *f.error;
  if (auto structured = parse_structured_output(body, m, /*chat=*/false, r);
      auto* e = std::get_if<ApiError>(&structured)) {
    return *e;
  }

  const ojson* p = f.get("prompt");
  if (!p) return bad_request("'prompt' is required", "prompt");
  auto add_text = [&](const std::string& text) -> std::optional<ApiError> {
    auto ids = tokenize_text(m, text, /*add_special=*/true, "prompt");
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    r.prompts.push_back(std::move(std::get<std::vector<int32_t>>(ids)));
    return std::nullopt;
  };
  const ApiError shape = bad_request(
      "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id "
      "lists",
      "prompt");
  if (p->is_string()) {
    if (auto e = add_text(p->get<std::string>())) return *e;
  } else if (p->is_array()) {
    if (p->empty()) return bad_request("'prompt' must not be empty", "prompt");
    if (p->size() > kMaxPrompts && !(*p)[0].is_number()) {
      return bad_request("'prompt' holds at most " + std::to_string(kMaxPrompts) + " prompts",
                         "prompt");
    }
    const ojson& first = (*p)[0];
    if (first.is_string()) {
      for (const ojson& s : *p) {
        if (!s.is_string()) return shape;
        if (auto e = add_text(s.get<std::string>())) return *e;
      }
    } else if (first.is_number()) {
      r.prompts.emplace_back();
      if (auto e = token_ids(*p, m, "prompt", r.prompts.back())) return *e;
    } else if (first.is_array()) {
      for (const ojson& ids : *p) {
        if (!ids.is_array()) return shape;
        if (ids.empty()) return bad_request("'prompt' holds an empty token list", "prompt");
        r.prompts.emplace_back();
        if (auto e = token_ids(ids, m, "prompt", r.prompts.back())) return *e;
      }
    } else {
      return shape;
    }
  } else {
    return shape;
  }
  if (r.prompts.size() * size_t(r.n) > size_t(kMaxChoices) * 2) {
    return bad_request("len(prompt) * n must be at most " + std::to_string(kMaxChoices * 2), "n");
  }
  parse_max_tokens(f, r, m, "prompt");
  return finish(f, r, m);
}

std::variant<TokenizeResult, ApiError> parse_tokenize_request(const ojson& body,
                                                              const ModelContext& m) {
  Fields f(body);
  TokenizeResult out;
  bool add_special = true;
  if (auto v = f.boolean("add_special_tokens")) add_special = *v;  // vLLM
  if (auto v = f.boolean("add_special")) add_special = *v;         // llama.cpp
  if (auto v = f.boolean("with_pieces")) out.with_pieces = *v;
  bool add_generation_prompt = true;
  if (auto v = f.boolean("add_generation_prompt")) add_generation_prompt = *v;
  if (!f.ok()) return *f.error;
  if (const ojson* msgs = f.get("messages")) {
    auto messages = parse_messages(msgs);
    if (auto* e = std::get_if<ApiError>(&messages)) return *e;
    auto extra = template_variables(f);
    if (auto* e = std::get_if<ApiError>(&extra)) return *e;
    auto ids = render_chat(m, std::get<ojson>(messages), f.get("tools"), add_generation_prompt,
                           std::get<ojson>(extra));
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    out.tokens = std::move(std::get<RenderedChat>(ids).tokens);
  } else {
    const char* key = f.get("prompt") ? "prompt" : "content";
    const std::optional<std::string> text = f.string(key);
    if (!f.ok()) return *f.error;
    if (!text) return bad_request("give 'prompt' (or 'content') text or 'messages'", "prompt");
    auto ids = tokenize_text(m, *text, add_special, key);
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    out.tokens = std::move(std::get<std::vector<int32_t>>(ids));
  }
  if (out.with_pieces) {
    for (int32_t id : out.tokens)
      out.pieces.emplace_back(m.tokenizer->piece(id, /*render_special=*/true));
  }
  return out;
}

std::variant<std::string, ApiError> parse_detokenize_request(const ojson& body,
                                                             const ModelContext& m) {
  Fields f(body);
  const ojson* t = f.get("tokens");
  if (!t) return bad_request("'tokens' is required", "tokens");
  if (!t->is_array()) return bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  if (auto e = token_ids(*t, m, "tokens", ids)) return *e;
  return m.tokenizer->decode(ids);
}

}  // namespace sluice::server
