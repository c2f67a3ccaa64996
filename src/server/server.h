// `sluice serve`: an OpenAI-compatible HTTP server over one Engine.
//
//   Server server(config);
//   Result<int> port = server.start(loader);  // listening now; /health answers 503
//   server.wait_ready();                      // the loader ran on the engine thread
//   ...
//   server.shutdown(30);                      // stop accepting, drain, cancel the rest
//
// Threads: one listener (accept loop), one thread per open connection (http_transport.h), one
// engine thread that owns the Engine (engine_bridge.h). Handlers parse, validate, render the
// chat template and tokenize on their connection thread, then wait on their request's channel.
// Endpoints, fields, errors and metrics: docs/server.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "http/http_transport.h"
#include "model/config.h"
#include "server/embeddings_api.h"
#include "server/engine_bridge.h"
#include "server/kv_tiers.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "server/route_log.h"

namespace sluice::server {

// What a model loader hands the server. `owner` keeps everything alive (model, tokenizer,
// executor, engine); the pointers point into it. The engine is used on the engine thread only.
struct ServedModel {
  std::shared_ptr<void> owner;
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  int32_t n_vocab = 0;        // rows of the model's output (0: the tokenizer's vocabulary)
  std::string chat_template;  // the model's tokenizer.chat_template ("" if none)
  std::string name;           // served model name unless ServerConfig overrides it
  // The K/V identity transfers and disk files must match (KvTiers): a fingerprint of the
  // model file, and the tensor-parallel degree.
  std::string kv_model_id;
  int32_t tp = 1;
  // Embedding models (served with ServerConfig::embedding): how they pool, and the width of
  // their pooled rows (n_embd; a reranker: its scores).
  Pooling pooling = Pooling::kNone;
  int32_t embedding_width = 0;
};
using ModelLoader = std::function<Result<ServedModel>()>;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: an ephemeral port (start() returns it)
  std::string api_key;   // non-empty: /v1/*, /tokenize, /detokenize need "Bearer KEY"
  bool webui = true;     // the web app at / and /webui/* (http/webui.h); false: 404 there
  int max_queue = 4096;  // generations waiting for the scheduler; more: 429
  // Names requests may give in "model" (any of them) and /v1/models lists; answers carry the
  // first. Empty: ServedModel::name alone.
  std::vector<std::string> served_model_names;
  std::string chat_template;  // template source overriding the model's ("" -> the model's)
  // "auto": reasoning split from the answer in the template's format; "none": left in the text.
  std::string reasoning_format = "auto";
  int32_t reasoning_budget = -1;  // default thinking budget in tokens (-1: none)
  http::HttpLimits http;
  // `sluice serve --embedding`: the model is an embedding model. /v1/embeddings and the rerank
  // routes answer; the generation routes refuse (400), and the other way round without it.
  bool embedding = false;
  // Disaggregated serving and the disk tier: --role, --kv-transfer-*, --kv-disk-*.
  KvTierConfig kv;
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();  // shutdown(0)
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving (the model endpoints answer 503 until loaded), then runs
  // `loader` on the engine thread. Returns the bound port.
  Result<int> start(ModelLoader loader);
  // Blocks until the loader finished; its error if it failed (the chat template included).
  Status wait_ready();
  // The loader's result once it finished; nullopt while it runs.
  std::optional<Status> load_status() const { return bridge_.load_status(); }
  bool ready() const { return bridge_.ready(); }
  int port() const { return port_; }
  // Once ready: the K/V transfer port of a prefill worker (0: none).
  int kv_transfer_port() const {
    return ready() && kv_tiers_ && kv_tiers_->transfer_server()
               ? kv_tiers_->transfer_server()->port()
               : 0;
  }

  // Graceful shutdown in steps (the CLI watches signals in between):
  void stop_accepting();  // close the listener and refuse new generations (503)
  int64_t n_active() const { return bridge_.n_active(); }
  void cancel_all();  // abort every generation still running
  void join();        // wait for every connection, then stop the engine thread
  // All of the above: waits up to `grace_s` seconds for running generations. Idempotent.
  void shutdown(double grace_s);

 private:
  void register_routes();
  Result<Engine*> load_on_engine_thread(const ModelLoader& loader);
  bool authorized(const httplib::Request& req) const;
  void handle_generation(const httplib::Request& req, httplib::Response& res, ApiKind kind);
  void handle_responses(const httplib::Request& req, httplib::Response& res);
  void handle_messages(const httplib::Request& req, httplib::Response& res, bool count_tokens);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_embeddings(const httplib::Request& req, httplib::Response& res);
  void handle_rerank(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
  void handle_cache_routes(const httplib::Request& req, httplib::Response& res);
  nlohmann::ordered_json model_card(const std::string& id) const;

  const ServerConfig config_;
  ServerMetrics metrics_;
  // Written by the engine thread before bridge_.ready() turns true, read-only afterwards.
  ServedModel served_;
  ModelContext model_;
  Pooling served_pooling_ = Pooling::kNone;  // served_.pooling, likewise
  int32_t served_width_ = 0;                 // served_.embedding_width
  EngineBridge bridge_;
  // Written by the engine thread before ready, like served_; destroyed before bridge_.
  std::unique_ptr<KvTiers> kv_tiers_;
  ResponseStore responses_;  // POST /v1/responses with store (GET/DELETE, previous_response_id)
  RouteLog routes_;          // prompts of router-tagged requests (GET /v1/cache/routes)
  http::HttpServer http_;
  std::thread listener_;
  int port_ = 0;
  bool stopped_accepting_ = false;
  bool joined_ = false;
};

}  // namespace sluice::server
