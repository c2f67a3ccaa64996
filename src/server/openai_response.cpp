#include "server/openai_response.h"

#include <chrono>
#include <cmath>
#include <random>

namespace sluice::server {
namespace {

// JSON has no -inf: a banned token's logprob is reported as OpenAI does, -9999.0.
double finite_logprob(float lp) {
  return std::isfinite(lp) ? double(lp) : -9999.0;
}

ojson bytes_of(std::string_view s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

ojson chunk_base(const ResponseMeta& meta) {
  ojson j;
  j["id"] = meta.id;
  j["object"] = meta.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

}  // namespace

std::string random_hex(size_t n_bytes) {
  static const char* digits = "0123456789abcdef";
  std::random_device rd;
  std::string s;
  for (size_t i = 0; i < n_bytes; ++i) {
    const unsigned v = rd() & 0xff;
    s += digits[v >> 4];
    s += digits[v & 15];
  }
  return s;
}

ResponseMeta make_response_meta(ApiKind kind, const std::string& model) {
  ResponseMeta m;
  m.kind = kind;
  m.id = (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + random_hex(12);
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  m.model = model;
  return m;
}

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kContext:
      return "length";
    default:
      return nullptr;
  }
}

ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  ojson u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  if (cached_tokens >= 0) u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

ojson chat_logprobs(const Tokenizer& tok, const EngineEvent& ev) {
  ojson content = ojson::array();
  for (size_t i = 0; i < ev.tokens.size() && i < ev.samples.size(); ++i) {
    const SampleResult& s = ev.samples[i];
    const std::string_view piece = tok.piece(ev.tokens[i], /*render_special=*/true);
    ojson e;
    e["token"] = std::string(piece);
    e["logprob"] = finite_logprob(s.logprob);
    e["bytes"] = bytes_of(piece);
    ojson top = ojson::array();
    for (const TokenLogprob& t : s.top_logprobs()) {
      const std::string_view p = tok.piece(t.token, true);
      ojson a;
      a["token"] = std::string(p);
      a["logprob"] = finite_logprob(t.logprob);
      a["bytes"] = bytes_of(p);
      top.push_back(std::move(a));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return content;
}

ojson empty_completion_logprobs() {
  ojson lp;
  lp["tokens"] = ojson::array();
  lp["token_logprobs"] = ojson::array();
  lp["top_logprobs"] = ojson::array();
  lp["text_offset"] = ojson::array();
  return lp;
}

void append_completion_logprobs(ojson& lp, const Tokenizer& tok, const EngineEvent& ev,
                                size_t text_offset) {
  for (size_t i = 0; i < ev.tokens.size() && i < ev.samples.size(); ++i) {
    const SampleResult& s = ev.samples[i];
    lp["tokens"].push_back(std::string(tok.piece(ev.tokens[i], true)));
    lp["token_logprobs"].push_back(finite_logprob(s.logprob));
    ojson top = ojson::object();
    for (const TokenLogprob& t : s.top_logprobs()) {
      top[std::string(tok.piece(t.token, true))] = finite_logprob(t.logprob);
    }
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(text_offset);
  }
}

ojson chat_chunk(const ResponseMeta& meta, int index, ojson delta, ojson logprobs,
                 const char* finish, bool include_usage) {
  ojson c;
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish ? ojson(finish) : ojson(nullptr);
  ojson j = chunk_base(meta);
  j["choices"] = ojson::array({std::move(c)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ojson completion_chunk(const ResponseMeta& meta, int index, const std::string& text, ojson logprobs,
                       const char* finish, bool include_usage) {
  ojson j = chunk_base(meta);
  j["choices"] = ojson::array({completion_choice(index, text, std::move(logprobs), finish)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ojson usage_chunk(const ResponseMeta& meta, int64_t prompt_tokens, int64_t completion_tokens,
                  int64_t cached_tokens) {
  ojson j = chunk_base(meta);
  j["choices"] = ojson::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens, cached_tokens);
  return j;
}

ojson chat_choice(int index, const std::string& text, ojson logprobs, const char* finish) {
  ojson msg;
  msg["role"] = "assistant";
  msg["content"] = text;
  ojson c;
  c["index"] = index;
  c["message"] = std::move(msg);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish ? ojson(finish) : ojson(nullptr);
  return c;
}

ojson completion_choice(int index, const std::string& text, ojson logprobs, const char* finish) {
  ojson c;
  c["index"] = index;
  c["text"] = text;
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish ? ojson(finish) : ojson(nullptr);
  return c;
}

ojson full_response(const ResponseMeta& meta, ojson choices, int64_t prompt_tokens,
                    int64_t completion_tokens, int64_t cached_tokens) {
  ojson j;
  j["id"] = meta.id;
  j["object"] = meta.kind == ApiKind::kChat ? "chat.completion" : "text_completion";
  j["created"] = meta.created;
  j["model"] = meta.model;
  j["choices"] = std::move(choices);
  j["usage"] = usage_json(prompt_tokens, completion_tokens, cached_tokens);
  return j;
}

}  // namespace sluice::server
