// libFuzzer target: the bodies of POST /v1/embeddings and POST /v1/rerank (server/
// embeddings_api.h), and what the server answers with. The first byte picks the parser, the
// rest is the body:
//   0: parse_embeddings_request, then the answer (floats and base64) of its inputs' lengths
//   1: parse_rerank_request, then the answer of made-up scores
// Checks: no crash, hang or exception on any JSON; an accepted request has 1 ..
// kMaxEmbeddingInputs inputs, none empty; dimensions > 0 when set; base64 decodes back to the
// very floats; a rerank answer has min(top_n, documents) results in descending score order.
//
//   scripts/fuzz 60 embeddings_request_fuzz
// Seeds: fuzz/seeds/embeddings_request_fuzz.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/embeddings_api.h"

namespace {

using sluice::server::kMaxEmbeddingInputs;

void embeddings(const nlohmann::json& body) {
  const auto r = sluice::server::parse_embeddings_request(body);
  const auto* req = std::get_if<sluice::server::EmbeddingsRequest>(&r);
  if (!req) return;
  if (req->inputs.empty() || req->inputs.size() > kMaxEmbeddingInputs) std::abort();
  if (req->dimensions < 0) std::abort();
  std::vector<std::vector<float>> vecs;
  for (const auto& in : req->inputs) {
    if (in.tokens ? in.ids.empty() : in.text.empty()) std::abort();
    std::vector<float> v;
    const size_t n = in.tokens ? in.ids.size() : in.text.size();
    for (size_t i = 0; i < n && i < 64; ++i) v.push_back(float(i) - 3.5f);
    v = sluice::server::normalize_embedding(v, req->dimensions);
    if (sluice::server::floats_from_base64(sluice::server::base64_floats(v)) != v) std::abort();
    vecs.push_back(std::move(v));
  }
  (void)sluice::server::embeddings_response("m", vecs, req->base64, 1).dump();
}

void rerank(const nlohmann::json& body) {
  const auto r = sluice::server::parse_rerank_request(body);
  const auto* req = std::get_if<sluice::server::RerankRequest>(&r);
  if (!req) return;
  if (req->documents.empty() || req->documents.size() > kMaxEmbeddingInputs) std::abort();
  std::vector<float> scores;
  for (const std::string& d : req->documents) scores.push_back(float(d.size() % 7) - 2.0f);
  const nlohmann::ordered_json out = sluice::server::rerank_response("m", *req, scores, 1);
  const auto& res = out["results"];
  const size_t want =
      req->top_n > 0 && size_t(req->top_n) < scores.size() ? size_t(req->top_n) : scores.size();
  if (res.size() != want) std::abort();
  for (size_t i = 1; i < res.size(); ++i) {
    if (res[i - 1]["relevance_score"].get<float>() < res[i]["relevance_score"].get<float>()) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, false);
  if (body.is_discarded()) return 0;
  if (data[0] % 2 == 0) {
    embeddings(body);
  } else {
    rerank(body);
  }
  return 0;
}
