// The router's HTTP/1.1 client to its backends, over plain sockets.
//
// Why not httplib's client: a proxy must know the backend's status and headers before it answers
// its own client, and then pass the body on piece by piece as it arrives; httplib's client hands
// the body to callbacks inside one blocking call, so the response head could not be answered
// before the whole body was read. Here a request is three calls the proxy interleaves with its
// own answer:
//
//   conn->write_request(bytes)           send the request (head + body)
//   conn->read_head(wait)                status line and headers
//   conn->read_body(out, wait)  ...      the body, de-chunked, as it arrives; kEnd at its end
//
// Every wait also watches the proxy's client socket (Wait::client_fd): a client that hangs up
// ends the wait with kClientGone, and the proxy closes the backend connection, which the backend
// sees as its own client hanging up (sluice serve aborts the generation).
//
// Connections are kept alive and reused (ConnectionPool): a fresh TCP connection per request
// would cost a handshake on the TTFT path and a TIME_WAIT socket per request.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sluice::router {

// A backend's address: http://HOST:PORT (https is not supported).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string url;  // normalized: http://HOST:PORT
};
Result<Endpoint> parse_backend_url(std::string_view url);

// What a read waits for besides its own socket.
struct Wait {
  int timeout_ms = 600000;                  // longest silence from the backend
  int client_fd = -1;                       // hang-up here ends the wait (kClientGone)
  const std::atomic<bool>* stop = nullptr;  // set: give up within 100 ms (kError)
};

struct ResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // as received, in order
  std::string header(std::string_view name) const;           // case-insensitive; "" if absent
};

enum class ReadResult { kData, kEnd, kError, kTimeout, kClientGone };

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> open(const Endpoint& ep, int timeout_ms);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends all of `bytes` (a full request). Fails if the peer is gone.
  Status write_request(std::string_view bytes, int timeout_ms);
  // Reads the status line and headers; the error says what went wrong. `result` (optional)
  // tells kClientGone / kTimeout apart from other failures.
  Result<ResponseHead> read_head(const Wait& wait, ReadResult* result = nullptr);
  // Appends the next piece of the body (de-chunked) to `out`: kData (something was appended),
  // kEnd (the body is complete), or a failure. A body cut short is kError, never kEnd.
  ReadResult read_body(std::string& out, const Wait& wait);
  // Reads the rest of the body into `out` (at most `limit` bytes more).
  ReadResult read_all(std::string& out, const Wait& wait, size_t limit = size_t(64) << 20);

  // The response was read to its end and the backend keeps the connection open.
  bool reusable() const { return body_state_ == BodyState::kDone && keep_alive_; }
  // The peer closed (or sent unexpected bytes) while the connection sat idle.
  bool idle_broken() const;
  int fd() const { return fd_; }

 private:
  explicit Connection(int fd) : fd_(fd) {}
  enum class BodyState {
    kNone,
    kLength,
    kUntilClose,
    kChunkSize,
    kChunkData,
    kChunkCrlf,
    kTrailers,
    kDone
  };
  Result<ResponseHead> read_one_head(const Wait& wait, ReadResult* result);
  // Waits until the socket is readable and reads into the buffer.
  ReadResult fill(const Wait& wait);
  // Takes one line (without CR LF) from the buffer; false if no full line is buffered.
  bool take_line(std::string& line);

  int fd_;
  std::string buf_;  // received, not yet consumed: buf_[pos_, size)
  size_t pos_ = 0;
  BodyState body_state_ = BodyState::kNone;
  uint64_t left_ = 0;  // bytes left of the body (kLength) or of the chunk (kChunkData)
  bool keep_alive_ = true;
};

// Idle keep-alive connections to one backend. Thread-safe.
class ConnectionPool {
 public:
  explicit ConnectionPool(Endpoint ep, size_t max_idle = 256)
      : ep_(std::move(ep)), max_idle_(max_idle) {}
  // An idle connection (checked for a peer that hung up), or a new one.
  Result<std::unique_ptr<Connection>> acquire(int connect_timeout_ms);
  // Returns a connection whose response was fully read; others are closed.
  void release(std::unique_ptr<Connection> c);
  const Endpoint& endpoint() const { return ep_; }

 private:
  using Clock = std::chrono::steady_clock;
  const Endpoint ep_;
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<std::pair<std::unique_ptr<Connection>, Clock::time_point>> idle_;
};

// One whole request/response over a pooled connection (health checks, model lists).
struct SimpleResponse {
  int status = 0;
  std::string body;
};
Result<SimpleResponse> simple_request(ConnectionPool& pool, std::string_view method,
                                      std::string_view target, int timeout_ms,
                                      const std::atomic<bool>* stop = nullptr);

}  // namespace sluice::router
