// Structured output and tools in OpenAI requests: the fields that constrain what a model may
// write, compiled into the request's grammar (SamplingParams::grammar), and the tools that
// make the server parse tool calls out of its text.
//
//   response_format {"type": "json_object"} | {"type": "json_schema", "json_schema":
//                   {"name", "schema", "strict"}} | {"type": "text"}       OpenAI
//   json_schema {...}, grammar "GBNF"                                     llama.cpp
//   guided_json, guided_regex, guided_choice, guided_grammar              vLLM
//   tools [{"type": "function", "function": {"name", "description", "parameters", "strict"}}],
//   tool_choice "none" | "auto" | "required" | {"type": "function", "function": {"name"}},
//   parallel_tool_calls                                                   OpenAI (chat only)
//
// At most one constraint per request. tool_choice "required" or a named function constrain
// the output to calls in the model's own format (ToolCallSyntax) whose arguments match each
// tool's "parameters" schema; "auto" lets the model choose and parses what it wrote.
// Compiled grammars are cached by their canonical source (grammar_cache.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/expr.h"
#include "http/api_error.h"
#include "server/openai_request.h"
#include "template/reasoning.h"
#include "template/tool_calls.h"

namespace sluice::server {

// One function a client offered.
struct Tool {
  std::string name;
  nlohmann::ordered_json parameters =
      nlohmann::ordered_json::object();  // JSON schema of its arguments
};

// Reads the constraint and tool fields of `body` into `r` (params.sampling.grammar,
// params.render_special, tool_format) and returns the tools for the chat template (null when
// none). `chat`: tools are a chat-only feature.
// `render` (chat): called with those tools before the grammar is compiled; it renders the prompt
// and says whether the prompt leaves the model inside its reasoning. With a reasoning format
// (r.reasoning), a constraint then applies to the answer only: the grammar lets the reasoning
// through unconstrained and starts where it closes (reasoning_grammar).
using PromptRenderer = std::function<std::variant<bool, http::ApiError>(const nlohmann::json&)>;
std::variant<nlohmann::json, http::ApiError> parse_structured_output(
    const nlohmann::ordered_json& body, const ModelContext& m, bool chat, CompletionRequest& r,
    const PromptRenderer& render = nullptr);

// gpt-oss's forced calls: an optional analysis message, then one Harmony message
// "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>" with arguments valid
// under that tool's schema (the model's <|call|> ends the generation).
Result<grammar::GrammarSpec> harmony_tool_call_grammar(const std::vector<Tool>& tools);

// `answer` preceded by the reasoning of `format`: kThink: "<think>" (unless the prompt opened it:
// `opens`) then any text without "</think>", "</think>", a little whitespace, then the answer;
// the whole block is optional when the prompt did not open it. kHarmony: an optional analysis
// message, then the final channel. kNone: `answer` unchanged.
grammar::GrammarSpec reasoning_grammar(grammar::GrammarSpec answer, ReasoningFormat format,
                                       bool opens);

// The grammar of tool calls in `syntax`: one call (or, `parallel`, one or more) to one of
// `tools`, with arguments valid under its parameters schema.
Result<grammar::GrammarSpec> tool_call_grammar(const ToolCallSyntax& syntax,
                                               const std::vector<Tool>& tools, bool parallel);

}  // namespace sluice::server
