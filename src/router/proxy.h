// `sluice router`: one OpenAI-compatible endpoint in front of many backends (sluice serve,
// llama-server, vLLM, ...). docs/router.md.
//
//   RouterServer r(config);
//   Result<int> port = r.start();  // one health round first, then listening
//   ...
//   r.shutdown();
//
// Routes: the same as sluice serve's. /v1/chat/completions, /v1/completions, /v1/responses,
// /v1/messages: routed by the policy (policy.h); /tokenize, /detokenize,
// /v1/messages/count_tokens, /v1/embeddings, /v1/rerank, /rerank: to a backend serving the named
// model; GET and DELETE /v1/responses/{id}, and a Responses request with previous_response_id:
// to the backend that created that response (the router remembers which, for the newest 10,000
// response ids it passed on); /v1/models: the union of the backends'; /health: 200 while some
// backend is healthy; /metrics: the router's own counters (backends.h). With an API key, every
// route but /health and /metrics needs it (Bearer or x-api-key); it is passed on to the backends.
// Errors the router itself answers on /v1/messages* are in Anthropic's shape.
//
// A proxied request, on its connection thread:
//
//   pick backend --> send --> read head ---------> 2xx-4xx: answer with it; the body follows
//        ^                        |                  as it arrives (SSE event by event)
//        |  (once, another one)   | connect error,
//        +------------------------+ closed before the head, 5xx
//
// Bodies pass through unchanged (streams are re-chunked, their bytes are the backend's). A
// backend that breaks off after the head: a stream ends with an SSE error event and
// `data: [DONE]`, a whole answer becomes a 502 in OpenAI's error shape; a non-SSE stream is cut
// without its last chunk, so the client sees an incomplete body. A client that hangs up closes
// the backend connection (sluice serve then aborts the generation).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "http/http_transport.h"
#include "router/backends.h"
#include "router/policy.h"
#include "router/routing_key.h"
#include "router/upstream.h"

namespace sluice::router {

struct InFlight;  // a picked backend's load, counted until the answer is over

struct RouterConfig {
  std::vector<std::string> backends;  // http://HOST:PORT each (the decode workers under P/D)
  // Disaggregated prefill/decode (docs/disaggregation.md): when set, each generation's prompt
  // is first computed on one of these (`sluice serve --role prefill`), whose answer names
  // the K/V it pinned; the request then goes to a backend (--role decode) with that
  // kv_transfer_params, and the decode worker pulls the blocks. A failed prefill falls back to
  // the decode worker computing the prompt itself.
  std::vector<std::string> prefill;
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: an ephemeral port
  PolicyConfig policy;
  double health_interval_s = 1.0;
  int connect_timeout_ms = 2000;
  int upstream_timeout_s = 600;  // longest silence of a backend within one answer
  std::string api_key;           // non-empty: required as "Bearer KEY" or "x-api-key: KEY"
  bool webui = true;             // the web app at / and /webui/* (http/webui.h); false: 404
  BackendsOptions backends_options;
  http::HttpLimits http;
};

class RouterServer {
 public:
  explicit RouterServer(RouterConfig config);
  ~RouterServer();  // shutdown()
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // Checks the backend URLs, polls every backend once, binds and starts serving and polling.
  // Returns the bound port.
  Result<int> start();
  // Stops accepting and polling; answers still streaming end with an error event. Idempotent.
  void shutdown();
  int port() const { return port_; }
  Backends& backends() { return *backends_; }
  Backends* prefill_backends() { return prefill_.get(); }
  // One health round now (tests; the background thread keeps its own schedule).
  void poll_now() { backends_->poll_once(&stop_); }

 private:
  enum class Kind { kChat, kCompletion, kResponses, kMessages, kOther, kStoredResponse };
  // Where a request may go: what the policy reads of it, or the one backend it is pinned to.
  struct Route {
    RequestInfo info;
    std::optional<int> pinned;
  };
  // A request sent to a backend, and its answer's head.
  struct Sent {
    std::unique_ptr<Connection> conn;
    ResponseHead head;
  };
  struct SendError {
    std::string message;
    ReadResult why;  // kClientGone: the client left; kTimeout: the backend is slow
  };
  void register_routes();
  // A proxied request: route_of, then pick and send_to (once more elsewhere on a failure before
  // the answer starts), then relay.
  void forward(const httplib::Request& req, httplib::Response& res, Kind kind);
  std::variant<Route, http::ApiError> route_of(const httplib::Request& req, Kind kind);
  // Writes `head` (request line and headers) and `body` to backend p of `backends`, reads the
  // answer's head. Failures are recorded on the backend (an unreachable one is taken out),
  // but for a client that left.
  std::variant<Sent, SendError> send_to(Backends& backends, const Pick& p, const std::string& head,
                                        const std::string& body, const Wait& wait);
  // Passes the answer on: a whole one, or a stream as it arrives; `on_response_id` gets a
  // Responses answer's id.
  void relay(const Pick& p, Sent sent, std::unique_ptr<InFlight> in_flight, const Wait& wait,
             bool generation, std::function<void(const std::string&)> on_response_id,
             httplib::Response& res);
  // Which backend created a Responses answer (bounded, least recently used out).
  void remember_response(const std::string& id, int backend);
  std::optional<int> response_backend(const std::string& id);
  // P/D: the prompt's prefill on a prefill worker. Returns the kv_transfer_params JSON text
  // for the decode request ("": nothing to hand over), nullopt when the prefill failed
  // (`error` says why: the decode worker computes the prompt) or the client left
  // (`client_gone`).
  std::optional<std::string> prefill(const httplib::Request& req, const std::string& model,
                                     const std::string& key, const std::string& headers,
                                     const Wait& wait, bool& client_gone, std::string& error);
  void health_loop();

  const RouterConfig config_;
  std::unique_ptr<Backends> backends_;
  std::unique_ptr<Backends> prefill_;  // P/D mode only
  std::atomic<uint64_t> pd_prefills_{0};
  std::atomic<uint64_t> pd_fallbacks_{0};
  std::atomic<uint64_t> pd_prefill_us_{0};
  http::HttpServer http_;
  std::thread listener_;
  std::thread health_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::mutex responses_mu_;
  std::list<std::pair<std::string, int>> responses_lru_;  // newest first
  std::unordered_map<std::string, std::list<std::pair<std::string, int>>::iterator> responses_;
  int port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace sluice::router
