// POST /v1/embeddings (OpenAI's shape) and POST /v1/rerank, /rerank (llama-server's shape):
// request parsing, the vector arithmetic of the answers, and the answers. Pure functions of the
// JSON (no model, no engine: fuzzed alone, fuzz/embeddings_request_fuzz.cpp); the server
// tokenizes, runs Engine::embed through the bridge, and writes these answers.
//
//   embeddings request: input (a string, a list of strings, a list of token ids, or a list of
//                       token-id lists), encoding_format ("float" | "base64"), dimensions,
//                       model, user (ignored)
//   answer:             {"object": "list", "data": [{"object": "embedding", "index": i,
//                       "embedding": [...] | "<base64 of little-endian f32>"}], "model",
//                       "usage": {"prompt_tokens", "total_tokens"}}
//   rerank request:     query, documents (strings), top_n, return_documents, model
//   answer:             {"model", "object": "list", "usage", "results": [{"index",
//                       "relevance_score"[, "document": {"text"}]}]} by score, descending
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "http/api_error.h"

namespace sluice::server {

struct EmbeddingsRequest {
  // One per input: its text, or (tokens true) its token ids as given (the engine checks them
  // against the vocabulary).
  struct Input {
    bool tokens = false;
    std::string text;
    std::vector<int32_t> ids;
  };
  std::vector<Input> inputs;
  bool base64 = false;     // encoding_format "base64"
  int64_t dimensions = 0;  // > 0: truncate to that many components (0: the model's width)
};
// Errors (400) name the field: a missing or empty input, an id that is not an int32, an
// unknown encoding_format, dimensions that are not a positive integer, more than kMaxInputs.
inline constexpr size_t kMaxEmbeddingInputs = 2048;
std::variant<EmbeddingsRequest, http::ApiError> parse_embeddings_request(
    const nlohmann::json& body);

struct RerankRequest {
  std::string query;
  std::vector<std::string> documents;
  int64_t top_n = -1;  // results to return (-1: all)
  bool return_documents = false;
};
// Errors (400): query not a string, documents not a non-empty list of strings (at most
// kMaxEmbeddingInputs), top_n not a positive integer.
std::variant<RerankRequest, http::ApiError> parse_rerank_request(const nlohmann::json& body);

// v scaled to unit L2 norm (a zero vector stays zero). With `dimensions` > 0 (<= v.size()), v
// is first cut to its first `dimensions` components (Matryoshka truncation).
std::vector<float> normalize_embedding(std::span<const float> v, int64_t dimensions);
// Base64 (RFC 4648, padded) of the floats as little-endian IEEE f32 bytes, as the openai
// clients decode an "encoding_format": "base64" embedding.
std::string base64_floats(std::span<const float> v);
// The inverse (tests): empty on malformed input.
std::vector<float> floats_from_base64(const std::string& s);

nlohmann::ordered_json embeddings_response(const std::string& model,
                                           const std::vector<std::vector<float>>& vectors,
                                           bool base64, int64_t prompt_tokens);
// `scores` one per document, in document order; sorted by score (descending, ties by index),
// the first top_n kept.
nlohmann::ordered_json rerank_response(const std::string& model, const RerankRequest& request,
                                       std::span<const float> scores, int64_t prompt_tokens);

}  // namespace sluice::server
