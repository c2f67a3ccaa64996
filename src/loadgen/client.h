// The streaming client of `sluice bench serve`: one OpenAI-compatible request per call, sent to
// /v1/completions or /v1/chat/completions with "stream": true, its Server-Sent Events parsed as
// the bytes arrive. Works against any server that speaks the OpenAI streaming format (sluice,
// vLLM, llama.cpp, SGLang, TGI's /v1 ...).
//
// Timing: every SSE event whose choice carries non-empty text is one token sample, stamped
// with the steady clock when the bytes that completed it were handed to us. Several events in
// one network read share a timestamp (they did arrive together); a server that batches k
// tokens into one event yields one sample, and usage.completion_tokens still counts k.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"

namespace sluice::loadgen {

enum class ApiKind { kCompletions, kChat };

// Where and how to send; shared by every request of a run.
struct ClientConfig {
  std::string url;    // http(s)://host[:port][/prefix]; "/v1/..." is appended
  std::string model;  // empty: the request has no "model" field
  ApiKind endpoint = ApiKind::kCompletions;
  std::string api_key;     // sent as "Authorization: Bearer <key>" when non-empty
  double timeout_s = 600;  // connect and per-read timeout
};

// "http://host:port/prefix" split into what httplib::Client takes and the path prefix.
struct BaseUrl {
  std::string scheme_host_port;  // "http://127.0.0.1:8080"
  std::string path_prefix;       // "" or "/prefix" (no trailing slash)
};

Result<BaseUrl> parse_base_url(const std::string& url);
// "/v1/completions" or "/v1/chat/completions" under the prefix (a prefix ending in "/v1" is
// not doubled).
std::string endpoint_path(const BaseUrl& base, ApiKind kind);

// The endpoint a request goes to: spec.send_as when it names one, else config.endpoint.
ApiKind api_kind(const ClientConfig& config, const RequestSpec& spec);

// The JSON body of one streaming request (its prompt or messages as api_kind says; kTokenIds:
// "prompt" is the list spec.prompt_ids): max_tokens = spec.output_tokens, temperature 0,
// ignore_eos (vLLM/sluice extension; other servers ignore unknown fields),
// stream_options.include_usage.
nlohmann::json request_body(const ClientConfig& config, const RequestSpec& spec);

// Incremental parser of one response's event stream. Feed bytes in arrival order with their
// arrival time; it never throws. Handles events split across reads, CRLF line ends, multi-line
// data fields, comments, `event: error`, and stops at the first error.
class SseStream {
 public:
  void feed(std::string_view bytes, double t_s);

  bool done() const { return done_; }  // saw "data: [DONE]"
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  double done_time() const { return done_time_; }
  // Arrival time of every event carrying non-empty text, in order.
  const std::vector<double>& token_times() const { return token_times_; }
  std::optional<int64_t> prompt_tokens() const { return prompt_tokens_; }
  std::optional<int64_t> completion_tokens() const { return completion_tokens_; }
  // The first bytes received (for "not an event stream" messages).
  const std::string& head() const { return head_; }

 private:
  void dispatch(double t_s);

  std::string buf_;         // bytes of an incomplete line
  std::string data_;        // data lines of the event being read
  std::string event_type_;  // "event:" field of the event being read
  bool has_data_ = false;
  bool done_ = false;
  double done_time_ = 0;
  std::string error_;
  std::string head_;
  std::vector<double> token_times_;
  std::optional<int64_t> prompt_tokens_, completion_tokens_;
};

// Sends one request and measures it against `t0` (the run start). Never throws: connection
// errors, HTTP status != 200, malformed events, error events and streams that end without
// [DONE] or without any text come back as !ok with a message.
RequestRecord send_request(const ClientConfig& config, const RequestSpec& spec,
                           std::chrono::steady_clock::time_point t0);

}  // namespace sluice::loadgen
