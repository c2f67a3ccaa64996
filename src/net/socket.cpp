#include "net/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <system_error>

namespace sluice::net {

Deadline deadline_after(double seconds) {
  // Clamped so that an absurd timeout cannot overflow the clock's representation.
  const double s = std::clamp(seconds, 0.0, 1e9);
  return SteadyClock::now() +
         std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

int ms_left(Deadline d) {
  const auto left = d - SteadyClock::now();
  if (left <= SteadyClock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return int(std::min<int64_t>(ms, INT_MAX));
}

std::string host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string Io::text() const {
  switch (kind) {
    case kOk:
      return "ok";
    case kEof:
      return "connection closed";
    case kTimeout:
      return "timed out";
    case kError:
      return errno_text(error);
  }
  return "?";
}

int poll_one(int fd, short events, int timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return p.revents;
    if (r == 0) return 0;
    if (errno != EINTR) return -1;
    timeout_ms = int(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
               .count()));
  }
}

Io wait_for(int fd, short events, Deadline d) {
  while (true) {
    const int ms = ms_left(d);
    if (ms == 0) return Io{Io::kTimeout};
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return Io{};
    if (r < 0 && errno != EINTR) return Io{Io::kError, errno};
  }
}

void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
    port = ntohs(v6.sin6_port);
  }
  ip = buf;
}

bool peer_address(int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  address_of(a, ip, port);
  return true;
}

bool local_address(int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  address_of(a, ip, port);
  return true;
}

namespace {

// Drops the first `n` bytes of iov[first, count), moving `first` past the exhausted entries.
void advance(iovec* iov, size_t count, size_t& first, size_t n) {
  while (first < count && (n > 0 || iov[first].iov_len == 0)) {
    const size_t step = std::min(n, iov[first].iov_len);
    iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + step;
    iov[first].iov_len -= step;
    n -= step;
    if (iov[first].iov_len == 0) ++first;
  }
}

Result<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) return make_error("cannot resolve '", host, "': ", ::gai_strerror(rc));
  return list;
}

}  // namespace

Io send_all(int fd, iovec* iov, size_t count, Deadline d) {
  Io io;
  size_t first = 0;
  advance(iov, count, first, 0);
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = count - first;
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      io.done += size_t(n);
      advance(iov, count, first, size_t(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io{Io::kError, errno, io.done};
    const Io w = wait_for(fd, POLLOUT, d);
    if (!w.ok()) return Io{w.kind, w.error, io.done};
  }
  return io;
}

Io send_all(int fd, std::span<const uint8_t> bytes, Deadline d) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  return send_all(fd, &iov, 1, d);
}

Io recv_all(int fd, iovec* iov, size_t count, Deadline d) {
  Io io;
  size_t first = 0;
  advance(iov, count, first, 0);
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = count - first;
    const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n > 0) {
      io.done += size_t(n);
      advance(iov, count, first, size_t(n));
      continue;
    }
    if (n == 0) return Io{Io::kEof, 0, io.done};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io{Io::kError, errno, io.done};
    const Io w = wait_for(fd, POLLIN, d);
    if (!w.ok()) return Io{w.kind, w.error, io.done};
  }
  return io;
}

Io recv_all(int fd, void* data, size_t n, Deadline d) {
  iovec iov{data, n};
  return recv_all(fd, &iov, 1, d);
}

void set_int_option(int fd, int level, int name, int value) {
  (void)::setsockopt(fd, level, name, &value, sizeof value);
}

void set_timeout_option(int fd, int name, double seconds) {
  const double s = std::clamp(seconds, 0.0, 1e6);
  timeval tv{};
  tv.tv_sec = time_t(s);
  tv.tv_usec = suseconds_t((s - double(tv.tv_sec)) * 1e6);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;  // 0 would mean "never"
  (void)::setsockopt(fd, SOL_SOCKET, name, &tv, sizeof tv);
}

Result<Fd> connect_to(const std::string& host, int port, Deadline d, int recv_buffer_bytes) {
  SLUICE_ASSIGN_OR_RETURN(addrinfo * list, resolve(host, port, false));
  std::string last = "no address";
  Fd out;
  for (addrinfo* a = list; a != nullptr && out.get() < 0; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      last = errno_text(errno);
      continue;
    }
    set_int_option(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
    if (recv_buffer_bytes > 0)  // before the SYN: it sizes the window
      set_int_option(fd.get(), SOL_SOCKET, SO_RCVBUF, recv_buffer_bytes);
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      out = std::move(fd);
      break;
    }
    if (errno != EINPROGRESS && errno != EINTR) {
      last = errno_text(errno);
      continue;
    }
    const Io w = wait_for(fd.get(), POLLOUT, d);
    if (!w.ok()) {
      last = w.text();
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      last = errno_text(err);
      continue;
    }
    out = std::move(fd);
  }
  ::freeaddrinfo(list);
  if (out.get() < 0) return make_error("cannot connect: ", last);
  return out;
}

Result<Fd> listen_on(const std::string& host, int port, int backlog, int& bound_port,
                     int buffer_bytes) {
  SLUICE_ASSIGN_OR_RETURN(addrinfo * list, resolve(host, port, true));
  std::string last = "no address";
  Fd out;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      last = errno_text(errno);
      continue;
    }
    set_int_option(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1);
    // Inherited by accepted sockets (the receive buffer sizes the window: before the handshake).
    if (buffer_bytes > 0) {
      set_int_option(fd.get(), SOL_SOCKET, SO_SNDBUF, buffer_bytes);
      set_int_option(fd.get(), SOL_SOCKET, SO_RCVBUF, buffer_bytes);
    }
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last = errno_text(errno);
      continue;
    }
    out = std::move(fd);
    break;
  }
  ::freeaddrinfo(list);
  if (out.get() < 0) return make_error("cannot listen: ", last);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(out.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return make_error("getsockname: ", errno_text(errno));
  bound_port = addr.ss_family == AF_INET6
                   ? ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port)
                   : ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  return out;
}

}  // namespace sluice::net
