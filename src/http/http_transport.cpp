#include "http/http_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "base/log.h"
#include "http/api_error.h"
#include "net/socket.h"

namespace sluice::http {
namespace {

using Clock = std::chrono::steady_clock;

thread_local int t_connection_socket = -1;
// Set by close_after_response() during a request; read and cleared by the connection loop.
thread_local bool t_close_after_response = false;
// Whether the request being served accepted gzip (its Accept-Encoding is dropped before
// httplib sees it: http_transport.h); set per request by the connection loop.
thread_local bool t_accepts_gzip = false;

// One TCP connection as httplib sees it. Reads are buffered (httplib's line reader asks for
// one byte at a time) and bounded in time; the request line and headers are bounded in size
// and must arrive within one read timeout; writes never raise SIGPIPE.
class ConnectionStream final : public httplib::Stream {
 public:
  // `stopping` says the server is shutting down: reads then give up within 100 ms.
  ConnectionStream(int fd, const HttpLimits& limits, std::function<bool()> stopping)
      : fd_(fd), limits_(limits), stopping_(std::move(stopping)) {}

  // Waits for the first byte of the next request: true when one is there; false on timeout,
  // end of stream, or once `stopping()` says the server is shutting down (checked every 100 ms).
  bool wait_for_request() {
    if (buf_pos_ < buf_len_) return true;
    return fill(limits_.keep_alive_timeout_s * 1000);
  }

  // Starts the accounting of a new request's header section.
  void begin_request() {
    in_headers_ = true;
    seen_header_byte_ = false;
    header_bytes_ = 0;
    newline_run_ = 0;
    header_deadline_ = Clock::now() + std::chrono::seconds(limits_.read_timeout_s);
  }

  bool is_readable() const override {
    return buf_pos_ < buf_len_ || wait_readable(limits_.read_timeout_s * 1000);
  }

  bool is_writable() const override {
    const int ev = net::poll_one(fd_, POLLOUT, limits_.write_timeout_s * 1000);
    return ev > 0 && (ev & POLLOUT) && !(ev & (POLLHUP | POLLERR));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (rejected_ || size == 0) return rejected_ ? -1 : 0;
    if (buf_pos_ == buf_len_) {
      // Large body reads bypass the buffer.
      if (!in_headers_ && size >= sizeof buf_) {
        if (!wait_readable(limits_.read_timeout_s * 1000)) return -1;
        ssize_t n;
        do n = ::recv(fd_, ptr, size, 0);
        while (n < 0 && errno == EINTR);
        return n > 0 ? n : -1;
      }
      if (!fill(read_timeout_ms())) return -1;
    }
    size_t n = std::min(size, buf_len_ - buf_pos_);
    if (in_headers_) {
      for (size_t i = 0; i < n && in_headers_; ++i) {
        const char c = buf_[buf_pos_ + i];
        ++header_bytes_;
        if (c == '\n') {
          if (seen_header_byte_ && ++newline_run_ == 2) in_headers_ = false;
        } else if (c != '\r') {
          seen_header_byte_ = true;
          newline_run_ = 0;
        }
      }
      if (in_headers_ && header_bytes_ > limits_.max_header_bytes) {
        reject_headers();
        return -1;
      }
    }
    std::memcpy(ptr, buf_ + buf_pos_, n);
    buf_pos_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      const int ev = net::poll_one(fd_, POLLOUT, limits_.write_timeout_s * 1000);
      if (ev <= 0 || (ev & (POLLHUP | POLLERR)) || !(ev & POLLOUT)) return -1;
      const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return -1;
      }
      done += size_t(n);
    }
    return ssize_t(done);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    (void)net::peer_address(fd_, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    (void)net::local_address(fd_, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  int read_timeout_ms() const {
    if (!in_headers_) return limits_.read_timeout_s * 1000;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(header_deadline_ - Clock::now());
    return int(std::max<int64_t>(0, left.count()));
  }

  // Waits up to `timeout_ms` for data (or end of stream), in 100 ms slices so that a server
  // stop is noticed.
  bool wait_readable(int timeout_ms) const {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!stopping_()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      const int ev = net::poll_one(fd_, POLLIN, int(std::clamp<int64_t>(left, 0, 100)));
      if (ev < 0) return false;
      if (ev != 0) return true;
      if (left <= 0) return false;
    }
    return false;
  }

  // Refills the buffer, waiting at most `timeout_ms` for data.
  bool fill(int timeout_ms) {
    if (!wait_readable(timeout_ms)) return false;
    ssize_t n;
    do n = ::recv(fd_, buf_, sizeof buf_, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    buf_pos_ = 0;
    buf_len_ = size_t(n);
    return true;
  }

  // Headers too large: answer 431 ourselves (httplib would just drop the connection).
  void reject_headers() {
    rejected_ = true;
    ApiError e;
    e.status = 431;
    e.message = "request headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes";
    e.code = "headers_too_large";
    const std::string body = to_wire(e.to_json());
    const std::string head =
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n";
    const std::string msg = head + body;
    (void)write(msg.data(), msg.size());
  }

  const int fd_;
  const HttpLimits& limits_;
  const std::function<bool()> stopping_;
  char buf_[4096];
  size_t buf_pos_ = 0;
  size_t buf_len_ = 0;
  bool in_headers_ = true;
  bool seen_header_byte_ = false;
  size_t header_bytes_ = 0;
  int newline_run_ = 0;
  Clock::time_point header_deadline_{};
  bool rejected_ = false;
};

}  // namespace

int current_connection_socket() {
  return t_connection_socket;
}

bool current_request_accepts_gzip() {
  return t_accepts_gzip;
}

void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  res.set_content(to_wire(body), "application/json");
}

bool declares_body_over(const httplib::Request& req, size_t limit) {
  const std::string len = req.get_header_value("Content-Length");
  if (len.empty()) return false;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), n);
  return ec == std::errc::result_out_of_range || (ec == std::errc() && n > limit);
}

namespace {

// Compares in time that depends only on the lengths, never on where the strings differ.
bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

}  // namespace

bool api_key_matches(const httplib::Request& req, const std::string& key) {
  const std::string header = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  const std::string given =
      header.compare(0, bearer.size(), bearer) == 0 ? header.substr(bearer.size()) : "";
  const bool by_bearer = constant_time_equal(given, key);
  const bool by_header =
      req.has_header("x-api-key") && constant_time_equal(req.get_header_value("x-api-key"), key);
  return by_bearer || by_header;
}

bool declares_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const std::string len = req.get_header_value("Content-Length");
  return !len.empty() && len.find_first_not_of('0') != std::string::npos;
}

void close_after_response(httplib::Response& res) {
  res.set_header("Connection", "close");
  t_close_after_response = true;
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  send_json(res, e.status, e.to_json());
}

void send_anthropic_error(httplib::Response& res, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  send_json(res, e.status, e.to_anthropic_json());
}

void send_error_for(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  if (req.path.rfind("/v1/messages", 0) == 0) return send_anthropic_error(res, e);
  send_error(res, e);
}

void answer_exceptions_with_500(httplib::Server& http, const std::string& who) {
  http.set_exception_handler(
      [who](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SLUICE_LOG(kError, who + ": handler failed: " + what);
        send_error(res, internal_error("internal error: " + what));
      });
}

// --- ConnectionThreads ------------------------------------------------------------------------

ConnectionThreads::ConnectionThreads(const HttpLimits& limits,
                                     std::shared_ptr<ConnectionStats> stats)
    : limits_(limits), stats_(std::move(stats)) {}

ConnectionThreads::~ConnectionThreads() {
  shutdown();
}

void ConnectionThreads::spawn_locked() {
  const uint64_t id = next_id_++;
  try {
    threads_.emplace(id, std::thread([this, id] { worker_main(id); }));
    stats_->threads.fetch_add(1);
  } catch (const std::system_error& e) {
    // Out of threads: the job stays queued for the next free worker.
    SLUICE_LOG(kWarn, std::string("serve: cannot start a connection thread: ") + e.what());
  }
}

std::vector<std::thread> ConnectionThreads::take_exited_locked() {
  std::vector<std::thread> out;
  out.swap(exited_);
  return out;
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    stats_->queued.fetch_add(1);
    stats_->accepted.fetch_add(1);
    if (n_idle_ < int(jobs_.size()) && int(threads_.size()) < limits_.max_threads) spawn_locked();
    done = take_exited_locked();
  }
  cv_.notify_one();
  for (std::thread& t : done) t.join();
}

void ConnectionThreads::worker_main(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++n_idle_;
    const bool got = cv_.wait_for(lock, std::chrono::milliseconds(limits_.idle_thread_exit_ms),
                                  [&] { return !jobs_.empty() || shutdown_; });
    --n_idle_;
    if (!jobs_.empty()) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      stats_->queued.fetch_sub(1);
      stats_->busy.fetch_add(1);
      lock.unlock();
      job();
      job = nullptr;  // release what the job captured before taking the lock
      lock.lock();
      stats_->busy.fetch_sub(1);
      continue;
    }
    if (shutdown_) break;
    if (!got && int(threads_.size()) > limits_.min_idle_threads) break;  // idle too long
  }
  // Join the workers that exited before us (an unjoined thread keeps its whole stack mapped),
  // and leave our own std::thread to whoever comes next; the object may move while we run.
  std::vector<std::thread> earlier = take_exited_locked();
  auto it = threads_.find(id);
  exited_.push_back(std::move(it->second));
  threads_.erase(it);
  stats_->threads.fetch_sub(1);
  lock.unlock();
  for (std::thread& t : earlier) t.join();
}

void ConnectionThreads::shutdown() {
  std::vector<std::thread> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  // Workers finish the queued jobs first; wait until every worker has moved itself to exited_.
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (std::thread& t : take_exited_locked()) all.push_back(std::move(t));
      if (threads_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::thread& t : all) t.join();
}

// --- HttpServer ---------------------------------------------------------------------------------

HttpServer::HttpServer(const HttpLimits& limits)
    : limits_(limits), stats_(std::make_shared<ConnectionStats>()) {
  new_task_queue = [this] { return new ConnectionThreads(limits_, stats_); };
  set_payload_max_length(limits_.max_body_bytes);
  set_read_timeout(limits_.read_timeout_s, 0);
  set_write_timeout(limits_.write_timeout_s, 0);
  set_keep_alive_timeout(limits_.keep_alive_timeout_s);
  set_keep_alive_max_count(size_t(std::max(1, limits_.keep_alive_max_requests)));
  // httplib's default also sets SO_REUSEPORT, which would let a second server bind the same
  // port silently; SO_REUSEADDR alone allows quick restarts.
  set_socket_options([](socket_t sock) { net::set_int_option(sock, SOL_SOCKET, SO_REUSEADDR, 1); });
}

Result<int> HttpServer::bind_port(const std::string& host, int port) {
  int bound = -1;
  if (port == 0) {
    bound = bind_to_any_port(host);
  } else if (bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return make_error("cannot listen on ", host, ":", port, " (", std::strerror(errno),
                      "; is the address valid and the port free?)");
  }
  // listen() again on a listening socket only changes its backlog (httplib 0.11 uses 5, which
  // drops SYNs when hundreds of clients connect at once and costs them a 1 s retransmit).
  ::listen(svr_sock_, limits_.listen_backlog);
  return bound;
}

void HttpServer::serve() {
  listen_after_bind();
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  net::set_int_option(sock, IPPROTO_TCP, TCP_NODELAY, 1);
  t_connection_socket = sock;
  auto stopping = [this] { return svr_sock_ == INVALID_SOCKET; };
  ConnectionStream stream(sock, limits_, stopping);
  bool unread_body = false;
  auto setup = [&](httplib::Request& req) {
    auto range = req.headers.equal_range("Accept-Encoding");
    t_accepts_gzip = false;
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second.find("gzip") != std::string::npos) t_accepts_gzip = true;
    }
    req.headers.erase(range.first, range.second);
    // Answered 413 without reading the body: what follows on the socket is not a request.
    unread_body = declares_body_over(req, limits_.max_body_bytes);
  };
  bool ret = false;
  for (int left = std::max(1, limits_.keep_alive_max_requests); left > 0; --left) {
    if (stopping() || !stream.wait_for_request()) break;
    stream.begin_request();
    bool closed = false;
    t_close_after_response = false;
    ret = process_request(stream, /*close_connection=*/left == 1 || stopping(), closed, setup);
    if (!ret || closed || unread_body || t_close_after_response) break;
  }
  t_connection_socket = -1;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace sluice::http

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer builds: Debian's cpp-httplib is a prebuilt, uninstrumented library. The
// inline fast path of its function-local statics (e.g. the method set in parse_request_line)
// is an acquire load TSan cannot see, so every later read of those statics from another
// connection thread looks like a race. Reports raised from inside that library are suppressed;
// our own code stays fully checked.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libcpp-httplib.so\n";
}
#endif
