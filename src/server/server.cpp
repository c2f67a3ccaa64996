#include "server/server.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>

#include "base/log.h"
#include "http/webui.h"
#include "server/messages_api.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "server/streaming.h"

namespace sluice::server {

using http::answer_exceptions_with_500;
using http::ApiError;
using http::bad_request;
using http::declares_body_over;
using http::internal_error;
using http::send_error;
using http::send_json;
using http::status_error;
namespace {

using HandlerResponse = httplib::Server::HandlerResponse;

// The routes the server knows: method, whether they need the API key and the loaded model.
struct RouteSpec {
  const char* path;
  bool prefix;  // matches path + "/..." (GET /v1/models/{id})
  const char* method;
  bool auth;
  bool needs_model;
};

constexpr RouteSpec kRoutes[] = {
    {"/health", false, "GET", false, false},
    {"/metrics", false, "GET", false, false},
    {"/v1/models", false, "GET", true, true},
    {"/v1/models", true, "GET", true, true},
    {"/v1/chat/completions", false, "POST", true, true},
    {"/v1/completions", false, "POST", true, true},
    {"/tokenize", false, "POST", true, true},
    {"/detokenize", false, "POST", true, true},
    {"/v1/responses", false, "POST", true, true},
    {"/v1/responses", true, "GET, DELETE", true, true},
    {"/v1/messages", false, "POST", true, true},
    {"/v1/messages/count_tokens", false, "POST", true, true},
    {"/v1/embeddings", false, "POST", true, true},
    {"/v1/rerank", false, "POST", true, true},
    {"/rerank", false, "POST", true, true},
    // For `sluice router` (docs/router.md): counts only, no text, so no key, like /metrics.
    {"/v1/cache/routes", false, "GET", false, true},
    // The web app (http/webui.h): open, like a login page; it asks for the key and sends it.
    {"/", false, "GET", false, false},
    {"/webui", true, "GET", false, false},
};

const RouteSpec* find_route(const std::string& path) {
  for (const RouteSpec& r : kRoutes) {
    const std::string p = r.path;
    if (!r.prefix && path == p) return &r;
    if (r.prefix && path.size() > p.size() + 1 && path.compare(0, p.size() + 1, p + "/") == 0)
      return &r;
  }
  return nullptr;
}

// The two kinds of served model refuse each other's routes (400).
ApiError generation_refused() {
  return bad_request(
      "the served model is an embedding model; generation needs a generation model (start "
      "sluice serve without --embedding)",
      "", "embedding_model");
}
ApiError embeddings_refused() {
  return bad_request("the served model is a generation model; start sluice serve with --embedding",
                     "", "generation_model");
}

// r.method: one method or a list ("GET, DELETE"); HEAD goes where GET does.
bool method_allowed(const RouteSpec& r, const std::string& method) {
  const std::string_view allowed = r.method;
  for (size_t at = 0; at < allowed.size();) {
    size_t end = allowed.find(", ", at);
    if (end == std::string_view::npos) end = allowed.size();
    const std::string_view m = allowed.substr(at, end - at);
    if (m == method || (m == "GET" && method == "HEAD")) return true;
    at = end + 2;
  }
  return false;
}

// A refusal before routing: the request's body is unread, so a request with one closes its
// connection (http_transport.h: close_after_response).
void send_route_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  if (http::declares_body(req)) http::close_after_response(res);
  http::send_error_for(req, res, e);
}

ApiError response_not_found(const std::string& id) {
  return status_error(404, "no stored response '" + id + "'", "invalid_request_error",
                      "response_not_found");
}

// Errors httplib produces itself (malformed request line, 413, 414, ...) get our JSON body.
ApiError transport_error(int status) {
  switch (status) {
    case 413:
      return status_error(413, "the request body is too large", "invalid_request_error",
                          "request_too_large");
    case 414:
      return status_error(414, "the request URI is too long", "invalid_request_error",
                          "uri_too_long");
    case 404:
      return status_error(404, "not found", "not_found_error", "not_found");
    case 500:
      return internal_error("internal server error");
    default:
      return status_error(status, "the HTTP request is malformed", "invalid_request_error",
                          "bad_request");
  }
}

}  // namespace

Server::Server(ServerConfig config)
    : config_(std::move(config)),
      bridge_(metrics_, BridgeOptions{config_.max_queue}),
      http_(config_.http) {
  register_routes();
}

Server::~Server() {
  shutdown(0);
}

Result<int> Server::start(ModelLoader loader) {
  // Writes to a closed connection must fail, not kill the process (the transport also sends
  // with MSG_NOSIGNAL; this covers anything else).
  std::signal(SIGPIPE, SIG_IGN);
  SLUICE_ASSIGN_OR_RETURN(port_, http_.bind_port(config_.host, config_.port));
  listener_ = std::thread([this] { http_.serve(); });
  bridge_.start([this, loader = std::move(loader)] { return load_on_engine_thread(loader); });
  return port_;
}

Status Server::wait_ready() {
  return bridge_.wait_loaded();
}

Result<Engine*> Server::load_on_engine_thread(const ModelLoader& loader) {
  SLUICE_ASSIGN_OR_RETURN(ServedModel m, loader());
  if (!m.engine || !m.tokenizer) return make_error("the model loader returned no engine");
  ModelContext ctx;
  ctx.tokenizer = m.tokenizer;
  ctx.n_ctx = m.engine->n_ctx();
  ctx.n_vocab = m.n_vocab > 0 ? m.n_vocab : m.tokenizer->vocab().n_tokens();
  ctx.aliases = config_.served_model_names;
  if (ctx.aliases.empty()) ctx.aliases.push_back(m.name);
  ctx.name = ctx.aliases.front();
  const Vocab& v = m.tokenizer->vocab();
  ctx.bos_text = v.bos() >= 0 ? std::string(m.tokenizer->piece(v.bos(), true)) : "";
  ctx.eos_text = v.eos() >= 0 ? std::string(m.tokenizer->piece(v.eos(), true)) : "";
  const std::string& source =
      config_.chat_template.empty() ? m.chat_template : config_.chat_template;
  if (!source.empty()) {
    Result<ChatTemplate> t = ChatTemplate::parse(source);
    if (!t.ok()) return make_error("the chat template does not parse: ", t.message());
    ctx.chat_template = std::move(*t);
    ctx.tool_format = detect_tool_call_format(source);
    if (config_.reasoning_format != "none") ctx.reasoning_format = detect_reasoning_format(source);
  }
  if (ctx.reasoning_format != ReasoningFormat::kNone) {
    EncodeOptions eo;
    eo.parse_special = true;
    eo.add_special = false;
    Result<std::vector<TokenId>> close =
        m.tokenizer->encode(std::string(reasoning_close_text(ctx.reasoning_format)), eo);
    if (!close.ok())
      return make_error("cannot tokenize the reasoning close text: ", close.message());
    ctx.reasoning_close_tokens = std::move(*close);
  }
  ctx.reasoning_budget = config_.reasoning_budget;
  // The engine's vocabulary (it runs these grammars); the one with special tokens rendered
  // (Harmony's markers) only the server needs.
  ctx.grammars = std::make_shared<grammar::GrammarCache>(m.engine->grammar_vocab());
  ctx.special_grammars = std::make_shared<grammar::GrammarCache>(
      make_grammar_vocab(*m.tokenizer, ctx.n_vocab, /*render_special=*/true));
  metrics_.set_grammar_caches({ctx.grammars, ctx.special_grammars});
  KvIdentity kv_id;
  kv_id.model = m.kv_model_id;
  kv_id.tp = m.tp;
  SLUICE_ASSIGN_OR_RETURN(kv_tiers_, KvTiers::start(config_.kv, kv_id, *m.engine, bridge_));
  if (config_.embedding && m.pooling == Pooling::kNone) {
    return make_error("--embedding: the model does not pool (no <arch>.pooling_type; give ",
                      "--pooling mean, cls, last or rank)");
  }
  served_pooling_ = m.pooling;
  served_width_ = m.embedding_width;
  served_ = std::move(m);
  model_ = std::move(ctx);
  return served_.engine;
}

bool Server::authorized(const httplib::Request& req) const {
  return http::api_key_matches(req, config_.api_key);
}

nlohmann::ordered_json Server::model_card(const std::string& id) const {
  nlohmann::ordered_json m;
  m["id"] = id;
  m["object"] = "model";
  m["created"] = make_response_meta(ApiKind::kCompletion, "").created;
  m["owned_by"] = "sluice";
  m["max_model_len"] = model_.n_ctx;
  return m;
}

void Server::register_routes() {
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const RouteSpec* route = find_route(req.path);
    if (!route || (!config_.webui && http::is_web_app_path(req.path))) {
      send_route_error(req, res,
                       status_error(404, "no route for " + req.method + " " + req.path,
                                    "not_found_error", "not_found"));
      return HandlerResponse::Handled;
    }
    if (!method_allowed(*route, req.method)) {
      res.set_header("Allow", route->method);
      send_route_error(
          req, res,
          status_error(
              405, req.method + " is not allowed on " + req.path + " (use " + route->method + ")",
              "invalid_request_error", "method_not_allowed"));
      return HandlerResponse::Handled;
    }
    if (declares_body_over(req, config_.http.max_body_bytes)) {
      send_route_error(req, res, transport_error(413));
      return HandlerResponse::Handled;
    }
    if (route->auth && !config_.api_key.empty() && !authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_route_error(
          req, res,
          status_error(401, "invalid or missing API key (send 'Authorization: Bearer KEY')",
                       "authentication_error", "invalid_api_key"));
      return HandlerResponse::Handled;
    }
    if (route->needs_model && !bridge_.ready()) {
      ApiError e =
          status_error(503, "the model is loading", "service_unavailable", "model_loading");
      e.retry_after_s = 1;
      send_route_error(req, res, e);
      return HandlerResponse::Handled;
    }
    return HandlerResponse::Unhandled;
  });
  http_.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return HandlerResponse::Unhandled;  // ours already
        send_error(res, transport_error(res.status));
        return HandlerResponse::Handled;
      }));
  answer_exceptions_with_500(http_, "serve");
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const RouteSpec* route = find_route(req.path);
    metrics_.count_http(
        route ? (route->prefix ? std::string(route->path) + "/{id}" : route->path) : "other",
        res.status);
  });

  if (config_.webui) {
    http_.Get("/", http::serve_web_asset);
    http_.Get(R"(/webui/.+)", http::serve_web_asset);
  }
  http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (bridge_.ready()) {
      send_json(res, 200, {{"status", "ok"}});
      return;
    }
    ApiError e = status_error(503, "the model is loading", "service_unavailable", "model_loading");
    e.retry_after_s = 1;
    send_error(res, e);
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string page = metrics_.render(http_.stats());
    if (kv_tiers_ && bridge_.ready()) kv_tiers_->render_metrics(page);
    res.set_content(page, "text/plain; version=0.0.4; charset=utf-8");
  });
  http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    for (const std::string& name : model_.aliases) data.push_back(model_card(name));
    send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
  });
  http_.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (std::find(model_.aliases.begin(), model_.aliases.end(), id) == model_.aliases.end()) {
      send_error(res,
                 status_error(404, "the model '" + std::string(req.matches[1]) + "' does not exist",
                              "invalid_request_error", "model_not_found"));
      return;
    }
    send_json(res, 200, model_card(id));
  });
  http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, ApiKind::kChat);
  });
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, ApiKind::kCompletion);
  });
  http_.Get("/v1/cache/routes", [this](const httplib::Request& req, httplib::Response& res) {
    handle_cache_routes(req, res);
  });
  http_.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    handle_responses(req, res);
  });
  http_.Get(R"(/v1/responses/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::optional<ResponseStore::Entry> e = responses_.get(req.matches[1]);
    if (!e) return send_error(res, response_not_found(req.matches[1]));
    send_json(res, 200, e->response);
  });
  http_.Delete(R"(/v1/responses/(.+))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 const std::string id = req.matches[1];
                 if (!responses_.erase(id)) return send_error(res, response_not_found(id));
                 send_json(res, 200, {{"id", id}, {"object", "response"}, {"deleted", true}});
               });
  http_.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    handle_messages(req, res, /*count_tokens=*/false);
  });
  http_.Post("/v1/messages/count_tokens",
             [this](const httplib::Request& req, httplib::Response& res) {
               handle_messages(req, res, /*count_tokens=*/true);
             });
  http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handle_tokenize(req, res);
  });
  http_.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    handle_embeddings(req, res);
  });
  for (const char* path : {"/v1/rerank", "/rerank"}) {
    http_.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      handle_rerank(req, res);
    });
  }
  http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handle_detokenize(req, res);
  });
}

void Server::handle_generation(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  if (config_.embedding) return send_error(res, generation_refused());
  // Parsed once, keys in order (the order a model writes a schema's properties in).
  auto body = parse_json_body<nlohmann::ordered_json>(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  const nlohmann::ordered_json& j = std::get<nlohmann::ordered_json>(body);
  if (auto e = check_model(j, model_)) return send_error(res, *e);
  ParseResult parsed =
      kind == ApiKind::kChat ? parse_chat_request(j, model_) : parse_completion_request(j, model_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  if (const std::string tag = req.get_header_value("X-Sluice-Route-Id"); !tag.empty()) {
    uint64_t id = 0;
    const auto [end, ec] = std::from_chars(tag.data(), tag.data() + tag.size(), id);
    const auto& prompts = std::get<CompletionRequest>(parsed).prompts;
    if (ec == std::errc() && end == tag.data() + tag.size() && !prompts.empty()) {
      routes_.record(id, prompts.front());
    }
  }
  CompletionRequest& request = std::get<CompletionRequest>(parsed);
  auto kv = parse_kv_transfer_params(j);
  if (auto* e = std::get_if<ApiError>(&kv)) return send_error(res, *e);
  const std::optional<KvTransferRequest>& transfer = std::get<std::optional<KvTransferRequest>>(kv);
  GenerationExtras extras;
  if (kv_tiers_ && bridge_.ready()) {
    if (transfer) {
      if (auto e = kv_tiers_->check(*transfer, request.stream)) return send_error(res, *e);
    }
    auto imports = kv_tiers_->prepare(request.prompts, transfer ? &*transfer : nullptr);
    if (auto* e = std::get_if<ApiError>(&imports)) return send_error(res, *e);
    extras.imports = std::move(std::get<std::vector<PrefixImport>>(imports));
    if (transfer && transfer->do_remote_decode) {
      if (request.prompts.size() != 1 || request.n != 1) {
        return send_error(res, bad_request("a prefill request (do_remote_decode) has one prompt "
                                           "and n = 1",
                                           "kv_transfer_params"));
      }
      extras.pin_prompt = true;
      const KvTiers* tiers = kv_tiers_.get();
      extras.decorate = [tiers](const RequestChannel& done, nlohmann::ordered_json& answer) {
        answer["kv_transfer_params"] = tiers->transfer_params(done);
      };
    }
  }
  serve_generation(std::move(request), model_, bridge_, metrics_, res, std::move(extras));
}

// POST /v1/responses: converted to a chat request (responses_api.h) and served like one.
void Server::handle_responses(const httplib::Request& req, httplib::Response& res) {
  if (config_.embedding) return send_error(res, generation_refused());
  // Parsed once, keys in order (the order a model writes a schema's properties in).
  auto body = parse_json_body<nlohmann::ordered_json>(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  const nlohmann::ordered_json& ordered = std::get<nlohmann::ordered_json>(body);
  if (auto e = check_model(ordered, model_)) return send_error(res, *e);
  auto converted = parse_responses_request(ordered, responses_);
  if (auto* e = std::get_if<ApiError>(&converted)) return send_error(res, *e);
  ResponsesRequest& rr = std::get<ResponsesRequest>(converted);
  ParseResult parsed = parse_chat_request(rr.chat_body, model_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  GenerationExtras extras;
  extras.writer = make_responses_writer(rr, model_.name, *model_.tokenizer, responses_);
  serve_generation(std::move(std::get<CompletionRequest>(parsed)), model_, bridge_, metrics_, res,
                   std::move(extras));
}

// POST /v1/messages and /v1/messages/count_tokens (messages_api.h).
void Server::handle_messages(const httplib::Request& req, httplib::Response& res,
                             bool count_tokens) {
  if (config_.embedding && !count_tokens)
    return http::send_anthropic_error(res, generation_refused());
  auto body = parse_json_body<nlohmann::ordered_json>(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return http::send_anthropic_error(res, *e);
  const nlohmann::ordered_json& ordered = std::get<nlohmann::ordered_json>(body);
  if (auto e = check_model(ordered, model_)) return http::send_anthropic_error(res, *e);
  auto converted = messages_to_chat(ordered, count_tokens);
  if (auto* e = std::get_if<ApiError>(&converted)) return http::send_anthropic_error(res, *e);
  const nlohmann::ordered_json& chat = std::get<nlohmann::ordered_json>(converted);
  if (count_tokens) {
    auto t = parse_tokenize_request(chat, model_);
    if (auto* e = std::get_if<ApiError>(&t)) return http::send_anthropic_error(res, *e);
    return send_json(res, 200, {{"input_tokens", std::get<TokenizeResult>(t).tokens.size()}});
  }
  ParseResult parsed = parse_chat_request(chat, model_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return http::send_anthropic_error(res, *e);
  CompletionRequest& request = std::get<CompletionRequest>(parsed);
  GenerationExtras extras;
  extras.writer = make_messages_writer(model_.name, request.params.stop);
  serve_generation(std::move(request), model_, bridge_, metrics_, res, std::move(extras));
}

void Server::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  auto body = parse_json_body<nlohmann::ordered_json>(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  const nlohmann::ordered_json& j = std::get<nlohmann::ordered_json>(body);
  if (auto e = check_model(j, model_)) return send_error(res, *e);
  auto result = parse_tokenize_request(j, model_);
  if (auto* e = std::get_if<ApiError>(&result)) return send_error(res, *e);
  const TokenizeResult& t = std::get<TokenizeResult>(result);
  nlohmann::ordered_json out;
  out["tokens"] = t.tokens;
  out["count"] = t.tokens.size();
  out["max_model_len"] = model_.n_ctx;
  if (t.with_pieces) out["pieces"] = t.pieces;
  send_json(res, 200, out);
}

// POST /v1/embeddings: the inputs tokenized (texts with the vocabulary's special tokens: [CLS]
// .. [SEP] for bert), pooled by the engine (all of them, and other requests' waiting inputs,
// batched: EngineBridge::embed), normalized (after the dimensions cut).
void Server::handle_embeddings(const httplib::Request& req, httplib::Response& res) {
  if (!config_.embedding) return send_error(res, embeddings_refused());
  auto body = parse_json_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  const nlohmann::json& j = std::get<nlohmann::json>(body);
  if (auto e = check_model(j, model_)) return send_error(res, *e);
  auto parsed = parse_embeddings_request(j);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const EmbeddingsRequest& r = std::get<EmbeddingsRequest>(parsed);
  if (served_pooling_ == Pooling::kRank) {
    return send_error(res, bad_request("the served model is a reranker (rank pooling): use "
                                       "/v1/rerank, or start it with --pooling cls or mean"));
  }
  if (r.dimensions > served_width_) {
    return send_error(
        res, bad_request("'dimensions' is " + std::to_string(r.dimensions) +
                             "; the model's embeddings have " + std::to_string(served_width_),
                         "dimensions"));
  }
  std::vector<std::vector<int32_t>> inputs;
  int64_t n_tokens = 0;
  for (const EmbeddingsRequest::Input& in : r.inputs) {
    if (in.tokens) {
      inputs.push_back(in.ids);
    } else {
      Result<std::vector<TokenId>> ids = model_.tokenizer->encode(in.text, EncodeOptions{});
      if (!ids.ok()) {
        return send_error(res, bad_request("cannot tokenize 'input': " + ids.message(), "input"));
      }
      inputs.push_back(std::move(*ids));
    }
    n_tokens += int64_t(inputs.back().size());
  }
  auto vecs = bridge_.embed(std::move(inputs));
  if (auto* e = std::get_if<ApiError>(&vecs)) return send_error(res, *e);
  std::vector<std::vector<float>>& v = std::get<std::vector<std::vector<float>>>(vecs);
  for (std::vector<float>& x : v) x = normalize_embedding(x, r.dimensions);
  send_json(res, 200, embeddings_response(model_.name, v, r.base64, n_tokens));
}

// POST /v1/rerank, /rerank: each document joined to the query as llama.cpp's server does
// (BOS query EOS/SEP document EOS/SEP per the vocabulary: [CLS] q [SEP] d [SEP] for bert), its
// score the first output of the rank head.
void Server::handle_rerank(const httplib::Request& req, httplib::Response& res) {
  if (!config_.embedding) return send_error(res, embeddings_refused());
  auto body = parse_json_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  const nlohmann::json& j = std::get<nlohmann::json>(body);
  if (auto e = check_model(j, model_)) return send_error(res, *e);
  auto parsed = parse_rerank_request(j);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const RerankRequest& r = std::get<RerankRequest>(parsed);
  if (served_pooling_ != Pooling::kRank) {
    return send_error(res, bad_request(std::string("rerank needs a reranker (rank pooling); the "
                                                   "served model pools with '") +
                                       pooling_name(served_pooling_) +
                                       "' (start sluice serve with --pooling rank on a model "
                                       "with a classifier head)"));
  }
  Result<std::vector<TokenId>> query = model_.tokenizer->encode(r.query, EncodeOptions{});
  if (!query.ok()) {
    return send_error(res, bad_request("cannot tokenize 'query': " + query.message(), "query"));
  }
  const std::vector<int32_t>& q = *query;
  std::vector<std::vector<int32_t>> inputs;
  int64_t n_tokens = 0;
  for (const std::string& doc : r.documents) {
    EncodeOptions eo;
    eo.add_bos = false;  // the query brought it; the document keeps its EOS / SEP
    Result<std::vector<TokenId>> d = model_.tokenizer->encode(doc, eo);
    if (!d.ok())
      return send_error(res,
                        bad_request("cannot tokenize 'documents': " + d.message(), "documents"));
    std::vector<int32_t> pair = q;
    pair.insert(pair.end(), d->begin(), d->end());
    n_tokens += int64_t(pair.size());
    inputs.push_back(std::move(pair));
  }
  auto vecs = bridge_.embed(std::move(inputs));
  if (auto* e = std::get_if<ApiError>(&vecs)) return send_error(res, *e);
  const std::vector<std::vector<float>>& v = std::get<std::vector<std::vector<float>>>(vecs);
  std::vector<float> scores;
  for (const std::vector<float>& x : v) scores.push_back(x.empty() ? 0.0f : x[0]);
  send_json(res, 200, rerank_response(model_.name, r, scores, n_tokens));
}

void Server::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  auto body = parse_json_body<nlohmann::ordered_json>(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
  const nlohmann::ordered_json& j = std::get<nlohmann::ordered_json>(body);
  if (auto e = check_model(j, model_)) return send_error(res, *e);
  auto result = parse_detokenize_request(j, model_);
  if (auto* e = std::get_if<ApiError>(&result)) return send_error(res, *e);
  send_json(res, 200, {{"prompt", std::get<std::string>(result)}});
}

// GET /v1/cache/routes?ids=1,2,3 ->
//   {"routes": [{"id": 1, "prompt_tokens": 812, "cached_tokens": 800}, ...]}
// For each id this server remembers (RouteLog), how many leading tokens of its prompt are
// still in the prefix cache now (full blocks). Ids it does not know are left out.
void Server::handle_cache_routes(const httplib::Request& req, httplib::Response& res) {
  const std::optional<std::vector<uint64_t>> parsed = parse_route_ids(req.get_param_value("ids"));
  if (!parsed) {
    return send_error(res, bad_request("'ids' must be a comma-separated list of integers", "ids"));
  }
  const std::vector<uint64_t>& ids = *parsed;
  // Shared with the probe: a probe that runs after we gave up must not write into our frame.
  struct Probe {
    std::vector<std::pair<uint64_t, RouteLog::Prompt>> prompts;
    std::vector<int32_t> cached;
  };
  auto probe = std::make_shared<Probe>();
  probe->prompts = routes_.find(ids);
  probe->cached.assign(probe->prompts.size(), 0);
  const bool ran = probe->prompts.empty() ||
                   bridge_.call(
                       [probe](const Engine& engine) {
                         for (size_t i = 0; i < probe->prompts.size(); ++i) {
                           probe->cached[i] =
                               engine.kv().n_cached_prefix_tokens(*probe->prompts[i].second);
                         }
                       },
                       10000);
  const auto& prompts = probe->prompts;
  const auto& cached = probe->cached;
  if (!ran) {
    ApiError e =
        status_error(503, "the engine did not answer", "service_unavailable", "engine_busy");
    e.retry_after_s = 1;
    return send_error(res, e);
  }
  nlohmann::ordered_json routes = nlohmann::ordered_json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    routes.push_back({{"id", prompts[i].first},
                      {"prompt_tokens", prompts[i].second->size()},
                      {"cached_tokens", cached[i]}});
  }
  send_json(res, 200, {{"routes", std::move(routes)}});
}

void Server::stop_accepting() {
  if (stopped_accepting_) return;
  stopped_accepting_ = true;
  bridge_.close_admission();
  if (!listener_.joinable()) return;
  // httplib's stop() is a no-op until its accept loop runs; the listener thread starts it.
  for (int i = 0; i < 2000 && !http_.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  http_.stop();
}

void Server::cancel_all() {
  bridge_.cancel_all("the server is shutting down");
}

void Server::join() {
  if (joined_) return;
  joined_ = true;
  if (listener_.joinable()) listener_.join();  // returns once every connection has closed
  bridge_.stop();
}

void Server::shutdown(double grace_s) {
  if (joined_) return;
  stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (bridge_.n_active() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  cancel_all();
  join();
}

}  // namespace sluice::server
