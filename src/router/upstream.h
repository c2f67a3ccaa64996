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
#include <optional>
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

// The bytes-only half of Connection: HTTP/1.1 response framing over a receive buffer (status
// line, headers, Content-Length / chunked / until-close bodies), no sockets, so that it can be
// tested and fuzzed on its own (fuzz/http_response_fuzz.cpp). Connection feeds it what recv()
// returns and asks it for heads and body pieces.
class ResponseParser {
 public:
  static constexpr size_t kMaxHeadBytes = size_t(64) << 10;

  enum class Step { kData, kEnd, kNeedMore, kError };

  // Appends received bytes (and drops the consumed ones first when everything was consumed).
  void feed(std::string_view bytes);
  // A new request was sent: the next thing expected is a response head.
  void expect_head() { body_state_ = BodyState::kNone; }

  // The next response head (interim 1xx ones included), once "\r\n\r\n" is buffered:
  // nullopt means more bytes are needed (head_too_large() says when to stop waiting).
  std::optional<Result<ResponseHead>> take_head();
  // More than kMaxHeadBytes are buffered without a complete head.
  bool head_too_large() const { return buf_.size() - pos_ > kMaxHeadBytes; }
  // Appends the buffered body bytes (de-chunked) to `out`: kData (something was appended),
  // kEnd (the body is complete), kNeedMore (nothing buffered to append) or kError (bad framing,
  // or no head was read; `out` untouched). Bytes before bad framing come first as kData, so what
  // is passed on does not depend on how the bytes arrived; the error follows at the next call.
  Step take_body(std::string& out);
  // The peer closed the connection: kEnd for a body that runs until close, else kError (cut
  // short).
  Step at_close();

  bool done() const { return body_state_ == BodyState::kDone; }
  // Received bytes not consumed yet. After a complete response there should be none (one
  // request at a time per connection): any are the backend's garbage, not the next answer.
  size_t buffered() const { return buf_.size() - pos_; }
  bool keep_alive() const { return keep_alive_; }

 private:
  enum class BodyState {
    kNone,
    kLength,
    kUntilClose,
    kChunkSize,
    kChunkData,
    kChunkCrlf,
    kTrailers,
    kDone,
    kBroken  // bad framing seen: every later take_body is kError
  };
  // Takes one line (without CR LF) from the buffer; false if no full line is buffered.
  bool take_line(std::string& line);

  std::string buf_;  // received, not yet consumed: buf_[pos_, size)
  size_t pos_ = 0;
  BodyState body_state_ = BodyState::kNone;
  uint64_t left_ = 0;  // bytes left of the body (kLength) or of the chunk (kChunkData)
  bool keep_alive_ = true;
};

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
  // (Not with bytes left over past the response: they would be read as the next one's head.)
  bool reusable() const {
    return parser_.done() && parser_.keep_alive() && parser_.buffered() == 0;
  }
  // The peer closed (or sent unexpected bytes) while the connection sat idle.
  bool idle_broken() const;
  int fd() const { return fd_; }

 private:
  explicit Connection(int fd) : fd_(fd) {}
  Result<ResponseHead> read_one_head(const Wait& wait, ReadResult* result);
  // Waits until the socket is readable and feeds what it reads to the parser.
  ReadResult fill(const Wait& wait);

  int fd_;
  ResponseParser parser_;
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
// With `api_key`, sent as "Authorization: Bearer KEY" (a backend's key-protected routes).
Result<SimpleResponse> simple_request(ConnectionPool& pool, std::string_view method,
                                      std::string_view target, int timeout_ms,
                                      const std::atomic<bool>* stop = nullptr,
                                      std::string_view api_key = {});

}  // namespace sluice::router
