#include "router/upstream.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "base/strings.h"
#include "net/socket.h"

namespace sluice::router {
namespace {

using Clock = std::chrono::steady_clock;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

int ms_left(Clock::time_point deadline) {
  return int(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
}

}  // namespace

Result<Endpoint> parse_backend_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.rfind("https://", 0) == 0) {
    return make_error("backend '", url, "': https is not supported (use http://HOST:PORT)");
  }
  if (rest.rfind("http://", 0) == 0) rest.remove_prefix(7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return make_error("backend '", url, "': a path is not supported (use http://HOST:PORT)");
  }
  const size_t colon = rest.rfind(':');
  Endpoint ep;
  if (colon == std::string_view::npos) {
    ep.host = std::string(rest);
    ep.port = 80;
  } else {
    ep.host = std::string(rest.substr(0, colon));
    const std::string_view p = rest.substr(colon + 1);
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), ep.port);
    if (ec != std::errc() || end != p.data() + p.size() || ep.port <= 0 || ep.port > 65535) {
      return make_error("backend '", url, "': the port must be 1..65535");
    }
  }
  if (ep.host.size() >= 2 && ep.host.front() == '[' && ep.host.back() == ']') {
    ep.host = ep.host.substr(1, ep.host.size() - 2);
  }
  if (ep.host.empty()) return make_error("backend '", url, "': no host (use http://HOST:PORT)");
  ep.url = "http://" + std::string(rest);
  return ep;
}

std::string ResponseHead::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals_ascii(k, name)) return v;
  return "";
}

// --- ResponseParser -----------------------------------------------------------------------------

void ResponseParser::feed(std::string_view bytes) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  buf_.append(bytes);
}

bool ResponseParser::take_line(std::string& line) {
  const size_t nl = buf_.find('\n', pos_);
  if (nl == std::string::npos) return false;
  size_t end = nl;
  if (end > pos_ && buf_[end - 1] == '\r') --end;
  line.assign(buf_, pos_, end - pos_);
  pos_ = nl + 1;
  return true;
}

std::optional<Result<ResponseHead>> ResponseParser::take_head() {
  if (buf_.find("\r\n\r\n", pos_) == std::string::npos) return std::nullopt;
  ResponseHead head;
  std::string line;
  take_line(line);
  // "HTTP/1.1 200 OK"
  if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12) {
    return make_error("not an HTTP response: '", line.substr(0, 40), "'");
  }
  const bool http10 = line[7] == '0';
  std::from_chars(line.data() + 9, line.data() + 12, head.status);
  if (head.status < 100 || head.status > 599) return make_error("bad HTTP status line");
  while (take_line(line) && !line.empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    head.headers.emplace_back(std::string(trim(std::string_view(line).substr(0, colon))),
                              std::string(trim(std::string_view(line).substr(colon + 1))));
  }
  const std::string conn = head.header("Connection");
  keep_alive_ = http10 ? iequals_ascii(conn, "keep-alive") : !iequals_ascii(conn, "close");
  const std::string te = head.header("Transfer-Encoding");
  const std::string len = head.header("Content-Length");
  if (!te.empty() && te.find("chunked") != std::string::npos) {
    body_state_ = BodyState::kChunkSize;
  } else if (!len.empty()) {
    uint64_t n = 0;
    std::from_chars(len.data(), len.data() + len.size(), n);
    left_ = n;
    body_state_ = n == 0 ? BodyState::kDone : BodyState::kLength;
  } else if (head.status == 204 || head.status == 304 || head.status < 200) {
    body_state_ = BodyState::kDone;
  } else {
    body_state_ = BodyState::kUntilClose;
    keep_alive_ = false;
  }
  return head;
}

ResponseParser::Step ResponseParser::take_body(std::string& out) {
  const size_t out_start = out.size();
  bool progressed = true;
  while (progressed && body_state_ != BodyState::kDone) {
    progressed = false;
    const size_t avail = buf_.size() - pos_;
    std::string line;
    switch (body_state_) {
      case BodyState::kLength:
      case BodyState::kChunkData: {
        const size_t n = size_t(std::min<uint64_t>(left_, avail));
        if (n == 0) break;
        out.append(buf_, pos_, n);
        pos_ += n;
        left_ -= n;
        progressed = true;
        if (left_ == 0) {
          body_state_ =
              body_state_ == BodyState::kLength ? BodyState::kDone : BodyState::kChunkCrlf;
        }
        break;
      }
      case BodyState::kUntilClose:
        if (avail == 0) break;
        out.append(buf_, pos_, avail);
        pos_ += avail;
        progressed = true;
        break;
      case BodyState::kChunkSize: {
        if (!take_line(line)) break;
        uint64_t n = 0;
        const std::string_view s = trim(line);
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n, 16);
        if (ec != std::errc()) {
          body_state_ = BodyState::kBroken;
          break;
        }
        (void)end;
        left_ = n;
        body_state_ = n == 0 ? BodyState::kTrailers : BodyState::kChunkData;
        progressed = true;
        break;
      }
      case BodyState::kChunkCrlf:
        if (!take_line(line)) break;
        if (!line.empty()) {
          body_state_ = BodyState::kBroken;
          break;
        }
        body_state_ = BodyState::kChunkSize;
        progressed = true;
        break;
      case BodyState::kTrailers:
        if (!take_line(line)) break;
        if (line.empty()) body_state_ = BodyState::kDone;
        progressed = true;
        break;
      case BodyState::kNone:
      case BodyState::kBroken:
      case BodyState::kDone:
        break;
    }
  }
  if (out.size() > out_start) return Step::kData;
  if (body_state_ == BodyState::kNone || body_state_ == BodyState::kBroken) return Step::kError;
  if (body_state_ == BodyState::kDone) return Step::kEnd;
  return Step::kNeedMore;
}

ResponseParser::Step ResponseParser::at_close() {
  if (body_state_ != BodyState::kUntilClose) return Step::kError;
  body_state_ = BodyState::kDone;
  return Step::kEnd;
}

// --- Connection ---------------------------------------------------------------------------------

Result<std::unique_ptr<Connection>> Connection::open(const Endpoint& ep, int timeout_ms) {
  Result<net::Fd> fd = net::connect_to(ep.host, ep.port, net::deadline_after(timeout_ms / 1000.0));
  if (!fd.ok()) return make_error(ep.url, ": ", fd.message());
  return std::unique_ptr<Connection>(new Connection(fd->release()));
}

Connection::~Connection() {
  ::close(fd_);
}

bool Connection::idle_broken() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;  // data, EOF or an error on an idle connection: unusable
}

Status Connection::write_request(std::string_view bytes, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, ms_left(deadline)) > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
      return make_error("timed out sending the request");
    }
    return make_error("sending the request failed (", std::strerror(errno), ")");
  }
  parser_.expect_head();
  return {};
}

ReadResult Connection::fill(const Wait& wait) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait.timeout_ms);
  while (true) {
    if (wait.stop && wait.stop->load(std::memory_order_relaxed)) return ReadResult::kError;
    pollfd p[2] = {{fd_, POLLIN, 0}, {wait.client_fd, POLLRDHUP, 0}};
    const int slice = wait.stop ? std::min(ms_left(deadline), 100) : ms_left(deadline);
    const int r = ::poll(p, wait.client_fd >= 0 ? 2 : 1, slice);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ReadResult::kError;
    if (wait.client_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
      return ReadResult::kClientGone;
    }
    if (p[0].revents) break;
    if (ms_left(deadline) <= 0) return ReadResult::kTimeout;
  }
  char tmp[16384];
  ssize_t n;
  do n = ::recv(fd_, tmp, sizeof tmp, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadResult::kData;  // spurious
  if (n <= 0) return ReadResult::kEnd;
  parser_.feed(std::string_view(tmp, size_t(n)));
  return ReadResult::kData;
}

Result<ResponseHead> Connection::read_head(const Wait& wait, ReadResult* result) {
  while (true) {
    Result<ResponseHead> head = read_one_head(wait, result);
    // Interim answers (100 Continue, 103 Early Hints) precede the real one.
    if (!head.ok() || head->status >= 200) return head;
  }
}

Result<ResponseHead> Connection::read_one_head(const Wait& wait, ReadResult* result) {
  if (result) *result = ReadResult::kError;
  std::optional<Result<ResponseHead>> head;
  while (!(head = parser_.take_head())) {
    if (parser_.head_too_large()) return make_error("the response head is too large");
    const ReadResult r = fill(wait);
    if (r == ReadResult::kEnd) return make_error("the backend closed the connection");
    if (r != ReadResult::kData) {
      if (result) *result = r;
      return make_error(r == ReadResult::kTimeout      ? "the backend did not answer in time"
                        : r == ReadResult::kClientGone ? "the client hung up"
                                                       : "reading the response failed");
    }
  }
  if (result && head->ok()) *result = ReadResult::kData;
  return std::move(*head);
}

ReadResult Connection::read_body(std::string& out, const Wait& wait) {
  while (true) {
    switch (parser_.take_body(out)) {
      case ResponseParser::Step::kData:
        return ReadResult::kData;
      case ResponseParser::Step::kEnd:
        return ReadResult::kEnd;
      case ResponseParser::Step::kError:
        return ReadResult::kError;
      case ResponseParser::Step::kNeedMore:
        break;
    }
    const ReadResult r = fill(wait);
    if (r == ReadResult::kEnd) {
      return parser_.at_close() == ResponseParser::Step::kEnd ? ReadResult::kEnd
                                                              : ReadResult::kError;
    }
    if (r != ReadResult::kData) return r;
  }
}

ReadResult Connection::read_all(std::string& out, const Wait& wait, size_t limit) {
  const size_t start = out.size();
  while (true) {
    const ReadResult r = read_body(out, wait);
    if (r != ReadResult::kData) return r;
    if (out.size() - start > limit) return ReadResult::kError;
  }
}

// --- ConnectionPool -----------------------------------------------------------------------------

Result<std::unique_ptr<Connection>> ConnectionPool::acquire(int connect_timeout_ms) {
  // sluice serve closes idle connections after 5 s (others may be quicker): reuse only
  // connections idle for less than 2 s, and only if the peer has not hung up meanwhile.
  const auto fresh_after = Clock::now() - std::chrono::seconds(2);
  std::unique_ptr<Connection> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!idle_.empty()) {
      auto [conn, at] = std::move(idle_.back());
      idle_.pop_back();
      if (at >= fresh_after && !conn->idle_broken()) {
        c = std::move(conn);
        break;
      }
    }
  }
  if (c) return c;
  return Connection::open(ep_, connect_timeout_ms);
}

void ConnectionPool::release(std::unique_ptr<Connection> c) {
  if (!c || !c->reusable()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() >= max_idle_) idle_.erase(idle_.begin());
  idle_.emplace_back(std::move(c), Clock::now());
}

Result<SimpleResponse> simple_request(ConnectionPool& pool, std::string_view method,
                                      std::string_view target, int timeout_ms,
                                      const std::atomic<bool>* stop, std::string_view api_key) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, pool.acquire(timeout_ms));
  std::string req = std::string(method) + " " + std::string(target) +
                    " HTTP/1.1\r\nHost: " + pool.endpoint().host + ":" +
                    std::to_string(pool.endpoint().port) + "\r\nAccept: */*\r\n";
  if (!api_key.empty()) req += "Authorization: Bearer " + std::string(api_key) + "\r\n";
  req += "\r\n";
  if (Status st = c->write_request(req, timeout_ms); !st.ok()) return st;
  Wait w;
  w.timeout_ms = timeout_ms;
  w.stop = stop;
  SLUICE_ASSIGN_OR_RETURN(ResponseHead head, c->read_head(w));
  SimpleResponse out;
  out.status = head.status;
  if (c->read_all(out.body, w, size_t(16) << 20) != ReadResult::kEnd) {
    return make_error("reading the response body of ", target, " failed");
  }
  pool.release(std::move(c));
  return out;
}

}  // namespace sluice::router
