#include "server/openai_structured.h"

#include <algorithm>

#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using grammar::Expr;
using grammar::GrammarSpec;

void rename_refs(Expr& e, const std::string& prefix) {
  if (e.kind == Expr::Kind::kRef) e.text = prefix + e.text;
  for (Expr& k : e.kids) rename_refs(k, prefix);
}

// Appends the rules of `from` to `into` under `prefix` (names stay unique); the root's new name.
std::string merge_rules(GrammarSpec& into, GrammarSpec from, const std::string& prefix) {
  for (auto& [name, e] : from.rules) {
    rename_refs(e, prefix);
    into.rules.emplace_back(prefix + name, std::move(e));
  }
  return prefix + from.root;
}

// Any bytes without `marker`, then `marker`: the states of a substring matcher (KMP) as rules.
// Rule i holds after a text whose longest suffix that is a prefix of `marker` has length i.
void text_then_marker(GrammarSpec& g, const std::string& name, const std::string& marker) {
  const size_t n = marker.size();
  std::vector<size_t> fail(n + 1, 0);  // longest proper border of marker[0, i)
  for (size_t i = 1, k = 0; i < n; ++i) {
    while (k > 0 && marker[i] != marker[k]) k = fail[k];
    if (marker[i] == marker[k]) ++k;
    fail[i + 1] = k;
  }
  auto next = [&](size_t state, uint8_t b) {
    while (state > 0 && uint8_t(marker[state]) != b) state = fail[state];
    return uint8_t(marker[state]) == b ? state + 1 : 0;
  };
  for (size_t i = 0; i < n; ++i) {
    std::vector<Expr> alts;
    alts.push_back(Expr::lit(marker.substr(i)));  // the rest of the marker ends the text here
    for (size_t j = 0; j < n; ++j) {  // j == n (the whole marker inside the text) is left out
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      for (uint32_t b = 0; b < 256; ++b) {
        if (next(i, uint8_t(b)) != j) continue;
        if (!ranges.empty() && ranges.back().second + 1 == b)
          ranges.back().second = b;
        else
          ranges.emplace_back(b, b);
      }
      if (!ranges.empty())
        alts.push_back(Expr::seq(
            {Expr::byte_cls(std::move(ranges)), Expr::ref(name + "-" + std::to_string(j))}));
    }
    g.rules.emplace_back(name + "-" + std::to_string(i), Expr::alt(std::move(alts)));
  }
}

// Whether a parameter's schema takes a string (Qwen's XML calls write strings raw).
bool schema_is_string(const ojson& schema) {
  if (!schema.is_object()) return false;
  if (auto t = schema.find("type"); t != schema.end()) return t->is_string() && *t == "string";
  for (const char* key : {"enum", "const"}) {
    auto v = schema.find(key);
    if (v == schema.end()) continue;
    if (v->is_string()) return true;
    return v->is_array() && !v->empty() &&
           std::all_of(v->begin(), v->end(), [](const ojson& x) { return x.is_string(); });
  }
  return false;
}

bool valid_tool_name(const std::string& n) {
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// A constraint named by the request: the cache key and how to build its grammar.
struct Constraint {
  std::string field;  // for errors: the request field that asked for it
  std::string key;
  std::function<Result<GrammarSpec>()> make;
  bool has_reasoning = false;    // the grammar already lets the reasoning through (Harmony calls)
  std::vector<Tool> tools = {};  // forced tool calls: the tools they may call
};

// `strict` (OpenAI's json_schema.strict): a format sluice does not enforce is refused instead
// of ignored.
std::optional<ApiError> schema_constraint(const ojson& schema, const std::string& field,
                                          Constraint& c, bool strict = false) {
  if (!schema.is_object() && !schema.is_boolean())
    return bad_request("'" + field + "' must be a JSON schema (an object or a boolean)", field);
  c.field = field;
  c.key = std::string(strict ? "json_schema:strict:" : "json_schema:") + schema.dump();
  c.make = [schema, strict] { return grammar::schema_grammar(schema, strict); };
  return std::nullopt;
}

// The constraint fields of `body` (at most one), or nullopt. `body` keeps the schemas' key order.
std::variant<std::optional<Constraint>, ApiError> read_constraint(const ojson& body) {
  std::vector<Constraint> found;
  auto get = [&](const char* key) -> const ojson* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const ojson* rf = get("response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      return bad_request("'response_format' must be an object with a string 'type'",
                         "response_format");
    const std::string type = (*rf)["type"];
    if (type == "json_object") {
      Constraint c;
      if (auto s = rf->find("schema"); s != rf->end() && !s->is_null()) {  // llama.cpp's extension
        if (auto e = schema_constraint(*s, "response_format", c)) return *e;
      } else {
        c.field = "response_format";
        c.key = "json_object";
        c.make = [] {
          return Result<GrammarSpec>(
              grammar::json_object_grammar(grammar::generation_schema_options()));
        };
      }
      found.push_back(std::move(c));
    } else if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        return bad_request(
            "response_format 'json_schema' needs a 'json_schema' object with a 'schema'",
            "response_format");
      auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null())
        return bad_request("response_format.json_schema.schema is required", "response_format");
      if (auto n = js->find("name"); n != js->end() && !n->is_string())
        return bad_request("response_format.json_schema.name must be a string", "response_format");
      auto st = js->find("strict");
      if (st != js->end() && !st->is_null() && !st->is_boolean())
        return bad_request("response_format.json_schema.strict must be a boolean",
                           "response_format");
      const bool strict = st != js->end() && st->is_boolean() && st->get<bool>();
      Constraint c;
      if (auto e = schema_constraint(*schema, "response_format", c, strict)) return *e;
      found.push_back(std::move(c));
    } else if (type != "text") {
      return bad_request(
          "response_format type must be 'text', 'json_object' or 'json_schema' (got '" + type +
              "')",
          "response_format");
    }
  }
  for (const char* key : {"json_schema", "guided_json"}) {
    if (const ojson* s = get(key)) {
      Constraint c;
      // vLLM accepts guided_json as a JSON string too.
      ojson schema = *s;
      if (s->is_string()) {
        schema = ojson::parse(s->get<std::string>(), nullptr, false);
        if (schema.is_discarded())
          return bad_request(std::string("'") + key + "' is not valid JSON", key);
      }
      if (auto e = schema_constraint(schema, key, c)) return *e;
      found.push_back(std::move(c));
    }
  }
  for (const char* key : {"grammar", "guided_grammar"}) {
    if (const ojson* g = get(key)) {
      if (!g->is_string())
        return bad_request(std::string("'") + key + "' must be a GBNF grammar string", key);
      std::string src = *g;
      found.push_back({key, "gbnf:" + src, [src] { return grammar::parse_gbnf(src); }});
    }
  }
  if (const ojson* r = get("guided_regex")) {
    if (!r->is_string()) return bad_request("'guided_regex' must be a string", "guided_regex");
    std::string pattern = *r;
    found.push_back({"guided_regex", "regex:" + pattern,
                     [pattern] { return grammar::regex_grammar(pattern); }});
  }
  if (const ojson* ch = get("guided_choice")) {
    if (!ch->is_array() || ch->empty() ||
        !std::all_of(ch->begin(), ch->end(), [](const ojson& x) { return x.is_string(); }))
      return bad_request("'guided_choice' must be a non-empty list of strings", "guided_choice");
    std::vector<std::string> choices = *ch;
    found.push_back({"guided_choice", "choice:" + ch->dump(), [choices] {
                       std::vector<Expr> alts;
                       for (const std::string& s : choices) alts.push_back(Expr::lit(s));
                       return Result<GrammarSpec>(grammar::one_rule(Expr::alt(std::move(alts))));
                     }});
  }
  if (found.size() > 1)
    return bad_request("give at most one output constraint ('" + found[0].field + "' and '" +
                           found[1].field + "' were both given)",
                       found[1].field);
  if (found.empty()) return std::optional<Constraint>();
  return std::optional<Constraint>(std::move(found[0]));
}

struct ToolRequest {
  std::vector<Tool> tools;
  json for_template;            // the tools as the chat template sees them
  std::string choice = "auto";  // none | auto | required | named
  std::string named;
  bool parallel = true;
};

std::variant<ToolRequest, ApiError> read_tools(const ojson& body) {
  ToolRequest t;
  auto tools = body.find("tools");
  if (tools == body.end() || tools->is_null()) {
    if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null() &&
                                           !(c->is_string() && *c == "none") &&
                                           !(c->is_string() && *c == "auto"))
      return bad_request("'tool_choice' needs 'tools'", "tool_choice");
    t.choice = "none";
    return t;
  }
  if (!tools->is_array()) return bad_request("'tools' must be a list", "tools");
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& item = (*tools)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!item.is_object() || item.value("type", "") != "function" || !item.contains("function") ||
        !item["function"].is_object())
      return bad_request(where + " must be {\"type\": \"function\", \"function\": {...}}", "tools");
    const ojson& fn = item["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || !valid_tool_name(fn["name"]))
      return bad_request(where + ".function.name must be 1-64 letters, digits, '_' or '-'",
                         "tools");
    Tool tool;
    tool.name = fn["name"];
    for (const Tool& other : t.tools)
      if (other.name == tool.name)
        return bad_request("two tools are named '" + tool.name + "'", "tools");
    if (auto p = fn.find("parameters"); p != fn.end() && !p->is_null()) {
      if (!p->is_object())
        return bad_request(where + ".function.parameters must be a JSON schema object", "tools");
      tool.parameters = *p;
    } else {
      tool.parameters = ojson{{"type", "object"}, {"properties", ojson::object()}};
    }
    t.tools.push_back(std::move(tool));
  }
  t.for_template = json(*tools);
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (c->is_string()) {
      t.choice = *c;
      if (t.choice != "none" && t.choice != "auto" && t.choice != "required")
        return bad_request("'tool_choice' must be 'none', 'auto', 'required' or a named function",
                           "tool_choice");
    } else if (c->is_object() && c->value("type", "") == "function" && c->contains("function") &&
               (*c)["function"].is_object() && (*c)["function"].contains("name") &&
               (*c)["function"]["name"].is_string()) {
      t.choice = "named";
      t.named = (*c)["function"]["name"];
      if (std::none_of(t.tools.begin(), t.tools.end(),
                       [&](const Tool& x) { return x.name == t.named; }))
        return bad_request("tool_choice names '" + t.named + "', which is not among the tools",
                           "tool_choice");
    } else {
      return bad_request(
          "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}",
          "tool_choice");
    }
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean())
      return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    t.parallel = *p;
  }
  if (t.tools.empty() && t.choice != "none" && t.choice != "auto")
    return bad_request("tool_choice '" + t.choice + "' needs at least one tool", "tool_choice");
  return t;
}

}  // namespace

// Qwen's XML calls (xml_tool_calls.h): each tool's parameters in its schema's order, the
// required ones always; a string parameter is any text up to its </parameter> (an enum: one of
// its strings; with maxLength: at most that many characters other than '<'), any other the JSON
// its schema allows.
Result<GrammarSpec> xml_tool_call_grammar(const ToolCallSyntax& syntax,
                                          const std::vector<Tool>& tools, bool parallel) {
  GrammarSpec out;
  std::vector<Expr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& schema = tools[i].parameters;
    const std::string tp = "t" + std::to_string(i) + "-";
    std::vector<Expr> seq{Expr::lit("<function=" + tools[i].name + ">\n")};
    const ojson* props = schema.contains("properties") && schema["properties"].is_object()
                             ? &schema["properties"]
                             : nullptr;
    std::vector<std::string> required;
    if (auto r = schema.find("required"); r != schema.end() && r->is_array())
      for (const ojson& n : *r)
        if (n.is_string()) required.push_back(n.get<std::string>());
    size_t k = 0;
    for (auto it = props ? props->begin() : ojson::const_iterator(); props && it != props->end();
         ++it, ++k) {
      const std::string pp = tp + "p" + std::to_string(k);
      Expr value;
      if (schema_is_string(it.value())) {
        auto e = it.value().find("enum");
        if (e != it.value().end() && e->is_array()) {
          std::vector<Expr> options;
          for (const ojson& v : *e) options.push_back(Expr::lit(v.get<std::string>()));
          value = Expr::seq({Expr::alt(std::move(options)), Expr::lit("\n</parameter>")});
        } else if (auto m = it.value().find("maxLength");
                   m != it.value().end() && m->is_number_unsigned()) {
          // Bounded: at most maxLength characters, none of them '<' (so none can end it early).
          const int32_t n = int32_t(std::min<uint64_t>(m->get<uint64_t>(), 10000));
          value = Expr::seq({Expr::repeat(Expr::cls({{'<', '<'}}, /*negated=*/true), 0, n),
                             Expr::lit("\n</parameter>")});
        } else {
          text_then_marker(out, pp, "\n</parameter>");
          value = Expr::ref(pp + "-0");
        }
      } else {
        Result<GrammarSpec> g = grammar::schema_grammar(it.value());
        if (!g.ok())
          return make_error("tool '", tools[i].name, "': parameter '", it.key(),
                            "': ", g.message());
        value = Expr::seq(
            {Expr::ref(merge_rules(out, std::move(*g), pp + "-")), Expr::lit("\n</parameter>")});
      }
      Expr param = Expr::seq(
          {Expr::lit("<parameter=" + it.key() + ">\n"), std::move(value), Expr::lit("\n")});
      const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
      seq.push_back(req ? std::move(param) : Expr::opt(std::move(param)));
    }
    seq.push_back(Expr::lit("</function>"));
    calls.push_back(Expr::seq(std::move(seq)));
  }
  out.rules.emplace_back("call",
                         calls.size() == 1 ? std::move(calls[0]) : Expr::alt(std::move(calls)));
  auto block =
      Expr::seq({Expr::lit(syntax.call_open), Expr::ref("call"), Expr::lit(syntax.call_close)});
  std::vector<Expr> root{block};
  if (parallel) root.push_back(Expr::star(Expr::seq({Expr::lit(syntax.separator), block})));
  out.rules.emplace_back("root", Expr::seq(std::move(root)));
  return out;
}

namespace {

// tool_choice "required" or a named function: the tools the calls may use, and the cache key of
// their grammar in `family` ("hermes:parallel", "harmony", ...); the caller sets make.
Constraint forced_tools(const ToolRequest& t, const std::string& family) {
  Constraint c;
  c.field = "tools";
  for (const Tool& tool : t.tools)
    if (t.choice != "named" || tool.name == t.named) c.tools.push_back(tool);
  json key_tools = json::array();
  for (const Tool& tool : c.tools) key_tools.push_back({tool.name, json(tool.parameters)});
  c.key = "tools:" + family + ":" + key_tools.dump();
  return c;
}

ApiError forced_and_constrained(const ToolRequest& t, const Constraint& c) {
  return bad_request("tool_choice '" + t.choice + "' and '" + c.field + "' cannot be combined",
                     c.field);
}

}  // namespace

Result<GrammarSpec> harmony_tool_call_grammar(const std::vector<Tool>& tools) {
  if (tools.empty()) return make_error("no tools to call");
  GrammarSpec out;
  std::vector<Expr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    Result<GrammarSpec> args = grammar::schema_grammar(tools[i].parameters);
    if (!args.ok()) return make_error("tool '", tools[i].name, "': parameters: ", args.message());
    const std::string root = merge_rules(out, std::move(*args), "t" + std::to_string(i) + "-");
    calls.push_back(
        Expr::seq({Expr::lit(tools[i].name + " <|constrain|>json<|message|>"), Expr::ref(root)}));
  }
  text_then_marker(out, "analysis", std::string(kHarmonyEnd));
  Expr analysis = Expr::opt(Expr::seq({Expr::lit(std::string(kHarmonyAnalysis)),
                                       Expr::ref("analysis-0"), Expr::lit("<|start|>assistant")}));
  out.rules.emplace_back(
      "root", Expr::seq({std::move(analysis), Expr::lit("<|channel|>commentary to=functions."),
                         calls.size() == 1 ? std::move(calls[0]) : Expr::alt(std::move(calls))}));
  return out;
}

Result<GrammarSpec> tool_call_grammar(const ToolCallSyntax& syntax, const std::vector<Tool>& tools,
                                      bool parallel) {
  if (tools.empty()) return make_error("no tools to call");
  if (syntax.format == ToolCallFormat::kQwenXml)
    return xml_tool_call_grammar(syntax, tools, parallel);
  GrammarSpec out;
  out.rules.emplace_back("ws", Expr::opt(Expr::lit(" ")));
  std::vector<Expr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    Result<GrammarSpec> args = grammar::schema_grammar(tools[i].parameters);
    if (!args.ok()) return make_error("tool '", tools[i].name, "': parameters: ", args.message());
    const std::string root = merge_rules(out, std::move(*args), "t" + std::to_string(i) + "-");
    auto ws = Expr::ref("ws");
    calls.push_back(Expr::seq({Expr::lit("{"), ws, Expr::lit(json(syntax.name_key).dump()), ws,
                               Expr::lit(":"), ws, Expr::lit(json(tools[i].name).dump()), ws,
                               Expr::lit(","), ws, Expr::lit(json(syntax.args_key).dump()), ws,
                               Expr::lit(":"), ws, Expr::ref(root), ws, Expr::lit("}")}));
  }
  out.rules.emplace_back("call",
                         calls.size() == 1 ? std::move(calls[0]) : Expr::alt(std::move(calls)));
  auto block =
      Expr::seq({Expr::lit(syntax.call_open), Expr::ref("call"), Expr::lit(syntax.call_close)});
  std::vector<Expr> root{Expr::lit(syntax.prefix), block};
  if (parallel && syntax.parallel)
    root.push_back(Expr::star(Expr::seq({Expr::lit(syntax.separator), block})));
  root.push_back(Expr::lit(syntax.suffix));
  out.rules.emplace_back("root", Expr::seq(std::move(root)));
  return out;
}

GrammarSpec reasoning_grammar(GrammarSpec answer, ReasoningFormat format, bool opens) {
  if (format == ReasoningFormat::kNone) return answer;
  GrammarSpec out;
  const std::string root = merge_rules(out, std::move(answer), "answer-");
  if (format == ReasoningFormat::kThink) {
    text_then_marker(out, "think", std::string(kThinkClose));
    const Expr ws = Expr::repeat(Expr::cls({{' ', ' '}, {'\n', '\n'}}), 0, 4);
    Expr block = Expr::seq({Expr::ref("think-0"), ws});
    if (!opens) block = Expr::opt(Expr::seq({ws, Expr::lit(std::string(kThinkOpen)), block}));
    out.rules.emplace_back("root", Expr::seq({std::move(block), Expr::ref(root)}));
  } else {
    text_then_marker(out, "analysis", std::string(kHarmonyEnd));
    Expr analysis =
        Expr::opt(Expr::seq({Expr::lit(std::string(kHarmonyAnalysis)), Expr::ref("analysis-0"),
                             Expr::lit("<|start|>assistant")}));
    out.rules.emplace_back("root",
                           Expr::seq({std::move(analysis), Expr::lit("<|channel|>final<|message|>"),
                                      Expr::ref(root)}));
  }
  out.root = "root";
  return out;
}

std::variant<json, ApiError> parse_structured_output(const ojson& ordered, const ModelContext& m,
                                                     bool chat, CompletionRequest& r,
                                                     const PromptRenderer& render) {
  auto constraint = read_constraint(ordered);
  if (auto* e = std::get_if<ApiError>(&constraint)) return *e;
  std::optional<Constraint> c = std::move(std::get<std::optional<Constraint>>(constraint));

  json tools_for_template;
  if (chat) {
    auto tr = read_tools(ordered);
    if (auto* e = std::get_if<ApiError>(&tr)) return *e;
    ToolRequest& t = std::get<ToolRequest>(tr);
    if (!t.tools.empty()) tools_for_template = t.for_template;
    if (!t.tools.empty() && t.choice != "none") {
      const bool forced = t.choice == "required" || t.choice == "named";
      if (m.reasoning_format == ReasoningFormat::kHarmony) {
        // gpt-oss: calls are Harmony messages to=functions.NAME, parsed by the MessageParser.
        r.params.render_special = true;
        if (forced) {
          if (c) return forced_and_constrained(t, *c);
          Constraint tc = forced_tools(t, "harmony");
          tc.make = [allowed = tc.tools] { return harmony_tool_call_grammar(allowed); };
          tc.has_reasoning = true;
          c = std::move(tc);
        }
      } else if (m.tool_format == ToolCallFormat::kNone) {
        if (forced)
          return bad_request(
              "this model's chat template has no tool-call format sluice knows (Llama 3.x JSON, "
              "Hermes/Qwen <tool_call>, Mistral [TOOL_CALLS]); tool_choice '" +
                  t.choice + "' cannot be honoured",
              "tool_choice");
      } else {
        r.tool_format = m.tool_format;
        r.params.render_special = true;  // the family's markers may be special tokens
        if (m.tool_format == ToolCallFormat::kQwenXml) {
          auto types = std::make_shared<ToolParamTypes>();
          for (const Tool& tool : t.tools) {
            auto& params = types->tools[tool.name];
            if (auto p = tool.parameters.find("properties");
                p != tool.parameters.end() && p->is_object())
              for (auto it = p->begin(); it != p->end(); ++it)
                params[it.key()] = schema_is_string(it.value());
          }
          r.tool_types = std::move(types);
        }
        if (forced) {
          if (c) return forced_and_constrained(t, *c);
          Constraint tc = forced_tools(t, std::string(tool_call_format_name(m.tool_format)) +
                                              (t.parallel ? ":parallel" : ":one"));
          tc.make = [syntax = tool_call_syntax(m.tool_format), allowed = tc.tools,
                     parallel = t.parallel] {
            return tool_call_grammar(syntax, allowed, parallel);
          };
          c = std::move(tc);
        }
      }
    }
  }
  if (render) {
    auto opens = render(tools_for_template);
    if (auto* e = std::get_if<ApiError>(&opens)) return *e;
    r.reasoning_open = std::get<bool>(opens);
  }
  if (c && r.reasoning != ReasoningFormat::kNone && !c->has_reasoning) {
    c->key = std::string("reasoning:") + std::string(reasoning_format_name(r.reasoning)) +
             (r.reasoning_open ? ":open:" : ":closed:") + c->key;
    c->make = [make = std::move(c->make), format = r.reasoning,
               opens = r.reasoning_open]() -> Result<GrammarSpec> {
      SLUICE_ASSIGN_OR_RETURN(GrammarSpec answer, make());
      return reasoning_grammar(std::move(answer), format, opens);
    };
  }
  if (c) {
    const auto& cache = r.params.render_special ? m.special_grammars : m.grammars;
    if (!cache) return bad_request("structured output is not available on this server", c->field);
    auto cg = cache->get(c->key, c->make);
    if (!cg.ok()) return bad_request("'" + c->field + "': " + cg.message(), c->field);
    r.params.sampling.grammar = *cg;
  }
  return tools_for_template;
}

}  // namespace sluice::server
