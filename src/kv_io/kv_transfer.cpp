// The KV transfer server and puller (kv_transfer.h) over net/'s bounded socket I/O.
#include "kv_io/kv_transfer.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <new>
#include <random>
#include <system_error>

#include "base/crc32c.h"
#include "net/socket.h"

namespace sluice {
namespace {

using namespace net;

// Socket buffers for block streams (the kernel caps them at net.core.{w,r}mem_max).
constexpr int kSocketBufferBytes = 4 << 20;

// Blocks go out in groups of about this many bytes: one sendmsg (and one crc pass over data
// that stays in cache) per group rather than per block when blocks are small.
constexpr size_t kSendGroupBytes = size_t(1) << 20;
constexpr size_t kSendGroupMaxBlocks = 64;  // 2 iovecs a block, well under IOV_MAX
constexpr size_t kAckBytes = kKvHeaderBytes + 8;

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// Unguessable: a handle is the only credential a pull needs.
uint64_t random_handle() {
  uint64_t h = 0;
  for (int tries = 0; tries < 8; ++tries) {
    const ssize_t n = ::getrandom(&h, sizeof h, 0);
    if (n == ssize_t(sizeof h) && h != 0) return h;
    if (n < 0 && errno != EINTR) break;
  }
  // No getrandom (very old kernels): the C++ library's nondeterministic source.
  std::random_device rd;
  do h = uint64_t(rd()) << 32 | rd();
  while (h == 0);
  return h;
}

// Advises the 2 MiB-aligned interior of a large buffer not yet touched into transparent huge
// pages: the puller's result is a fresh allocation (a mapping of its own past glibc's mmap
// threshold) that the transfer touches once, front to back, and 4 KiB faults cost more than the
// copy into it (measured on a VM: 22 ms for 32 MiB against 6-9 ms advised). Best effort.
void advise_huge_pages(void* p, size_t n) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (n < 2 * kHuge) return;
  const uintptr_t begin = (uintptr_t(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (uintptr_t(p) + n) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

// An exporter's answer (it may throw) for `n` offered blocks (or one state): n of one size
// within the wire's bounds, else an error that says what could not be read.
Result<KvBlocks> checked_export(const std::function<Result<KvBlocks>()>& read, int32_t n,
                                const char* what) {
  Result<KvBlocks> got = make_error("nothing read");
  try {
    got = read();
  } catch (const std::exception& e) {
    got = make_error("exception: ", e.what());
  }
  if (!got.ok()) return make_error("cannot read the offered ", what, ": ", got.message());
  const uint64_t bpb = got->bytes_per_block;
  if (got->n_blocks != n || bpb == 0 || bpb > kKvMaxBytesPerBlock ||
      got->bytes.size() != size_t(n) * bpb || got->layout.size() > kKvMaxStringBytes) {
    return make_error("the exporter returned ", got->n_blocks, " of ", bpb, " bytes (",
                      got->bytes.size(), " bytes in all) for ", n, " ", what);
  }
  return got;
}

// Best effort: an ERROR reply on a connection being given up.
void send_error(int fd, KvErrorCode code, const std::string& message, Deadline d) {
  ReplyHeader reply;
  reply.code = code;
  reply.message = message;
  (void)send_all(fd, encode_reply_header(reply), d);
}

}  // namespace

KvTransferServer::KvTransferServer(const KvTransferServerOptions& options, ExportFn export_fn,
                                   ReleaseFn release_fn, StateFns state_fns)
    : options_(options),
      export_fn_(std::move(export_fn)),
      release_fn_(std::move(release_fn)),
      state_fns_(std::move(state_fns)) {}

Result<std::unique_ptr<KvTransferServer>> KvTransferServer::start(
    const KvTransferServerOptions& options, ExportFn export_fn, ReleaseFn release_fn,
    StateFns state_fns) {
  const std::string where = "KV transfer server on " + host_port(options.host, options.port);
  if (!export_fn || !release_fn)
    return make_error(where, ": needs an export and a release function");
  if (bool(state_fns.export_state) != bool(state_fns.release_state))
    return make_error(where, ": a state export function needs a state release function");
  if (options.port < 0 || options.port > 65535)
    return make_error(where, ": port ", options.port, " out of range");
  if (options.compat.block_size <= 0 || options.compat.tp < 1)
    return make_error(where, ": block size ", options.compat.block_size, " and tp ",
                      options.compat.tp, " must be positive");
  if (options.compat.model.size() > kKvMaxStringBytes ||
      options.compat.layout.size() > kKvMaxStringBytes)
    return make_error(where, ": model and layout tags must be at most ", kKvMaxStringBytes,
                      " bytes");
  if (!(options.handle_ttl_s > 0) || !(options.io_timeout_s > 0) || options.max_connections < 1)
    return make_error(where, ": handle_ttl_s, io_timeout_s and max_connections must be positive");

  std::unique_ptr<KvTransferServer> s(new KvTransferServer(
      options, std::move(export_fn), std::move(release_fn), std::move(state_fns)));
  if (::pipe2(s->wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0)
    return make_error(where, ": cannot create a pipe: ", errno_text(errno));

  auto listener = listen_on(options.host, options.port, std::max(options.max_connections, 16),
                            s->port_, kSocketBufferBytes);
  if (!listener.ok()) return make_error(where, ": ", listener.message());
  s->listen_fd_ = listener->release();
  s->accept_thread_ = std::thread(&KvTransferServer::accept_loop, s.get());
  s->reap_thread_ = std::thread(&KvTransferServer::reap_loop, s.get());
  return s;
}

KvTransferServer::~KvTransferServer() {
  stop();
}

uint64_t KvTransferServer::offer(std::vector<int32_t> tokens, std::vector<int32_t> block_ids,
                                 OfferedState state) {
  // Without the functions to read and release it, a state is not kept (nor released here).
  if (!state_fns_.export_state) state = {};
  Offer o{std::move(tokens), std::move(block_ids), deadline_after(options_.handle_ttl_s), state};
  uint64_t handle = random_handle();
  {
    std::lock_guard lock(mutex_);
    ++stats_.offered;
    ++stats_.live_handles;
    stats_.pinned_blocks += int64_t(o.block_ids.size());
    if (!stopping_) {
      while (offers_.count(handle) != 0) handle = random_handle();
      expiries_.emplace_back(o.expiry, handle);
      offers_.emplace(handle, std::move(o));
      reap_cv_.notify_one();
      return handle;
    }
  }
  finish(&o, &KvTransferServerStats::cancelled, 0);  // stopped: never servable
  return handle;
}

void KvTransferServer::cancel(uint64_t handle) {
  Offer o;
  {
    std::lock_guard lock(mutex_);
    const auto it = offers_.find(handle);
    if (it == offers_.end()) return;
    o = std::move(it->second);
    offers_.erase(it);
  }
  finish(&o, &KvTransferServerStats::cancelled, 0);
}

KvTransferServerStats KvTransferServer::stats() const {
  std::lock_guard lock(mutex_);
  KvTransferServerStats s = stats_;
  s.connections = std::count_if(connections_.begin(), connections_.end(),
                                [](const auto& c) { return !c->done; });
  return s;
}

void KvTransferServer::finish(const Offer* offer, uint64_t KvTransferServerStats::*counter,
                              uint64_t bytes_sent, Connection* conn) {
  if (offer != nullptr) {
    release_fn_(offer->block_ids);
    if (offer->state.slot >= 0) state_fns_.release_state(offer->state.slot);
  }
  std::lock_guard lock(mutex_);
  if (offer != nullptr) {
    stats_.pinned_blocks -= int64_t(offer->block_ids.size());
    --stats_.live_handles;
  }
  if (counter != nullptr) ++(stats_.*counter);
  stats_.bytes_sent += bytes_sent;
  if (conn != nullptr) conn->done = true;
}

void KvTransferServer::stop() {
  std::lock_guard stop_lock(stop_mutex_);
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  reap_cv_.notify_all();
  if (wake_fds_[1] >= 0) (void)!::write(wake_fds_[1], "s", 1);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (reap_thread_.joinable()) reap_thread_.join();
  // No new connections now. Wake the ones in flight: their blocked polls return, they fail
  // their pulls and release what they claimed.
  std::list<std::unique_ptr<Connection>> conns;
  {
    std::lock_guard lock(mutex_);
    for (const auto& c : connections_) ::shutdown(c->fd, SHUT_RDWR);
    conns.swap(connections_);
  }
  for (auto& c : conns) {
    c->thread.join();
    ::close(c->fd);
  }
  std::unordered_map<uint64_t, Offer> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(offers_);
    expiries_.clear();
  }
  for (const auto& [handle, o] : left) finish(&o, &KvTransferServerStats::cancelled, 0);
  for (int* fd : {&listen_fd_, &wake_fds_[0], &wake_fds_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void KvTransferServer::join_finished() {
  std::list<std::unique_ptr<Connection>> done;
  {
    std::lock_guard lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      const auto next = std::next(it);
      if ((*it)->done) done.splice(done.end(), connections_, it);
      it = next;
    }
  }
  for (auto& c : done) {
    c->thread.join();
    ::close(c->fd);
  }
}

void KvTransferServer::accept_loop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (p[1].revents != 0) {
      char buf[64];
      while (::read(wake_fds_[0], buf, sizeof buf) > 0) {
      }
    }
    join_finished();
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if ((p[0].revents & POLLIN) == 0) continue;
    while (true) {
      Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
      if (fd.get() < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EMFILE/ENFILE/ENOBUFS: the pending connection stays queued; back off instead of
        // spinning on a listener that stays readable.
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        break;
      }
      set_int_option(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
      // A backstop: the transfer itself waits in poll() with deadlines of io_timeout_s.
      set_timeout_option(fd.get(), SO_SNDTIMEO, options_.io_timeout_s);
      set_timeout_option(fd.get(), SO_RCVTIMEO, options_.io_timeout_s);
      std::unique_lock lock(mutex_);
      const auto active = std::count_if(connections_.begin(), connections_.end(),
                                        [](const auto& c) { return !c->done; });
      if (active >= options_.max_connections) {
        ++stats_.busy;
        lock.unlock();
        send_error(fd.get(), KvErrorCode::kBusy,
                   "busy: serving " + std::to_string(options_.max_connections) +
                       " KV transfers already (max_connections); retry later",
                   deadline_after(std::min(options_.io_timeout_s, 0.1)));
        continue;
      }
      auto conn = std::make_unique<Connection>();
      conn->fd = fd.get();
      Connection* c = conn.get();
      try {
        conn->thread = std::thread(&KvTransferServer::serve, this, c);
      } catch (const std::system_error&) {
        ++stats_.busy;  // no thread to serve it: as if full
        continue;
      }
      fd.release();
      connections_.push_back(std::move(conn));
    }
  }
}

void KvTransferServer::reap_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (expiries_.empty()) {
      reap_cv_.wait(lock);
      continue;
    }
    const auto [when, handle] = expiries_.front();
    if (SteadyClock::now() < when) {
      reap_cv_.wait_until(lock, when);
      continue;
    }
    expiries_.pop_front();
    const auto it = offers_.find(handle);
    // Gone (pulled, cancelled) or a later offer that drew the same handle.
    if (it == offers_.end() || it->second.expiry != when) continue;
    Offer o = std::move(it->second);
    offers_.erase(it);
    lock.unlock();
    finish(&o, &KvTransferServerStats::expired, 0);
    lock.lock();
  }
}

void KvTransferServer::serve(Connection* conn) {
  const int fd = conn->fd;
  ServeState st;
  const Outcome outcome = serve_pull(fd, st);
  // The puller sees the end of the stream at once (a failure mid-transfer included); the fd is
  // closed by whoever joins this thread.
  ::shutdown(fd, SHUT_RDWR);
  uint64_t KvTransferServerStats::*counter = nullptr;
  switch (outcome) {
    case Outcome::kPulled:
      counter = &KvTransferServerStats::pulled;
      if (st.state_sent) {
        std::lock_guard lock(mutex_);
        ++stats_.states_sent;
      }
      break;
    case Outcome::kFailed:
      counter = &KvTransferServerStats::failed;
      break;
    case Outcome::kRefused:
      counter = &KvTransferServerStats::refused;
      break;
    case Outcome::kMalformed:
      counter = &KvTransferServerStats::malformed;
      break;
  }
  // The outcome shows in stats() together with the freed connection slot, after the release.
  finish(st.has_claim ? &st.claimed : nullptr, counter, st.bytes_sent, conn);
  (void)!::write(wake_fds_[1], "d", 1);  // the accept thread joins this one
}

KvTransferServer::Outcome KvTransferServer::serve_pull(int fd, ServeState& st) {
  const double io_s = options_.io_timeout_s;
  auto reply_error = [&](KvErrorCode code, const std::string& message) {
    send_error(fd, code, message, deadline_after(io_s));
  };

  // The PULL, whole within io_timeout_s of the connect.
  const Deadline pull_deadline = deadline_after(io_s);
  std::vector<uint8_t> message(kKvHeaderBytes);
  Io io = recv_all(fd, message.data(), kKvHeaderBytes, pull_deadline);
  if (!io.ok()) {
    if (io.kind == Io::kTimeout)
      reply_error(KvErrorCode::kBadRequest, "no PULL within " + seconds_text(io_s) + " s");
    return Outcome::kMalformed;
  }
  const auto header = parse_message_header(message);
  if (!header.ok() || header->type != KvMessageType::kPull) {
    reply_error(KvErrorCode::kBadRequest,
                "not a KV transfer PULL: " +
                    (header.ok() ? std::string("a ") + to_string(header->type) + " message"
                                 : header.message()));
    return Outcome::kMalformed;
  }
  message.resize(kKvHeaderBytes + header->payload_bytes);
  io = recv_all(fd, message.data() + kKvHeaderBytes, header->payload_bytes, pull_deadline);
  if (!io.ok()) return Outcome::kMalformed;
  auto pull = parse_pull_message(message);
  if (!pull.ok()) {
    reply_error(KvErrorCode::kBadRequest, "malformed PULL: " + pull.message());
    return Outcome::kMalformed;
  }
  std::vector<uint8_t>().swap(message);

  // Claim the handle: from here on this connection releases its blocks, whatever happens.
  {
    std::lock_guard lock(mutex_);
    const auto it = offers_.find(pull->handle);
    if (it != offers_.end()) {
      st.claimed = std::move(it->second);
      st.has_claim = true;
      offers_.erase(it);
    }
  }
  if (!st.has_claim) {
    reply_error(KvErrorCode::kUnknownHandle,
                "handle " + hex64(pull->handle) + " is unknown or expired (offered handles live " +
                    seconds_text(options_.handle_ttl_s) + " s and are pulled once)");
    return Outcome::kRefused;
  }
  // Read from the puller's side: "here" is the puller.
  const std::string mismatch = compat_mismatch(pull->compat, options_.compat);
  if (!mismatch.empty()) {
    reply_error(KvErrorCode::kIncompatible, "refused: " + mismatch);
    return Outcome::kRefused;
  }
  const Offer& offer = st.claimed;
  const int32_t bs = options_.compat.block_size;
  const int32_t n_offered =
      int32_t(std::min(offer.block_ids.size(), offer.tokens.size() / size_t(bs)));
  const int32_t n_pulled = int32_t(pull->tokens.size() / size_t(bs));
  const int32_t common = common_full_blocks(offer.tokens, n_offered, pull->tokens, bs);
  if (common == 0 && n_offered > 0 && n_pulled > 0) {
    const auto diff =
        std::mismatch(offer.tokens.begin(), offer.tokens.begin() + bs, pull->tokens.begin());
    reply_error(KvErrorCode::kTokensDiffer,
                "refused: the prompt differs from the offered one at token " +
                    std::to_string(diff.first - offer.tokens.begin()) +
                    " (block 0): no full block in common");
    return Outcome::kRefused;
  }
  if (pull->first_block > common) {
    reply_error(KvErrorCode::kTokensDiffer,
                "refused: first block " + std::to_string(pull->first_block) + " is beyond the " +
                    std::to_string(common) + " full blocks the prompts share (offered " +
                    std::to_string(n_offered) + ", pulled prompt has " + std::to_string(n_pulled) +
                    ")");
    return Outcome::kRefused;
  }
  const int32_t first = pull->first_block;
  const int32_t n = common - first;

  // The blocks' bytes.
  KvBlocks blocks;
  blocks.layout = options_.compat.layout;
  if (n > 0) {
    Result<KvBlocks> exported = checked_export(
        [&] {
          return export_fn_(
              std::span<const int32_t>(offer.block_ids).subspan(size_t(first), size_t(n)));
        },
        n, "blocks");
    if (!exported.ok()) {
      reply_error(KvErrorCode::kExportFailed, exported.message());
      return Outcome::kFailed;
    }
    blocks = std::move(exported).value();
  }
  const size_t bpb = n > 0 ? blocks.bytes_per_block : 0;

  // The recurrent state, when the puller lacks it and the prompts share its blocks.
  KvBlocks state;
  int32_t state_at = 0;
  if (offer.state.slot >= 0 && offer.state.at_block > first && offer.state.at_block <= common) {
    Result<KvBlocks> exported = checked_export(
        [&] { return state_fns_.export_state(offer.state.slot); }, 1, "recurrent state");
    if (!exported.ok()) {
      reply_error(KvErrorCode::kExportFailed, exported.message());
      return Outcome::kFailed;
    }
    state = std::move(exported).value();
    state_at = offer.state.at_block;
  }

  ReplyHeader ok;
  ok.ok = true;
  ok.first_block = first;
  ok.n_blocks = n;
  ok.bytes_per_block = bpb;
  ok.layout = blocks.layout;
  ok.state_at = state_at;
  ok.state_bytes = state_at > 0 ? state.bytes_per_block : 0;
  ok.state_layout = state_at > 0 ? state.layout : std::string();
  const std::vector<uint8_t> ok_bytes = encode_reply_header(ok);
  io = send_all(fd, ok_bytes, deadline_after(io_s));
  st.bytes_sent += io.done;
  if (!io.ok()) return Outcome::kFailed;

  // BLOCK frames straight from the exported buffer, in groups; END rides with the last group.
  // The send_delay_ms test hook paces them one block at a time.
  const int32_t n_send =
      options_.fail_after_blocks >= 0 ? std::min(n, options_.fail_after_blocks) : n;
  const size_t group_max_blocks = options_.send_delay_ms > 0 ? 1 : kSendGroupMaxBlocks;
  std::vector<uint8_t> heads((kSendGroupMaxBlocks + 2) * kKvFrameHeadBytes);
  std::vector<iovec> iov;
  iov.reserve(2 * kSendGroupMaxBlocks + 3);
  uint32_t crc_of_crcs = 0;
  for (int32_t sent = 0;;) {
    iov.clear();
    size_t g = 0, group_bytes = 0;
    while (sent + int32_t(g) < n_send && g < group_max_blocks &&
           (g == 0 || group_bytes + bpb <= kSendGroupBytes)) {
      const int32_t i = sent + int32_t(g);
      uint8_t* data = blocks.bytes.data() + size_t(i) * bpb;
      const uint32_t crc = crc32c(data, bpb);
      crc_of_crcs = kv_crc_chain(crc_of_crcs, crc);
      if (first + i == options_.corrupt_block) data[bpb / 2] ^= 0x5A;
      uint8_t* head = heads.data() + g * kKvFrameHeadBytes;
      encode_frame_head(FrameHead{false, first + i, crc}, bpb, head);
      iov.push_back({head, kKvFrameHeadBytes});
      iov.push_back({data, bpb});
      ++g;
      group_bytes += bpb;
    }
    const bool last = sent + int32_t(g) == n;
    if (g == 0 && !last) break;  // fail_after_blocks reached
    if (options_.send_delay_ms > 0 && sent > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.send_delay_ms));
    if (last) {
      uint8_t* head = heads.data() + g * kKvFrameHeadBytes;
      if (state_at > 0) {
        const size_t sb = state.bytes.size();
        const uint32_t crc = crc32c(state.bytes.data(), sb);
        crc_of_crcs = kv_crc_chain(crc_of_crcs, crc);
        if (options_.corrupt_state) state.bytes[sb / 2] ^= 0x5A;
        encode_frame_head(FrameHead{false, state_at, crc, true}, sb, head);
        iov.push_back({head, kKvFrameHeadBytes});
        iov.push_back({state.bytes.data(), sb});
        head += kKvFrameHeadBytes;
      }
      encode_frame_head(FrameHead{true, n, crc_of_crcs}, 0, head);
      iov.push_back({head, kKvFrameHeadBytes});
    }
    io = send_all(fd, iov.data(), iov.size(), deadline_after(io_s));
    st.bytes_sent += io.done;
    if (!io.ok()) return Outcome::kFailed;
    sent += int32_t(g);
    {
      std::lock_guard lock(mutex_);
      stats_.blocks_sent += g;
    }
    if (last) break;
  }
  if (n_send < n) return Outcome::kFailed;  // fail_after_blocks: the caller closes the connection

  // The ACK: the pull is complete only once the puller verified everything.
  uint8_t ack_bytes[kAckBytes];
  io = recv_all(fd, ack_bytes, sizeof ack_bytes, deadline_after(io_s));
  if (!io.ok()) return Outcome::kFailed;
  const auto ack = parse_ack_message(ack_bytes);
  if (!ack.ok() || ack->n_blocks != n || ack->crc != crc_of_crcs) return Outcome::kFailed;
  st.state_sent = state_at > 0;
  return Outcome::kPulled;
}

// ---------------------------------------------------------------------------------------------
// The puller

Result<KvPullResult> kv_pull(const KvPullRequest& req) {
  const auto t0 = SteadyClock::now();
  const Deadline deadline = deadline_after(req.timeout_s);
  const std::string where = "KV transfer from " + host_port(req.host, req.port);
  if (req.port <= 0 || req.port > 65535) return make_error(where, ": port out of range");
  if (!(req.timeout_s > 0)) return make_error(where, ": timeout_s must be positive");
  if (req.first_block < 0) return make_error(where, ": first_block ", req.first_block, " < 0");
  if (req.tokens.size() > kKvMaxTokens)
    return make_error(where, ": ", req.tokens.size(), " tokens (at most ", kKvMaxTokens, ")");
  if (req.compat.model.size() > kKvMaxStringBytes || req.compat.layout.size() > kKvMaxStringBytes)
    return make_error(where, ": model and layout tags must be at most ", kKvMaxStringBytes,
                      " bytes");
  auto timed_out = [&](const std::string& what) {
    return make_error(where, ": timed out after ", seconds_text(req.timeout_s), " s ", what);
  };

  auto connected = connect_to(req.host, req.port, deadline, kSocketBufferBytes);
  if (!connected.ok()) return make_error(where, ": ", connected.message());
  const Fd fd = std::move(connected).value();

  PullMessage pull;
  pull.compat = req.compat;
  pull.handle = req.handle;
  pull.first_block = req.first_block;
  pull.tokens = req.tokens;
  Io io = send_all(fd.get(), encode_pull_message(pull), deadline);
  if (io.kind == Io::kTimeout) return timed_out("sending the pull");
  if (!io.ok()) return make_error(where, ": cannot send the pull: ", io.text());

  // The reply: OK or ERROR.
  std::vector<uint8_t> reply_bytes(kKvHeaderBytes);
  io = recv_all(fd.get(), reply_bytes.data(), kKvHeaderBytes, deadline);
  if (io.ok()) {
    const auto h = parse_message_header(reply_bytes);
    if (!h.ok()) return make_error(where, ": not a KV transfer reply: ", h.message());
    if (h->type != KvMessageType::kOk && h->type != KvMessageType::kError)
      return make_error(where, ": expected an OK or ERROR reply, got ", to_string(h->type));
    reply_bytes.resize(kKvHeaderBytes + h->payload_bytes);
    io = recv_all(fd.get(), reply_bytes.data() + kKvHeaderBytes, h->payload_bytes, deadline);
  }
  if (io.kind == Io::kTimeout) return timed_out("waiting for the reply");
  if (!io.ok())
    return make_error(where, ": ", io.text(), " before the reply (is ",
                      host_port(req.host, req.port), " a KV transfer server?)");
  const auto reply = parse_reply_header(reply_bytes);
  if (!reply.ok()) return make_error(where, ": bad reply: ", reply.message());
  if (!reply->ok) return make_error(where, ": ", reply->message);
  const int32_t n = reply->n_blocks;
  const size_t bpb = reply->bytes_per_block;
  const int64_t n_max =
      int64_t(req.tokens.size()) / std::max(req.compat.block_size, 1) - req.first_block;
  if (reply->first_block != req.first_block || n > std::max<int64_t>(n_max, 0))
    return make_error(where, ": the server offers blocks [", reply->first_block, ", ",
                      int64_t(reply->first_block) + n, ") for a pull of at most [", req.first_block,
                      ", ", req.first_block + std::max<int64_t>(n_max, 0), ")");
  const uint64_t state_bytes = reply->state_bytes;
  if (reply->state_at > 0 && reply->state_at > req.first_block + n)
    return make_error(where, ": the server sends a state after block ", reply->state_at,
                      " with blocks up to ", req.first_block + n);
  const uint64_t total = uint64_t(n) * bpb;
  if (total + state_bytes > req.max_bytes)
    return make_error(where, ": ", n, " blocks of ", bpb, " bytes and a state of ", state_bytes,
                      " bytes exceed max_bytes (", req.max_bytes, ")");

  KvPullResult out;
  out.first_block = req.first_block;
  out.blocks.layout = reply->layout;
  out.blocks.n_blocks = n;
  out.blocks.bytes_per_block = bpb;
  std::vector<uint8_t>& bytes = out.blocks.bytes;
  try {
    bytes.reserve(total);  // address space only: pages are touched as blocks arrive
  } catch (const std::bad_alloc&) {
    return make_error(where, ": cannot allocate ", total, " bytes for ", n, " blocks");
  }
  advise_huge_pages(bytes.data(), total);

  // Block i's bytes and the next frame's head (block i+1's or END) arrive in one readv:
  //   [head 0] [data 0 | head 1] [data 1 | head 2] ... [data n-1 | END]
  uint8_t next[kKvFrameHeadBytes];
  auto frame_error = [&](int32_t received, const Io& failed) {
    if (failed.kind == Io::kTimeout)
      return timed_out("(" + std::to_string(received) + " of " + std::to_string(n) +
                       " blocks received)");
    return make_error(where, ": ", failed.text(), " after ", received, " of ", n, " blocks");
  };
  io = recv_all(fd.get(), next, sizeof next, deadline);
  if (!io.ok()) return frame_error(0, io);
  uint32_t crc_of_crcs = 0;
  for (int32_t i = 0; i < n; ++i) {
    const auto head = parse_block_frame_header(next, bpb);
    if (!head.ok()) return make_error(where, ": block ", req.first_block + i, ": ", head.message());
    if (head->end || head->state)
      return make_error(where, ": the server ended the stream after ", i, " of ", n, " blocks");
    if (head->index != req.first_block + i)
      return make_error(where, ": block ", head->index, " arrived where block ",
                        req.first_block + i, " was due");
    bytes.resize(size_t(i + 1) * bpb);
    uint8_t* data = bytes.data() + size_t(i) * bpb;
    iovec iov[2] = {{data, bpb}, {next, sizeof next}};
    io = recv_all(fd.get(), iov, 2, deadline);
    const bool have_block = io.done >= bpb;
    if (have_block) {
      const uint32_t crc = crc32c(data, bpb);
      if (crc != head->crc)
        return make_error(where, ": block ", head->index, " checksum mismatch (crc32c ",
                          hex32(head->crc), " sent, ", hex32(crc),
                          " received): the data was corrupted in transit");
      crc_of_crcs = kv_crc_chain(crc_of_crcs, crc);
    }
    if (!io.ok()) return frame_error(i + (have_block ? 1 : 0), io);
  }
  if (state_bytes > 0) {
    const auto head = parse_block_frame_header(next, bpb, state_bytes);
    if (!head.ok()) return make_error(where, ": the state: ", head.message());
    if (!head->state || head->index != reply->state_at)
      return make_error(where, ": expected the state after block ", reply->state_at,
                        " after the blocks");
    out.state.layout = reply->state_layout;
    out.state.n_blocks = 1;
    out.state.bytes_per_block = size_t(state_bytes);
    try {
      out.state.bytes.resize(size_t(state_bytes));
    } catch (const std::bad_alloc&) {
      return make_error(where, ": cannot allocate ", state_bytes, " bytes for the state");
    }
    iovec iov[2] = {{out.state.bytes.data(), size_t(state_bytes)}, {next, sizeof next}};
    io = recv_all(fd.get(), iov, 2, deadline);
    if (!io.ok()) {
      if (io.kind == Io::kTimeout) return timed_out("(receiving the state)");
      return make_error(where, ": ", io.text(), " while receiving the state");
    }
    const uint32_t crc = crc32c(out.state.bytes.data(), size_t(state_bytes));
    if (crc != head->crc)
      return make_error(where, ": the state's checksum mismatch (crc32c ", hex32(head->crc),
                        " sent, ", hex32(crc), " received): the data was corrupted in transit");
    crc_of_crcs = kv_crc_chain(crc_of_crcs, crc);
    out.state_at = reply->state_at;
  }
  const auto end = parse_block_frame_header(next, bpb);
  if (!end.ok()) return make_error(where, ": after ", n, " blocks: ", end.message());
  if (!end->end)
    return make_error(where, ": block ", end->index, " arrived after the ", n, " announced");
  if (end->index != n || end->crc != crc_of_crcs)
    return make_error(where, ": END says ", end->index, " blocks with crc ", hex32(end->crc),
                      "; received ", n, " with crc ", hex32(crc_of_crcs));

  // Best effort: the data is verified; the server releases its pins either way.
  (void)send_all(fd.get(), encode_ack_message(AckMessage{n, crc_of_crcs}), deadline);
  out.seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  return out;
}

}  // namespace sluice
