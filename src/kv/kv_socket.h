// TCP plumbing of the KV transfer (kv_transfer.h): sockets whose every wait is bounded by a
// deadline. Calls are non-blocking (MSG_DONTWAIT) and poll() only on would-block, so a fast
// stream costs one syscall per chunk, a stalled peer costs at most the deadline, and a
// shutdown() from another thread (KvTransferServer::stop) wakes a waiting call at once.
// Writes never raise SIGPIPE (MSG_NOSIGNAL); EINTR and partial transfers are retried.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "base/status.h"
#include "base/strings.h"

namespace sluice::kv_socket {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

// Socket buffers for block streams (the kernel caps them at net.core.{w,r}mem_max).
inline constexpr int kBufferBytes = 4 << 20;

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

// Tuning and backstops: a failure is harmless, so it is ignored.
void set_int_option(int fd, int level, int name, int value);
void set_timeout_option(int fd, int name, double seconds);  // SO_SNDTIMEO / SO_RCVTIMEO

// Connects by `d`: a non-blocking socket with TCP_NODELAY and a kBufferBytes receive buffer.
// Errors: "cannot resolve ...", "cannot connect: Connection refused".
Result<Fd> connect_to(const std::string& host, int port, Deadline d);

// A non-blocking listening socket on host:port (port 0: ephemeral), SO_REUSEADDR, with
// kBufferBytes send and receive buffers that accepted sockets inherit. `port` gets the bound port.
Result<Fd> listen_on(const std::string& host, int port, int backlog, int& bound_port);

}  // namespace sluice::kv_socket
