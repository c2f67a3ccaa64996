// libFuzzer target: the KV transfer's wire format (kv_io/kv_transfer.h) and its server. The first
// byte picks what the rest is fed to:
//   0: parse_message_header
//   1: parse_pull_message       accepted => encode_pull_message gives back the same bytes
//   2: parse_reply_header       accepted => encode_reply_header gives back the same bytes
//   3: parse_block_frame_header (bytes_per_block, and the state's bytes, from the next 4 bytes)
//      accepted => same bytes
//   4: parse_ack_message        accepted => same bytes
//   5: common_full_blocks on two token arrays cut from the rest: a count no larger than either
//      prompt's full blocks, and the blocks before it equal
//   6, 7: a live server on loopback: the bytes go down a connection as they are (7: when they
//      parse as a PULL, its handle is swapped for a freshly offered one first, so the claim,
//      compat, tokens, export and send paths run, with a recurrent state offered after half
//      the blocks); whatever comes back must start with a well-formed OK or ERROR, and every
//      offered pin (blocks and state) must be released exactly once
// Checks: no crash, hang, leak or exception; hostile sizes never allocate beyond the input.
//
//   scripts/fuzz 60 kv_transfer_fuzz
// Seeds: fuzz/seeds/kv_transfer_fuzz (a PULL, OKs, an ERROR, BLOCK and STATE heads, an END, an
// ACK).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kv_io/kv_transfer.h"

namespace {

using namespace sluice;

constexpr int32_t kBlockSize = 4;
constexpr size_t kBytesPerBlock = 64;
constexpr int32_t kPoolBlocks = 16;

// Every failed check names itself (and errno) before aborting, so a crash report says which.
[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "kv_transfer_fuzz: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  std::abort();
}

bool same(std::span<const uint8_t> a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void round_trips(std::span<const uint8_t> in, uint8_t pick) {
  switch (pick) {
    case 0:
      (void)parse_message_header(in);
      break;
    case 1:
      if (const auto p = parse_pull_message(in); p.ok() && !same(in, encode_pull_message(*p)))
        fail("PULL does not round-trip");
      break;
    case 2:
      if (const auto r = parse_reply_header(in); r.ok() && !same(in, encode_reply_header(*r)))
        fail("reply header does not round-trip");
      break;
    case 3: {
      if (in.size() < 4) return;
      const uint64_t bpb = uint64_t(in[0]) | uint64_t(in[1]) << 8 | uint64_t(in[2]) << 16 |
                           uint64_t(in[3] & 0x7f) << 24;
      const auto head = in.subspan(4);
      if (const auto f = parse_block_frame_header(head, bpb, bpb); f.ok()) {
        uint8_t out[kKvFrameHeadBytes];
        encode_frame_head(*f, bpb, out);
        if (!std::equal(head.begin(), head.end(), out))
          fail("block frame head does not round-trip");
      }
      break;
    }
    case 4:
      if (const auto a = parse_ack_message(in); a.ok() && !same(in, encode_ack_message(*a)))
        fail("ACK does not round-trip");
      break;
    case 5: {
      if (in.empty()) return;
      std::vector<int32_t> a, b;
      const size_t cut = std::min<size_t>(in[0], in.size() - 1);
      for (size_t i = 1; i < in.size(); ++i) (i <= cut ? a : b).push_back(in[i] % 4);
      const int32_t bs = 1 + in[0] % 3;
      const int32_t n = common_full_blocks(a, int32_t(a.size()), b, bs);
      if (n < 0 || size_t(n) > a.size() / size_t(bs) || size_t(n) > b.size() / size_t(bs))
        fail("common_full_blocks out of range");
      if (!std::equal(a.begin(), a.begin() + n * bs, b.begin()))
        fail("common_full_blocks counted differing blocks");
      break;
    }
    default:
      break;
  }
}

// One server for the whole run; its exporter serves a fixed pool, its release log is checked.
struct LiveServer {
  std::unique_ptr<KvTransferServer> server;
  std::vector<uint8_t> pool = std::vector<uint8_t>(kPoolBlocks * kBytesPerBlock, 0xab);
  std::mutex mu;
  std::map<int32_t, int> pinned;  // id -> times offered and not yet released
  int pinned_states = 0;          // likewise, the state slot kStateSlot
  static constexpr int32_t kStateSlot = 3;
  static constexpr size_t kStateBytes = 96;

  LiveServer() {
    KvTransferServerOptions o;
    o.compat.model = "fuzz model";
    o.compat.layout = "fuzz layout";
    o.compat.block_size = kBlockSize;
    o.io_timeout_s = 1;
    auto exporter = [this](std::span<const int32_t> ids) -> Result<KvBlocks> {
      KvBlocks b;
      b.layout = "fuzz layout";
      b.n_blocks = int32_t(ids.size());
      b.bytes_per_block = kBytesPerBlock;
      for (int32_t id : ids) {
        if (id < 0 || id >= kPoolBlocks)
          fail("exported a block that was never offered");  // only offered ids are exported
        b.bytes.insert(b.bytes.end(), pool.begin() + id * kBytesPerBlock,
                       pool.begin() + (id + 1) * kBytesPerBlock);
      }
      return b;
    };
    auto release = [this](std::span<const int32_t> ids) {
      std::lock_guard lock(mu);
      for (int32_t id : ids)
        if (--pinned[id] < 0) fail("a block was released twice");  // released twice
    };
    KvTransferServer::StateFns state_fns;
    state_fns.export_state = [](int32_t slot) -> Result<KvBlocks> {
      if (slot != kStateSlot) fail("exported a state that was never offered");
      KvBlocks b;
      b.layout = "fuzz state";
      b.n_blocks = 1;
      b.bytes_per_block = kStateBytes;
      b.bytes.assign(kStateBytes, 0xcd);
      return b;
    };
    state_fns.release_state = [this](int32_t slot) {
      std::lock_guard lock(mu);
      if (slot != kStateSlot || --pinned_states < 0) fail("a state was released twice");
    };
    auto s = KvTransferServer::start(o, exporter, release, state_fns);
    if (!s.ok()) fail("the server did not start");
    server = std::move(s).value();
  }
  bool all_released() {
    std::lock_guard lock(mu);
    return pinned_states == 0 &&
           std::all_of(pinned.begin(), pinned.end(), [](const auto& p) { return p.second == 0; });
  }
};

void live(std::span<const uint8_t> in, bool swap_handle) {
  static LiveServer* const live = new LiveServer();  // lives for the whole run
  std::vector<uint8_t> bytes(in.begin(), in.end());
  if (swap_handle) {
    auto pull = parse_pull_message(in);
    if (!pull.ok()) return;
    // Offer as many blocks as its tokens fill (at most the pool), then pull that handle.
    const size_t n = std::min<size_t>(pull->tokens.size() / kBlockSize, kPoolBlocks);
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = int32_t(i);
    const OfferedState state =
        n > 0 ? OfferedState{LiveServer::kStateSlot, int32_t(n + 1) / 2} : OfferedState{};
    {
      std::lock_guard lock(live->mu);
      for (int32_t id : ids) ++live->pinned[id];
      live->pinned_states += state.slot >= 0 ? 1 : 0;
    }
    pull->handle = live->server->offer(pull->tokens, ids, state);
    bytes = encode_pull_message(*pull);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(live->server->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Generous bounds: CI runs two ASan fuzzers on two cores; the server's own io_timeout is 1 s.
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  // Closed with a reset: tens of thousands of connections a run leave no TIME-WAIT behind to
  // exhaust the ephemeral ports.
  const linger no_linger{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_linger, sizeof no_linger);
  // libFuzzer's -timeout alarm (SIGALRM) interrupts blocking calls: an interrupted connect goes
  // on in the background, so wait for it and read its outcome; sends and receives are retried.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (errno != EINTR) fail("connect to the server failed");
    pollfd p{fd, POLLOUT, 0};
    while (::poll(&p, 1, 5000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    errno = err;
    if ((p.revents & POLLOUT) == 0 || err != 0) fail("connect to the server failed");
  }
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += size_t(n);
    else if (n < 0 && errno == EINTR)
      continue;
    else
      break;  // the server may close early on a malformed message
  }
  ::shutdown(fd, SHUT_WR);  // no ACK: the server sees the end after its reply
  std::vector<uint8_t> reply;
  uint8_t buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      reply.insert(reply.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) fail("the server sent nothing within 5 s (hung)");
    break;  // the end, or a reset by the server
  }
  ::close(fd);
  if (!reply.empty()) {
    const auto h = parse_message_header(reply);
    if (!h.ok() || reply.size() < kKvHeaderBytes + h->payload_bytes)
      fail("the reply is cut short or its header is malformed");
    const auto r = parse_reply_header(std::span(reply).first(kKvHeaderBytes + h->payload_bytes));
    if (!r.ok()) fail("the reply is neither a well-formed OK nor ERROR");
  }
  if (swap_handle) {
    // The claimed handle is released once the connection ends (pulled or failed).
    for (int i = 0; i < 5000 && !live->all_released(); ++i) ::usleep(1000);
    if (!live->all_released())
      fail("an offered block was not released within 5 s of the connection's end");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  const uint8_t pick = data[0] % 8;
  if (pick < 6) {
    round_trips(in, pick);
  } else {
    live(in, pick == 7);
  }
  return 0;
}
