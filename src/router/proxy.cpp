#include "router/proxy.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>

#include "base/log.h"
#include "base/strings.h"
#include "http/api_error.h"
#include "http/webui.h"
#include "router/routing_key.h"

namespace sluice::router {
namespace {

using HandlerResponse = httplib::Server::HandlerResponse;
using http::ApiError;
using http::send_error;
using http::send_json;

using http::status_error;

// Headers that describe one hop, not the message (RFC 9110 7.6.1), plus what httplib adds to a
// parsed request and the router's own tag.
bool hop_by_hop(std::string_view name) {
  static constexpr const char* kNames[] = {"Connection",
                                           "Keep-Alive",
                                           "Transfer-Encoding",
                                           "TE",
                                           "Upgrade",
                                           "Proxy-Connection",
                                           "Content-Length",
                                           "Host",
                                           "Accept-Encoding",
                                           "REMOTE_ADDR",
                                           "REMOTE_PORT",
                                           "LOCAL_ADDR",
                                           "LOCAL_PORT",
                                           "X-Sluice-Route-Id",
                                           "Expect"};
  for (const char* n : kNames)
    if (iequals_ascii(name, n)) return true;
  return false;
}

// The last "key": <integer> in a stream of JSON text, across chunk boundaries.
class UsageScanner {
 public:
  void feed(std::string_view data) {
    text_.append(data);
    scan("\"prompt_tokens\":", prompt_tokens);
    scan("\"cached_tokens\":", cached_tokens);
    if (text_.size() > 64) text_.erase(0, text_.size() - 64);
  }
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;

 private:
  void scan(std::string_view key, int64_t& out) {
    size_t at = text_.rfind(key);
    if (at == std::string::npos) return;
    at += key.size();
    while (at < text_.size() && text_[at] == ' ') ++at;
    size_t end = at;
    while (end < text_.size() && std::isdigit(static_cast<unsigned char>(text_[end]))) ++end;
    if (end == at || end == text_.size()) return;  // no number, or it may continue
    out = std::stoll(text_.substr(at, end - at));
  }
  std::string text_;
};

// usage of a whole JSON answer: prompt_tokens and prompt_tokens_details.cached_tokens.
std::pair<int64_t, int64_t> usage_of(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return {-1, -1};
  const nlohmann::json& u = j["usage"];
  const int64_t prompt = u.value("prompt_tokens", int64_t(-1));
  int64_t cached = -1;
  if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
    cached = u["prompt_tokens_details"].value("cached_tokens", int64_t(-1));
  return {prompt, cached};
}

// The id of a Responses answer in its first bytes: a whole answer's top-level "id", or the
// stream's response.created event's response.id ("resp_..."; "" until seen).
std::string response_id_in(std::string_view head) {
  constexpr std::string_view kKey = "\"id\":\"resp_";
  const size_t at = head.find(kKey);
  if (at == std::string_view::npos) return "";
  const size_t start = at + 6;
  const size_t end = head.find('"', start);
  if (end == std::string_view::npos || end - start > 128) return "";
  return std::string(head.substr(start, end - start));
}

// One streamed answer being passed on (owned by the response's content provider).
struct StreamState {
  std::unique_ptr<InFlight> in_flight;
  std::unique_ptr<Connection> conn;
  Wait wait;
  bool sse = false;
  bool complete = false;
  std::string last2;  // the last two bytes forwarded (does an SSE event end there?)
  UsageScanner usage;
  std::string head;  // Responses streams: their first bytes, until the response id is seen
  std::function<void(const std::string&)> on_response_id;
};

// `object_text` (a JSON object's text) with `fields` ("\"k\":v,...") added at its end. A key
// the object has already is then given twice; JSON parsers keep the last (sluice serve's
// does), so these override the client's while the rest keeps its bytes (and key order, which
// tool and schema rendering depend on).
std::string with_fields(const std::string& object_text, const std::string& fields) {
  const size_t open = object_text.find('{');
  const size_t close = object_text.rfind('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return object_text;
  bool empty = true;
  for (size_t i = open + 1; i < close && empty; ++i)
    empty = std::isspace(static_cast<unsigned char>(object_text[i])) != 0;
  return object_text.substr(0, close) + (empty ? "" : ",") + fields + object_text.substr(close);
}

}  // namespace

// Keeps a picked backend's load counted until the answer is over (also for streams, whose
// last piece is sent after the handler returned).
struct InFlight {
  Backends* backends;
  int backend;
  ~InFlight() { backends->finish(backend); }
};

RouterServer::RouterServer(RouterConfig config) : config_(std::move(config)), http_(config_.http) {
  register_routes();
}

RouterServer::~RouterServer() {
  shutdown();
}

Result<int> RouterServer::start() {
  if (config_.backends.empty()) return make_error("no backend (give --backend URL at least once)");
  std::vector<Endpoint> eps;
  for (const std::string& url : config_.backends) {
    SLUICE_ASSIGN_OR_RETURN(Endpoint ep, parse_backend_url(url));
    eps.push_back(std::move(ep));
  }
  // The key clients give the router is the backends' too: the model-list poll sends it.
  BackendsOptions bo = config_.backends_options;
  if (bo.api_key.empty()) bo.api_key = config_.api_key;
  backends_ = std::make_unique<Backends>(std::move(eps), config_.policy, bo);
  if (!config_.prefill.empty()) {
    std::vector<Endpoint> peps;
    for (const std::string& url : config_.prefill) {
      SLUICE_ASSIGN_OR_RETURN(Endpoint ep, parse_backend_url(url));
      peps.push_back(std::move(ep));
    }
    prefill_ = std::make_unique<Backends>(std::move(peps), config_.policy, bo);
    prefill_->poll_once(&stop_);
  }
  std::signal(SIGPIPE, SIG_IGN);
  backends_->poll_once(&stop_);
  SLUICE_ASSIGN_OR_RETURN(port_, http_.bind_port(config_.host, config_.port));
  listener_ = std::thread([this] { http_.serve(); });
  health_ = std::thread([this] { health_loop(); });
  started_ = true;
  return port_;
}

void RouterServer::health_loop() {
  const auto interval = std::chrono::duration<double>(config_.health_interval_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval, [this] { return stop_.load(); });
    if (stop_) break;
    lock.unlock();
    backends_->poll_once(&stop_);
    if (prefill_) prefill_->poll_once(&stop_);
    lock.lock();
  }
}

void RouterServer::shutdown() {
  if (stopped_ || !started_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (int i = 0; i < 2000 && !http_.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  http_.stop();
  if (listener_.joinable()) listener_.join();
  if (health_.joinable()) health_.join();
}

void RouterServer::remember_response(const std::string& id, int backend) {
  constexpr size_t kMaxRemembered = 10000;
  std::lock_guard<std::mutex> lock(responses_mu_);
  if (auto it = responses_.find(id); it != responses_.end()) {
    responses_lru_.erase(it->second);
    responses_.erase(it);
  }
  responses_lru_.emplace_front(id, backend);
  responses_[id] = responses_lru_.begin();
  while (responses_lru_.size() > kMaxRemembered) {
    responses_.erase(responses_lru_.back().first);
    responses_lru_.pop_back();
  }
}

std::optional<int> RouterServer::response_backend(const std::string& id) {
  std::lock_guard<std::mutex> lock(responses_mu_);
  auto it = responses_.find(id);
  if (it == responses_.end()) return std::nullopt;
  responses_lru_.splice(responses_lru_.begin(), responses_lru_, it->second);
  return it->second->second;
}

void RouterServer::register_routes() {
  if (!config_.api_key.empty()) {
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health" || req.path == "/metrics") return HandlerResponse::Unhandled;
      // The web app is open, like a login page: it asks for the key and sends it.
      if (config_.webui && http::is_web_app_path(req.path)) return HandlerResponse::Unhandled;
      if (http::api_key_matches(req, config_.api_key)) return HandlerResponse::Unhandled;
      // Refused before the body is read: a request with one closes its connection.
      if (http::declares_body(req)) http::close_after_response(res);
      res.set_header("WWW-Authenticate", "Bearer");
      http::send_error_for(
          req, res,
          status_error(401,
                       "invalid or missing API key (send 'Authorization: Bearer KEY' "
                       "or 'x-api-key: KEY')",
                       "authentication_error", "invalid_api_key"));
      return HandlerResponse::Handled;
    });
  }
  http_.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return HandlerResponse::Unhandled;
        if (res.status == 404) {
          http::send_error_for(req, res,
                               status_error(404, "no route for " + req.method + " " + req.path,
                                            "not_found_error", "not_found"));
        } else {
          http::send_error_for(req, res,
                               status_error(res.status, "the HTTP request is malformed",
                                            "invalid_request_error", "bad_request"));
        }
        return HandlerResponse::Handled;
      }));
  http::answer_exceptions_with_500(http_, "router");
  if (config_.webui) {
    http_.Get("/", http::serve_web_asset);
    http_.Get(R"(/webui/.+)", http::serve_web_asset);
  }
  http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    // P/D: the decode workers are the ones that must answer (a prefill outage only costs
    // recomputation).
    const int n = backends_->n_healthy();
    if (n > 0) {
      send_json(res, 200, {{"status", "ok"}, {"healthy_backends", n}});
      return;
    }
    ApiError e = status_error(503, "no healthy backend", "service_unavailable", "no_backend");
    e.retry_after_s = 1;
    send_error(res, e);
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string page = backends_->render_metrics(prefill_.get());
    if (prefill_) {
      auto counter = [&page](const char* name, const char* help, double v) {
        page += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" +
                name + " " + std::to_string(v) + "\n";
      };
      counter("sluice_router_pd_prefills_total",
              "Generations whose prompt a prefill worker computed.", double(pd_prefills_.load()));
      counter("sluice_router_pd_fallbacks_total",
              "Generations whose prefill failed; the decode worker computed the prompt.",
              double(pd_fallbacks_.load()));
      counter("sluice_router_pd_prefill_seconds_total", "Time in prefill requests (router side).",
              double(pd_prefill_us_.load()) * 1e-6);
    }
    res.set_content(page, "text/plain; version=0.0.4; charset=utf-8");
  });
  http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, backends_->models_json());
  });
  http_.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (auto card = backends_->model_card(id)) return send_json(res, 200, *card);
    ApiError e = status_error(404, "the model '" + id + "' does not exist", "invalid_request_error",
                              "model_not_found");
    e.param = "model";
    send_error(res, e);
  });
  http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    forward(req, res, Kind::kChat);
  });
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    forward(req, res, Kind::kCompletion);
  });
  http_.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    forward(req, res, Kind::kResponses);
  });
  http_.Get(R"(/v1/responses/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    forward(req, res, Kind::kStoredResponse);
  });
  http_.Delete(R"(/v1/responses/(.+))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 forward(req, res, Kind::kStoredResponse);
               });
  http_.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    forward(req, res, Kind::kMessages);
  });
  for (const char* path :
       {"/tokenize", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/rerank", "/rerank"}) {
    http_.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      forward(req, res, Kind::kOther);
    });
  }
  http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    forward(req, res, Kind::kOther);
  });
}

std::variant<RouterServer::Sent, RouterServer::SendError> RouterServer::send_to(
    Backends& backends, const Pick& p, const std::string& head, const std::string& body,
    const Wait& wait) {
  ConnectionPool& pool = backends.pool(p.backend);
  const std::string& url = pool.endpoint().url;
  Result<std::unique_ptr<Connection>> conn = pool.acquire(config_.connect_timeout_ms);
  if (!conn.ok()) {
    backends.record_failure(p.backend, /*take_out=*/true, conn.message());
    return SendError{conn.message(), ReadResult::kError};
  }
  std::string request = head + "Content-Length: " + std::to_string(body.size()) +
                        "\r\nHost: " + pool.endpoint().host + ":" +
                        std::to_string(pool.endpoint().port) + "\r\n";
  if (p.route_id) request += "X-Sluice-Route-Id: " + std::to_string(p.route_id) + "\r\n";
  request += "\r\n";
  request += body;
  if (Status st = (*conn)->write_request(request, config_.connect_timeout_ms); !st.ok()) {
    const std::string error = url + ": " + st.message();
    backends.record_failure(p.backend, false, error);
    return SendError{error, ReadResult::kError};
  }
  ReadResult why = ReadResult::kError;
  Result<ResponseHead> response = (*conn)->read_head(wait, &why);
  if (!response.ok()) {
    const std::string error = url + ": " + response.message();
    if (why != ReadResult::kClientGone) backends.record_failure(p.backend, false, error);
    return SendError{error, why};
  }
  return Sent{std::move(*conn), std::move(*response)};
}

void RouterServer::relay(const Pick& p, Sent sent, std::unique_ptr<InFlight> in_flight,
                         const Wait& wait, bool generation,
                         std::function<void(const std::string&)> on_response_id,
                         httplib::Response& res) {
  ConnectionPool& pool = backends_->pool(p.backend);
  const std::string& url = pool.endpoint().url;
  ResponseHead& head = sent.head;
  res.status = head.status;
  std::string content_type = head.header("Content-Type");
  for (const auto& [k, v] : head.headers) {
    if (!hop_by_hop(k) && !iequals_ascii(k, "Content-Type")) res.set_header(k, v);
  }
  const bool sized = !head.header("Content-Length").empty() &&
                     head.header("Transfer-Encoding").find("chunked") == std::string::npos;
  if (sized) {
    std::string out;
    const ReadResult r = sent.conn->read_all(out, wait, config_.http.max_body_bytes);
    if (r == ReadResult::kClientGone) {
      backends_->record_client_gone();
      return;
    }
    if (r != ReadResult::kEnd) {
      backends_->record_stream_error(p.backend);
      res.headers.clear();
      return send_error(res, status_error(502, "the backend " + url + " broke off its answer",
                                          "server_error", "backend_error"));
    }
    if (generation) {
      const auto [prompt, cached] = usage_of(out);
      backends_->record_usage(p.backend, prompt, cached);
    }
    if (on_response_id) on_response_id(response_id_in(std::string_view(out).substr(0, 4096)));
    pool.release(std::move(sent.conn));
    res.set_content(std::move(out), content_type.empty() ? "application/json" : content_type);
    return;
  }
  auto st = std::make_shared<StreamState>();
  st->in_flight = std::move(in_flight);
  st->conn = std::move(sent.conn);
  st->wait = wait;
  st->sse = content_type.find("text/event-stream") != std::string::npos;
  st->on_response_id = std::move(on_response_id);
  Backends* backends = backends_.get();
  const int b = p.backend;
  res.set_chunked_content_provider(
      content_type.empty() ? "application/octet-stream" : content_type,
      [st, backends, b, url, generation](size_t, httplib::DataSink& sink) {
        std::string data;
        while (true) {
          data.clear();
          const ReadResult r = st->conn->read_body(data, st->wait);
          if (r == ReadResult::kData) {
            if (generation) st->usage.feed(data);
            if (st->on_response_id) {
              // response.created carries the id in the stream's first event.
              st->head.append(data, 0, std::min<size_t>(data.size(), 4096));
              std::string id = response_id_in(st->head);
              if (!id.empty() || st->head.size() >= 4096) {
                st->on_response_id(id);
                st->on_response_id = nullptr;
                st->head.clear();
              }
            }
            st->last2.append(data, data.size() - std::min<size_t>(data.size(), 2));
            if (st->last2.size() > 2) st->last2.erase(0, st->last2.size() - 2);
            if (!sink.write(data.data(), data.size())) return false;
            continue;
          }
          if (r == ReadResult::kEnd) {
            st->complete = true;
            sink.done();
            return true;
          }
          if (r == ReadResult::kClientGone) {
            backends->record_client_gone();
            return false;
          }
          backends->record_stream_error(b);
          if (!st->sse) return false;  // cut without the last chunk: visibly incomplete
          ApiError e = status_error(502,
                                    r == ReadResult::kTimeout
                                        ? "the backend " + url + " stopped answering"
                                        : "the backend " + url + " broke off its answer",
                                    "server_error", "backend_error");
          std::string ev = st->last2 == "\n\n" || st->last2.empty() ? "" : "\n\n";
          ev += "data: " + http::to_wire(e.to_json()) + "\n\ndata: [DONE]\n\n";
          sink.write(ev.data(), ev.size());
          sink.done();
          return true;
        }
      },
      [st, backends, b, generation, pool = &pool](bool) {
        if (generation) backends->record_usage(b, st->usage.prompt_tokens, st->usage.cached_tokens);
        if (st->complete) pool->release(std::move(st->conn));
        st->conn.reset();  // closes an unfinished backend connection: the backend aborts
        st->in_flight.reset();
      });
}

std::variant<RouterServer::Route, ApiError> RouterServer::route_of(const httplib::Request& req,
                                                                   Kind kind) {
  Route route;
  if (kind == Kind::kStoredResponse) {
    const std::string id = req.matches[1];
    route.pinned = response_backend(id);
    if (!route.pinned)
      return status_error(404, "no stored response '" + id + "' on any backend",
                          "invalid_request_error", "response_not_found");
    return route;
  }
  const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return http::bad_request("the request body is not a JSON object");
  if (kind == Kind::kResponses || kind == Kind::kMessages) {
    route.info = describe_agent_request(
        body, kind == Kind::kResponses ? AgentApi::kResponses : AgentApi::kMessages);
  } else {
    route.info = describe_request(body, kind == Kind::kChat);
  }
  if (auto prev = body.find("previous_response_id");
      kind == Kind::kResponses && prev != body.end() && prev->is_string()) {
    route.pinned = response_backend(prev->get<std::string>());
    if (!route.pinned) {
      ApiError e = status_error(404,
                                "previous response '" + prev->get<std::string>() +
                                    "' was not made through this router (or is too old)",
                                "invalid_request_error", "previous_response_not_found");
      e.param = "previous_response_id";
      return e;
    }
  }
  return route;
}

void RouterServer::forward(const httplib::Request& req, httplib::Response& res, Kind kind) {
  auto routed = route_of(req, kind);
  if (auto* e = std::get_if<ApiError>(&routed)) return http::send_error_for(req, res, *e);
  const Route& route = std::get<Route>(routed);
  const RequestInfo& info = route.info;
  const bool generation = kind == Kind::kChat || kind == Kind::kCompletion ||
                          kind == Kind::kResponses || kind == Kind::kMessages;
  Wait wait;
  wait.timeout_ms = config_.upstream_timeout_s * 1000;
  wait.client_fd = http::current_connection_socket();
  wait.stop = &stop_;

  // The request as the backend gets it, but for the route tag.
  std::string headers;
  for (const auto& [k, v] : req.headers) {
    if (!hop_by_hop(k)) headers += k + ": " + v + "\r\n";
  }
  const std::string head = req.method + " " + req.target + " HTTP/1.1\r\n" + headers;
  // P/D: the prompt goes to a prefill worker first; the decode worker gets its K/V handle.
  std::string pd_body;
  if ((kind == Kind::kChat || kind == Kind::kCompletion) && prefill_) {
    bool client_gone = false;
    std::string error;
    const std::optional<std::string> params =
        prefill(req, info.model, info.key, headers, wait, client_gone, error);
    if (client_gone) {
      backends_->record_client_gone();
      return;
    }
    if (!params) {
      pd_fallbacks_.fetch_add(1);
      SLUICE_LOG(kWarn, "router: prefill failed, the decode worker computes the prompt: " + error);
    } else if (!params->empty()) {
      pd_body = with_fields(req.body, "\"kv_transfer_params\":" + *params);
    }
  }
  const std::string& body_out = pd_body.empty() ? req.body : pd_body;

  // A pinned request may go only to its backend: the others count as tried.
  std::vector<int> tried;
  if (route.pinned)
    for (int b = 0; b < backends_->size(); ++b)
      if (b != *route.pinned) tried.push_back(b);
  std::string last_error;
  std::optional<std::pair<ResponseHead, std::string>> last_5xx;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto picked = backends_->pick(route.pinned ? "" : info.model, generation ? info.key : "", tried,
                                  generation && !route.pinned);
    if (auto* e = std::get_if<ApiError>(&picked)) {
      if (attempt == 0) return http::send_error_for(req, res, *e);
      break;  // nowhere to retry
    }
    const Pick p = std::get<Pick>(picked);
    // (Not make_unique of a temporary: its destructor would count the request as finished.)
    std::unique_ptr<InFlight> in_flight(new InFlight{backends_.get(), p.backend});
    tried.push_back(p.backend);
    if (attempt > 0) backends_->record_retry(p.backend);
    auto sent = send_to(*backends_, p, head, body_out, wait);
    if (auto* f = std::get_if<SendError>(&sent)) {
      if (f->why == ReadResult::kClientGone) {
        backends_->record_client_gone();
        return;  // closing the connection tells the backend
      }
      last_error = f->message;
      if (f->why == ReadResult::kTimeout || stop_) break;  // not retried: it may still be working
      continue;
    }
    Sent& answer = std::get<Sent>(sent);
    if (answer.head.status >= 500) {
      std::string err_body;
      answer.conn->read_all(err_body, wait, size_t(1) << 20);
      last_error =
          backends_->endpoint(p.backend).url + " answered " + std::to_string(answer.head.status);
      backends_->record_failure(p.backend, false, last_error);
      last_5xx.emplace(std::move(answer.head), std::move(err_body));
      continue;
    }
    // The answer starts: from here on it is this backend's. A new Responses answer is
    // remembered with it.
    std::function<void(const std::string&)> on_id;
    if (kind == Kind::kResponses && answer.head.status == 200) {
      on_id = [this, b = p.backend](const std::string& id) {
        if (!id.empty()) remember_response(id, b);
      };
    }
    return relay(p, std::move(answer), std::move(in_flight), wait, generation, std::move(on_id),
                 res);
  }
  if (last_5xx) {
    res.status = last_5xx->first.status;
    for (const auto& [k, v] : last_5xx->first.headers) {
      if (!hop_by_hop(k) && !iequals_ascii(k, "Content-Type")) res.set_header(k, v);
    }
    const std::string ct = last_5xx->first.header("Content-Type");
    res.set_content(std::move(last_5xx->second), ct.empty() ? "application/json" : ct);
    return;
  }
  http::send_error_for(req, res,
                       status_error(502, "no backend could answer: " + last_error, "server_error",
                                    "backend_unavailable"));
}

std::optional<std::string> RouterServer::prefill(const httplib::Request& req,
                                                 const std::string& model, const std::string& key,
                                                 const std::string& headers, const Wait& wait,
                                                 bool& client_gone, std::string& error) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Timer {
    std::chrono::steady_clock::time_point t0;
    std::atomic<uint64_t>& total;
    ~Timer() {
      total.fetch_add(
          uint64_t(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                       .count()));
    }
  } timer{t0, pd_prefill_us_};
  // One token, whole answer, one choice: the worker computes the prompt and pins its blocks.
  const std::string body =
      with_fields(req.body,
                  "\"max_tokens\":1,\"max_completion_tokens\":null,\"min_tokens\":null,\"n\":1,"
                  "\"stream\":false,\"stream_options\":null,\"kv_transfer_params\":{\"do_remote_"
                  "decode\":true}");
  auto picked = prefill_->pick(model, key, {}, true);
  if (auto* e = std::get_if<ApiError>(&picked)) {
    error = "no prefill worker: " + e->message;
    return std::nullopt;
  }
  const Pick p = std::get<Pick>(picked);
  InFlight in_flight{prefill_.get(), p.backend};
  ConnectionPool& pool = prefill_->pool(p.backend);
  const std::string& url = pool.endpoint().url;
  auto sent =
      send_to(*prefill_, p, req.method + " " + req.target + " HTTP/1.1\r\n" + headers, body, wait);
  if (auto* f = std::get_if<SendError>(&sent)) {
    client_gone = f->why == ReadResult::kClientGone;
    error = f->message;
    return std::nullopt;
  }
  auto& [conn, head] = std::get<Sent>(sent);
  std::string out;
  const ReadResult r = conn->read_all(out, wait, config_.http.max_body_bytes);
  if (r == ReadResult::kClientGone) {
    client_gone = true;
    return std::nullopt;
  }
  if (r != ReadResult::kEnd) {
    error = url + " broke off its prefill answer";
    prefill_->record_stream_error(p.backend);
    return std::nullopt;
  }
  pool.release(std::move(conn));
  if (head.status != 200) {
    // The request itself is bad (4xx): the decode worker will say so to the client, in its
    // own words. A 5xx is the worker's failure.
    error = url + " answered " + std::to_string(head.status) + ": " + out.substr(0, 300);
    if (head.status >= 500) prefill_->record_failure(p.backend, false, error);
    return std::nullopt;
  }
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  const auto [prompt, cached] = usage_of(out);
  prefill_->record_usage(p.backend, prompt, cached);
  if (!j.is_object() || !j.contains("kv_transfer_params") ||
      !(j["kv_transfer_params"].is_object() || j["kv_transfer_params"].is_null())) {
    error = url + " answered without kv_transfer_params (is it `sluice serve --role prefill`?)";
    return std::nullopt;
  }
  pd_prefills_.fetch_add(1);
  // null: no full block to hand over (a prompt shorter than a block).
  if (j["kv_transfer_params"].is_null()) return std::string();
  return j["kv_transfer_params"].dump();
}

}  // namespace sluice::router
