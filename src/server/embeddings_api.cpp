#include "server/embeddings_api.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace sluice::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using http::ApiError;
using http::bad_request;

// A JSON integer (not a bool, not a float with a fraction) in int32 range.
bool embed_as_int32(const json& v, int32_t& out) {
  if (v.is_number_integer()) {
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      return false;
    }
    out = int32_t(x);
    return true;
  }
  return false;
}

std::optional<ApiError> embed_token_list(const json& arr, std::vector<int32_t>& out) {
  for (const json& t : arr) {
    int32_t id = 0;
    if (!embed_as_int32(t, id)) {
      return bad_request("'input' holds a token id that is not a 32-bit integer", "input");
    }
    out.push_back(id);
  }
  if (out.empty()) return bad_request("'input' holds an empty token list", "input");
  return std::nullopt;
}

}  // namespace

std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(const json& body) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  EmbeddingsRequest r;
  const auto in = body.find("input");
  if (in == body.end()) return bad_request("'input' is required", "input");
  const ApiError shape = bad_request(
      "'input' must be a string, a list of strings, a list of token ids or a list of token-id "
      "lists",
      "input");
  if (in->is_string()) {
    r.inputs.push_back({false, in->get<std::string>(), {}});
  } else if (in->is_array()) {
    if (in->empty()) return bad_request("'input' is an empty list", "input");
    if (in->size() > kMaxEmbeddingInputs) {
      return bad_request("'input' has " + std::to_string(in->size()) + " items; at most " +
                             std::to_string(kMaxEmbeddingInputs) + " per request",
                         "input");
    }
    const json& first = in->front();
    if (first.is_number()) {  // one list of token ids
      EmbeddingsRequest::Input one;
      one.tokens = true;
      if (auto e = embed_token_list(*in, one.ids)) return *e;
      r.inputs.push_back(std::move(one));
    } else {
      for (const json& item : *in) {
        if (item.is_string()) {
          r.inputs.push_back({false, item.get<std::string>(), {}});
        } else if (item.is_array()) {
          EmbeddingsRequest::Input one;
          one.tokens = true;
          if (auto e = embed_token_list(item, one.ids)) return *e;
          r.inputs.push_back(std::move(one));
        } else {
          return shape;
        }
      }
    }
  } else {
    return shape;
  }
  for (const EmbeddingsRequest::Input& i : r.inputs) {
    if (!i.tokens && i.text.empty()) return bad_request("'input' holds an empty string", "input");
  }
  if (const auto f = body.find("encoding_format"); f != body.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) {
      return bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    }
    r.base64 = *f == "base64";
  }
  if (const auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
    int32_t n = 0;
    if (!embed_as_int32(*d, n) || n < 1) {
      return bad_request("'dimensions' must be a positive integer", "dimensions");
    }
    r.dimensions = n;
  }
  return r;
}

std::variant<RerankRequest, ApiError> parse_rerank_request(const json& body) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  RerankRequest r;
  const auto q = body.find("query");
  if (q == body.end() || !q->is_string()) return bad_request("'query' must be a string", "query");
  r.query = q->get<std::string>();
  const auto docs = body.find("documents");
  if (docs == body.end() || !docs->is_array() || docs->empty()) {
    return bad_request("'documents' must be a non-empty list of strings", "documents");
  }
  if (docs->size() > kMaxEmbeddingInputs) {
    return bad_request("'documents' has " + std::to_string(docs->size()) + " items; at most " +
                           std::to_string(kMaxEmbeddingInputs) + " per request",
                       "documents");
  }
  for (const json& d : *docs) {
    if (!d.is_string()) {
      return bad_request("'documents' must be a non-empty list of strings", "documents");
    }
    r.documents.push_back(d.get<std::string>());
  }
  if (const auto t = body.find("top_n"); t != body.end() && !t->is_null()) {
    int32_t n = 0;
    if (!embed_as_int32(*t, n) || n < 1)
      return bad_request("'top_n' must be a positive integer", "top_n");
    r.top_n = n;
  }
  if (const auto rd = body.find("return_documents"); rd != body.end() && !rd->is_null()) {
    if (!rd->is_boolean()) {
      return bad_request("'return_documents' must be a boolean", "return_documents");
    }
    r.return_documents = rd->get<bool>();
  }
  return r;
}

std::vector<float> normalize_embedding(std::span<const float> v, int64_t dimensions) {
  const size_t n = dimensions > 0 ? std::min(size_t(dimensions), v.size()) : v.size();
  std::vector<float> out(v.begin(), v.begin() + long(n));
  double sum = 0;
  for (float x : out) sum += double(x) * double(x);
  if (sum > 0) {
    const double inv = 1.0 / std::sqrt(sum);
    for (float& x : out) x = float(double(x) * inv);
  }
  return out;
}

namespace {
constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_floats(std::span<const float> v) {
  std::vector<uint8_t> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(v[i]);
    for (int k = 0; k < 4; ++k) bytes[i * 4 + size_t(k)] = uint8_t(b >> (8 * k));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = uint32_t(bytes[i]) << 16 |
                       (i + 1 < bytes.size() ? uint32_t(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(bytes[i + 2]) : 0);
    out.push_back(kBase64Alphabet[(n >> 18) & 63]);
    out.push_back(kBase64Alphabet[(n >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kBase64Alphabet[(n >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kBase64Alphabet[n & 63] : '=');
  }
  return out;
}

std::vector<float> floats_from_base64(const std::string& s) {
  if (s.size() % 4 != 0) return {};
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < s.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + size_t(k)];
      uint32_t v = 0;
      if (c == '=') {
        ++pad;
      } else {
        const char* p = std::strchr(kBase64Alphabet, c);
        if (!p || c == '\0' || pad > 0) return {};
        v = uint32_t(p - kBase64Alphabet);
      }
      n = n << 6 | v;
    }
    bytes.push_back(uint8_t(n >> 16));
    if (pad < 2) bytes.push_back(uint8_t(n >> 8));
    if (pad < 1) bytes.push_back(uint8_t(n));
  }
  if (bytes.size() % 4 != 0) return {};
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t b = 0;
    for (int k = 0; k < 4; ++k) b |= uint32_t(bytes[i * 4 + size_t(k)]) << (8 * k);
    out[i] = std::bit_cast<float>(b);
  }
  return out;
}

ojson embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                          bool base64, int64_t prompt_tokens) {
  ojson data = ojson::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    ojson item;
    item["object"] = "embedding";
    item["index"] = i;
    if (base64) {
      item["embedding"] = base64_floats(vectors[i]);
    } else {
      item["embedding"] = vectors[i];
    }
    data.push_back(std::move(item));
  }
  ojson out;
  out["object"] = "list";
  out["data"] = std::move(data);
  out["model"] = model;
  out["usage"] = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  return out;
}

ojson rerank_response(const std::string& model, const RerankRequest& request,
                      std::span<const float> scores, int64_t prompt_tokens) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (request.top_n > 0 && size_t(request.top_n) < order.size())
    order.resize(size_t(request.top_n));
  ojson results = ojson::array();
  for (size_t i : order) {
    ojson r;
    r["index"] = i;
    r["relevance_score"] = scores[i];
    if (request.return_documents && i < request.documents.size()) {
      r["document"] = {{"text", request.documents[i]}};
    }
    results.push_back(std::move(r));
  }
  ojson out;
  out["model"] = model;
  out["object"] = "list";
  out["usage"] = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  out["results"] = std::move(results);
  return out;
}

}  // namespace sluice::server
