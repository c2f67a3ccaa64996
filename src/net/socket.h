// The socket floor shared by the KV transfer (kv_io/), the router's backend client (router/) and
// the HTTP server (http/): TCP sockets whose every wait is bounded by a deadline. Calls are
// non-blocking (MSG_DONTWAIT) and poll() only on would-block, so a fast stream costs one syscall
// per chunk, a stalled peer costs at most the deadline, and a shutdown() from another thread
// (KvTransferServer::stop) wakes a waiting call at once. Writes never raise SIGPIPE
// (MSG_NOSIGNAL); EINTR and partial transfers are retried.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "base/status.h"
#include "base/strings.h"

namespace sluice::net {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

Deadline deadline_after(double seconds);
// Milliseconds until `d`, rounded up (0: passed).
int ms_left(Deadline d);
// "host:port", "[v6::addr]:port".
std::string host_port(const std::string& host, int port);

// Owns a file descriptor (closes it).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// How a bounded send/recv ended.
struct Io {
  enum Kind { kOk, kEof, kTimeout, kError } kind = kOk;
  int error = 0;    // errno for kError
  size_t done = 0;  // bytes moved before it ended
  bool ok() const { return kind == kOk; }
  std::string text() const;  // "connection closed", "timed out", strerror
};

// Sends every byte of iov[0, count) by `d`; iov is consumed (partial writes advance it).
Io send_all(int fd, iovec* iov, size_t count, Deadline d);
Io send_all(int fd, std::span<const uint8_t> bytes, Deadline d);
// Fills every byte of iov[0, count) by `d` (scattered: one recvmsg can fill several buffers);
// iov is consumed as it fills.
Io recv_all(int fd, iovec* iov, size_t count, Deadline d);
Io recv_all(int fd, void* data, size_t n, Deadline d);

// poll() on one descriptor for up to `timeout_ms`, retrying EINTR with the time left. Returns
// revents (0: timed out, -1: poll failed).
int poll_one(int fd, short events, int timeout_ms);
// Waits for `events` on fd until `d`: kOk when ready or in error (the next call reports it),
// kTimeout, or kError when poll() itself fails.
Io wait_for(int fd, short events, Deadline d);

// The numeric address and port of a socket address ("" and port untouched for other families),
// of a connected socket's peer, and of a socket's own end (false: getpeername/getsockname failed).
void address_of(const sockaddr_storage& a, std::string& ip, int& port);
bool peer_address(int fd, std::string& ip, int& port);
bool local_address(int fd, std::string& ip, int& port);

// Tuning and backstops: a failure is harmless, so it is ignored.
void set_int_option(int fd, int level, int name, int value);
void set_timeout_option(int fd, int name, double seconds);  // SO_SNDTIMEO / SO_RCVTIMEO

// Connects by `d` (one deadline for every address the name resolves to): a non-blocking socket
// with TCP_NODELAY and, when `recv_buffer_bytes` > 0, that receive buffer (set before the SYN:
// it sizes the window; the kernel caps it at net.core.rmem_max).
// Errors: "cannot resolve 'host': ...", "cannot connect: Connection refused".
Result<Fd> connect_to(const std::string& host, int port, Deadline d, int recv_buffer_bytes = 0);

// A non-blocking listening socket on host:port (port 0: ephemeral), SO_REUSEADDR and, when
// `buffer_bytes` > 0, send and receive buffers of that size that accepted sockets inherit.
// `bound_port` gets the bound port.
Result<Fd> listen_on(const std::string& host, int port, int backlog, int& bound_port,
                     int buffer_bytes = 0);

}  // namespace sluice::net
