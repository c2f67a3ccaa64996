// The HTTP transport of `sluice serve` and `sluice router`: cpp-httplib's router and request
// parser over a connection layer of our own, sized for hundreds of long-lived streams on a small
// machine.
//
// Why not httplib's defaults: its ThreadPool has max(8, cores - 1) workers and a connection
// holds its worker for as long as it is open, so the 9th concurrent SSE stream would wait for
// one of the first 8 to finish; its listen backlog is 5; its sockets have Nagle's algorithm on
// (a token chunk would wait for a delayed ACK); and a handler cannot see its socket, so a
// client that hangs up is only noticed when a write fails.
//
// What this layer does instead:
//   * ConnectionThreads: one thread per open connection, created on demand up to
//     HttpLimits::max_threads (connections beyond it wait in the accept queue of the pool, they
//     are not refused); idle threads exit after a few seconds, so memory returns after a burst.
//     A streaming request costs one mostly-sleeping thread (its stack is reserved, not
//     resident: about 30-60 KiB of it is touched), which is what makes 512+ concurrent
//     streams on 2 cores cheap.
//   * HttpServer::process_and_close_socket: the keep-alive loop (keep-alive timeout, request
//     count, prompt exit on stop()), TCP_NODELAY, and a ConnectionStream with poll()-based
//     read/write timeouts, a header byte limit (431) with a header deadline (slow-loris), and
//     MSG_NOSIGNAL writes. The handler thread knows its socket (current_connection_socket()),
//     which the engine thread watches for hang-ups.
//   * Accept-Encoding is dropped from every request: SSE must reach the client event by event
//     (httplib 0.11 would gzip text/event-stream and hold it in the compressor), and JSON
//     answers are small. Whether it asked for gzip is kept (current_request_accepts_gzip) for
//     the web app's precompressed assets.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "http/api_error.h"

namespace sluice::http {

// Answers `res` with a JSON body / an OpenAI-shaped error (and Retry-After when it has one).
void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body);
void send_error(httplib::Response& res, const ApiError& e);
// The same in Anthropic's shape (ApiError::to_anthropic_json).
void send_anthropic_error(httplib::Response& res, const ApiError& e);
// send_error in the shape the request's API speaks: Anthropic's on /v1/messages* (what its
// clients parse), OpenAI's elsewhere. Used by sluice serve and sluice router alike.
void send_error_for(const httplib::Request& req, httplib::Response& res, const ApiError& e);

// A handler that throws answers 500 with the exception's message (logged as "<who>: handler
// failed: ..."), never a dropped connection.
void answer_exceptions_with_500(httplib::Server& http, const std::string& who);

// True when the request declares a body over `limit` bytes (answer 413 before reading it:
// httplib would read and discard all of it first).
bool declares_body_over(const httplib::Request& req, size_t limit);
// Whether the request carries API key `key`: "Authorization: Bearer KEY" (OpenAI clients) or
// "x-api-key: KEY" (Anthropic clients), compared in time independent of where they differ.
bool api_key_matches(const httplib::Request& req, const std::string& key);

// True when the request declares a body (Content-Length > 0 or a Transfer-Encoding).
bool declares_body(const httplib::Request& req);

// A response written before the request's body was read (a refusal in a pre-routing handler)
// must not leave the connection open: what follows on it is that body, not a request. This
// answers with "Connection: close" and makes the connection loop close the socket after the
// response. Call on the connection's thread. Every refusal that does not read the body uses it
// when the request has one; responses of routed handlers (whose bodies httplib read) keep the
// connection alive.
void close_after_response(httplib::Response& res);

struct HttpLimits {
  size_t max_body_bytes = size_t(16) << 20;    // larger bodies: 413
  size_t max_header_bytes = size_t(64) << 10;  // request line + headers; larger: 431
  int read_timeout_s = 30;       // per read while receiving a request; whole header section too
  int write_timeout_s = 30;      // per write: a client that stops reading is dropped after it
  int keep_alive_timeout_s = 5;  // idle time between requests on one connection
  int keep_alive_max_requests = 1000;
  int max_threads = 4096;          // connection threads (= concurrent connections served)
  int min_idle_threads = 4;        // kept warm after a burst
  int idle_thread_exit_ms = 2000;  // an idle thread above min_idle_threads exits after this
  int listen_backlog = 1024;       // capped by net.core.somaxconn
};

// Live counts of the connection layer (for /metrics).
struct ConnectionStats {
  std::atomic<int> threads{0};  // connection threads alive
  std::atomic<int> busy{0};     // threads serving a connection
  std::atomic<int> queued{0};   // accepted connections waiting for a thread
  std::atomic<uint64_t> accepted{0};
};

// The socket of the connection the calling thread serves, or -1 outside a connection thread.
// A connection thread serves exactly one connection from accept to close, so this is a
// property of the thread for that whole time (set by HttpServer, read by handlers).
int current_connection_socket();

// Whether the request the calling thread is answering sent `Accept-Encoding: ... gzip`. The
// header itself is dropped before routing (above), so only handlers that answer with bytes they
// compressed themselves (the web app's assets, webui.h) use this.
bool current_request_accepts_gzip();

// httplib TaskQueue: runs each accepted connection on its own thread (see the file comment).
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(const HttpLimits& limits, std::shared_ptr<ConnectionStats> stats);
  ~ConnectionThreads() override;
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs every queued connection to its end, then joins all threads.
  void shutdown() override;

 private:
  void worker_main(uint64_t id);
  void spawn_locked();  // one more worker; mu_ held
  std::vector<std::thread> take_exited_locked();

  const HttpLimits limits_;
  std::shared_ptr<ConnectionStats> stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::unordered_map<uint64_t, std::thread> threads_;
  std::vector<std::thread> exited_;  // finished workers, joined by the next enqueue/shutdown
  uint64_t next_id_ = 0;
  int n_idle_ = 0;
  bool shutdown_ = false;
};

class HttpServer final : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits);

  // Binds host:port (port 0: an ephemeral port) with the configured backlog. Returns the port.
  Result<int> bind_port(const std::string& host, int port);
  // Accepts and serves until stop(); returns once every connection has closed.
  void serve();

  const ConnectionStats& stats() const { return *stats_; }
  const HttpLimits& limits() const { return limits_; }

 private:
  // Overrides httplib's per-connection loop (a private virtual in httplib 0.11).
  bool process_and_close_socket(socket_t sock) override;

  const HttpLimits limits_;
  std::shared_ptr<ConnectionStats> stats_;
};

}  // namespace sluice::http
