// OpenAI request schema: JSON body -> a validated, tokenized request (or the ApiError that
// names the offending field). Runs on HTTP threads; needs only immutable model data.
//
//   POST /v1/chat/completions  messages -> chat template -> tokens (one prompt)
//   POST /v1/completions       prompt: "text" | ["text", ...] | [ids] | [[ids], ...]
//   POST /tokenize             prompt/content text or messages -> tokens
//   POST /detokenize           tokens -> text
//
// Unknown fields are ignored; known fields of the wrong type or out of range are 400 errors.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "http/api_error.h"
#include "template/chat_template.h"
#include "template/reasoning.h"
#include "template/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

// What request handling needs from the loaded model (immutable once loaded).
struct ModelContext {
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;
  std::string bos_text;  // BOS piece as the template sees it ("" if none)
  std::string eos_text;
  int32_t n_ctx = 0;                 // longest sequence (prompt + generated)
  int32_t n_vocab = 0;               // rows of the model's output
  std::string name;                  // served model name (answers carry it)
  std::vector<std::string> aliases;  // every name requests may give (name first); empty: name
  // Structured output: compiled grammars for the plain vocabulary, and for requests that render
  // special tokens (tool calls; make_grammar_vocab(..., true)). Null: not available.
  std::shared_ptr<grammar::GrammarCache> grammars;
  std::shared_ptr<grammar::GrammarCache> special_grammars;
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // of the chat template
  // Reasoning (reasoning.h): the template's format (kNone: reasoning stays in the text, as
  // --reasoning-format none asks), the tokens a spent budget forces, and the server's default
  // budget (-1: none).
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  std::vector<int32_t> reasoning_close_tokens;
  int32_t reasoning_budget = -1;
};

enum class ApiKind { kChat, kCompletion };

struct CompletionRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::vector<std::vector<int32_t>> prompts;  // tokenized; chat: exactly one
  GenerationParams params;                    // shared by all choices (seed: see seed_for)
  int n = 1;                                  // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Logprobs to return: -1 none; 0 the chosen token only; k also the top k alternatives.
  int n_logprobs = -1;
  // Tools offered and not refused (tool_choice): each choice's text is parsed for tool calls
  // written in this format (kNone: plain text).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  // The offered tools' parameter types, for formats that write values untyped (kQwenXml).
  std::shared_ptr<const ToolParamTypes> tool_types;
  // Chat with a reasoning model: the text is split into reasoning and answer (MessageParser);
  // `reasoning_open`: the prompt left the model inside its reasoning.
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool reasoning_open = false;

  // Choice i of prompt p has index p * n + i; with a seed, each choice gets seed + index so
  // that choices differ but stay reproducible.
  GenerationParams params_for(int index) const;
};

using ParseResult = std::variant<CompletionRequest, http::ApiError>;

// Parses a request body (the JSON text) as J: nlohmann::json (keys sorted), or
// nlohmann::ordered_json where key order matters (schemas). Nesting deeper than 64 levels is
// rejected before any recursive processing.
template <class J = nlohmann::json>
std::variant<J, http::ApiError> parse_json_body(const std::string& body);

// `body` is parsed once, keys in order: JSON schemas in it keep their key order (the order a
// model is asked to write properties in).
ParseResult parse_chat_request(const nlohmann::ordered_json& body, const ModelContext& model);
ParseResult parse_completion_request(const nlohmann::ordered_json& body, const ModelContext& model);

struct TokenizeResult {
  std::vector<int32_t> tokens;
  std::vector<std::string> pieces;  // with_pieces
  bool with_pieces = false;
};
std::variant<TokenizeResult, http::ApiError> parse_tokenize_request(
    const nlohmann::ordered_json& body, const ModelContext& model);
std::variant<std::string, http::ApiError> parse_detokenize_request(
    const nlohmann::ordered_json& body, const ModelContext& model);

// 404 model_not_found unless `body.model` is absent, null or one of the served names.
// (J: nlohmann::json or nlohmann::ordered_json.)
template <class J>
std::optional<http::ApiError> check_model(const J& body, const ModelContext& model);

}  // namespace sluice::server
