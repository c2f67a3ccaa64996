// The KV transfer protocol: a real server and puller over loopback TCP, a fake exporter over an
// in-memory array of random blocks and a release log, plus raw sockets for misbehaving peers.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "kv_io/kv_transfer.h"
#include "test_util.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool wait_until(const std::function<bool()>& pred, double timeout_s = 5) {
  return test::eventually(pred, std::chrono::milliseconds(int64_t(timeout_s * 1000)));
}

// A KV pool in memory: block id b holds bytes [b * bytes_per_block, (b+1) * bytes_per_block)
// of random data. Records every export and every release.
class FakeKv {
 public:
  FakeKv(int32_t n_blocks, size_t bytes_per_block, uint32_t seed = 1)
      : n_blocks_(n_blocks), bytes_per_block_(bytes_per_block) {
    bytes_.resize(size_t(n_blocks) * bytes_per_block);  // [n_blocks, bytes_per_block]
    uint64_t x = seed;  // an LCG's high bits: cheap enough for tens of MiB under sanitizers
    for (auto& b : bytes_) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      b = uint8_t(x >> 56);
    }
  }

  std::span<const uint8_t> block(int32_t id) const {
    return {bytes_.data() + size_t(id) * bytes_per_block_, bytes_per_block_};
  }
  // The bytes of `ids`, concatenated: what a pull of them must return.
  std::vector<uint8_t> expected(std::span<const int32_t> ids) const {
    std::vector<uint8_t> out;
    for (int32_t id : ids) out.insert(out.end(), block(id).begin(), block(id).end());
    return out;
  }

  KvTransferServer::ExportFn export_fn() {
    return [this](std::span<const int32_t> ids) -> Result<KvBlocks> {
      {
        std::lock_guard lock(mu_);
        exports_.emplace_back(ids.begin(), ids.end());
        if (fail_exports_) return make_error("device lost");
      }
      KvBlocks b;
      b.layout = "fake f16 B4";
      b.n_blocks = int32_t(ids.size());
      b.bytes_per_block = bytes_per_block_;
      for (int32_t id : ids) {
        if (id < 0 || id >= n_blocks_) return make_error("block ", id, " out of range");
        b.bytes.insert(b.bytes.end(), block(id).begin(), block(id).end());
      }
      return b;
    };
  }
  KvTransferServer::ReleaseFn release_fn() {
    return [this](std::span<const int32_t> ids) {
      std::lock_guard lock(mu_);
      releases_.emplace_back(ids.begin(), ids.end());
    };
  }

  std::vector<std::vector<int32_t>> releases() const {
    std::lock_guard lock(mu_);
    return releases_;
  }
  std::vector<std::vector<int32_t>> exports() const {
    std::lock_guard lock(mu_);
    return exports_;
  }
  // How many times each id was released.
  std::map<int32_t, int> release_counts() const {
    std::map<int32_t, int> m;
    for (const auto& r : releases())
      for (int32_t id : r) ++m[id];
    return m;
  }
  size_t n_releases() const { return releases().size(); }
  void fail_exports() {
    std::lock_guard lock(mu_);
    fail_exports_ = true;
  }

 private:
  int32_t n_blocks_;
  size_t bytes_per_block_;
  std::vector<uint8_t> bytes_;
  mutable std::mutex mu_;
  std::vector<std::vector<int32_t>> releases_;
  std::vector<std::vector<int32_t>> exports_;
  bool fail_exports_ = false;
};

constexpr int32_t kXferBlockSize = 4;

KvCompat test_compat() {
  KvCompat c;
  c.model = "model 123456 bytes, hash 0123abcd";
  c.layout = "f16 L2 H2 D8 B4 k-dim-major/v-row-major";
  c.block_size = kXferBlockSize;
  c.tp = 1;
  return c;
}

KvTransferServerOptions test_options() {
  KvTransferServerOptions o;
  o.compat = test_compat();
  o.io_timeout_s = 2;
  return o;
}

std::unique_ptr<KvTransferServer> start_server(FakeKv& kv,
                                               const KvTransferServerOptions& o = test_options()) {
  auto s = KvTransferServer::start(o, kv.export_fn(), kv.release_fn());
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::vector<int32_t> prompt(int n_tokens, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n_tokens));
  for (int i = 0; i < n_tokens; ++i) t[size_t(i)] = start + i * 7;
  return t;
}

KvPullRequest pull_request(const KvTransferServer& s, uint64_t handle,
                           std::vector<int32_t> tokens) {
  KvPullRequest r;
  r.host = "127.0.0.1";
  r.port = s.port();
  r.handle = handle;
  r.tokens = std::move(tokens);
  r.compat = test_compat();
  r.timeout_s = 3;
  return r;
}

// A blocking client socket connected to 127.0.0.1:port.
int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_raw(int fd, std::span<const uint8_t> bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
}

// Reads until `n` bytes or the end of the stream.
std::vector<uint8_t> recv_raw(int fd, size_t n) {
  std::vector<uint8_t> out(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) break;
    got += size_t(r);
  }
  out.resize(got);
  return out;
}

// Reads one OK/ERROR reply off a raw connection.
Result<ReplyHeader> recv_reply(int fd) {
  std::vector<uint8_t> m = recv_raw(fd, kKvHeaderBytes);
  const auto h = parse_message_header(m);
  if (!h.ok()) return make_error(h.message());
  const std::vector<uint8_t> payload = recv_raw(fd, h->payload_bytes);
  m.insert(m.end(), payload.begin(), payload.end());
  return parse_reply_header(m);
}

// ---------------------------------------------------------------------------------------------
// Wire format

TEST(KvTransferWire, PullRoundTripsAndIsStrict) {
  PullMessage p;
  p.compat = test_compat();
  p.handle = 0x0123456789abcdefull;
  p.first_block = 3;
  p.tokens = {1, -2, 3, 2147483647, -2147483647 - 1};
  const std::vector<uint8_t> m = encode_pull_message(p);
  const auto q = parse_pull_message(m);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->handle, p.handle);
  EXPECT_EQ(q->first_block, 3);
  EXPECT_EQ(q->tokens, p.tokens);
  EXPECT_EQ(compat_mismatch(q->compat, p.compat), "");

  // Every strict prefix and any trailing byte are refused.
  for (size_t n = 0; n < m.size(); ++n)
    EXPECT_FALSE(parse_pull_message(std::span(m).first(n)).ok()) << n;
  std::vector<uint8_t> longer = m;
  longer.push_back(0);
  EXPECT_FALSE(parse_pull_message(longer).ok());

  // A token count past the payload, and one past the limit, are refused before allocating.
  std::vector<uint8_t> lie = m;
  const size_t count_at = m.size() - 4 * p.tokens.size() - 4;
  lie[count_at + 3] = 0x7f;
  EXPECT_NE(parse_pull_message(lie).message().find("tokens"), std::string::npos);
}

TEST(KvTransferWire, HeaderNamesBadMagicVersionTypeAndSize) {
  const std::vector<uint8_t> http = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1'};
  EXPECT_NE(parse_message_header(http).message().find("bad magic 'GET '"), std::string::npos);

  ReplyHeader ok;
  ok.ok = true;
  ok.n_blocks = 2;
  ok.bytes_per_block = 100;
  ok.layout = "x";
  std::vector<uint8_t> m = encode_reply_header(ok);
  std::vector<uint8_t> v1 = m;  // before the recurrent state joined the stream
  v1[4] = 1;
  EXPECT_NE(parse_message_header(v1).message().find("version 1"), std::string::npos);
  std::vector<uint8_t> bad_type = m;
  bad_type[6] = 99;
  EXPECT_NE(parse_message_header(bad_type).message().find("unknown KV transfer message type 99"),
            std::string::npos);
  std::vector<uint8_t> huge = m;
  huge[8] = huge[9] = huge[10] = huge[11] = 0xff;
  EXPECT_NE(parse_message_header(huge).message().find("OK payload of 4294967295 bytes"),
            std::string::npos);
  EXPECT_FALSE(parse_message_header(std::span(m).first(11)).ok());
}

TEST(KvTransferWire, ReplyFrameAndAckRoundTrip) {
  ReplyHeader ok;
  ok.ok = true;
  ok.first_block = 2;
  ok.n_blocks = 5;
  ok.bytes_per_block = 1003;
  ok.layout = "f16 L2";
  auto r = parse_reply_header(encode_reply_header(ok));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->ok);
  EXPECT_EQ(r->first_block, 2);
  EXPECT_EQ(r->n_blocks, 5);
  EXPECT_EQ(r->bytes_per_block, 1003u);
  EXPECT_EQ(r->layout, "f16 L2");

  // With a state after block 4 (within [first_block, first_block + n_blocks]).
  ok.state_at = 4;
  ok.state_bytes = 5000;
  ok.state_layout = "state f32";
  r = parse_reply_header(encode_reply_header(ok));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->state_at, 4);
  EXPECT_EQ(r->state_bytes, 5000u);
  EXPECT_EQ(r->state_layout, "state f32");
  for (const auto& [at, bytes] : std::vector<std::pair<int32_t, uint64_t>>{
           {2, 5000}, {8, 5000}, {4, 0}, {4, kKvMaxBytesPerBlock + 1}, {0, 5000}}) {
    ok.state_at = at;
    ok.state_bytes = bytes;
    EXPECT_FALSE(parse_reply_header(encode_reply_header(ok)).ok()) << at << " " << bytes;
  }
  ok.state_at = 0;
  ok.state_bytes = 0;
  ok.state_layout.clear();
  // A layout length that swallows the state fields (found by kv_transfer_fuzz): truncated.
  {
    std::vector<uint8_t> m = encode_reply_header(ok);
    const size_t layout_at = kKvHeaderBytes + 4 + 4 + 8;
    const uint32_t swallow = uint32_t(ok.layout.size() + 16);
    std::memcpy(m.data() + layout_at, &swallow, 4);
    const auto bad = parse_reply_header(m);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("truncated"), std::string::npos) << bad.message();
  }
  ok.bytes_per_block = kKvMaxBytesPerBlock + 1;
  EXPECT_FALSE(parse_reply_header(encode_reply_header(ok)).ok());
  ok.bytes_per_block = 0;  // blocks of nothing
  EXPECT_FALSE(parse_reply_header(encode_reply_header(ok)).ok());

  ReplyHeader err;
  err.code = KvErrorCode::kUnknownHandle;
  err.message = "gone";
  r = parse_reply_header(encode_reply_header(err));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->code, KvErrorCode::kUnknownHandle);
  EXPECT_EQ(r->message, "gone");

  uint8_t head[kKvFrameHeadBytes];
  encode_frame_head(FrameHead{false, 7, 0xdeadbeef}, 1003, head);
  auto f = parse_block_frame_header(head, 1003);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_FALSE(f->end);
  EXPECT_EQ(f->index, 7);
  EXPECT_EQ(f->crc, 0xdeadbeefu);
  EXPECT_NE(parse_block_frame_header(head, 1004).message().find("1003 bytes"), std::string::npos);
  encode_frame_head(FrameHead{true, 5, 42}, 1003, head);
  f = parse_block_frame_header(head, 1003);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE(f->end);
  EXPECT_EQ(f->index, 5);

  // A STATE frame: only where the OK announced a state, of its size.
  encode_frame_head(FrameHead{false, 4, 77, true}, 5000, head);
  EXPECT_FALSE(parse_block_frame_header(head, 1003).ok());
  EXPECT_FALSE(parse_block_frame_header(head, 1003, 4999).ok());
  f = parse_block_frame_header(head, 1003, 5000);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE(f->state);
  EXPECT_FALSE(f->end);
  EXPECT_EQ(f->index, 4);
  EXPECT_EQ(f->crc, 77u);

  const auto ack = parse_ack_message(encode_ack_message(AckMessage{5, 42}));
  ASSERT_TRUE(ack.ok()) << ack.message();
  EXPECT_EQ(ack->n_blocks, 5);
  EXPECT_EQ(ack->crc, 42u);
  EXPECT_FALSE(parse_ack_message(encode_reply_header(err)).ok());
}

TEST(KvTransferWire, CommonFullBlocks) {
  const std::vector<int32_t> a = prompt(4 * kXferBlockSize + 2);
  std::vector<int32_t> b = a;
  EXPECT_EQ(common_full_blocks(a, 4, b, kXferBlockSize), 4);
  EXPECT_EQ(common_full_blocks(a, 3, b, kXferBlockSize), 3);  // fewer blocks offered
  b.resize(2 * kXferBlockSize + 3);
  EXPECT_EQ(common_full_blocks(a, 4, b, kXferBlockSize), 2);  // shorter pulled prompt
  b = a;
  b[2 * kXferBlockSize + 1] = -1;
  EXPECT_EQ(common_full_blocks(a, 4, b, kXferBlockSize), 2);  // diverges in block 2
  b[0] = -1;
  EXPECT_EQ(common_full_blocks(a, 4, b, kXferBlockSize), 0);
  EXPECT_EQ(common_full_blocks(a, 4, a, 0), 0);
}

TEST(KvTransferWire, CompatMismatchNamesEachField) {
  const KvCompat a = test_compat();
  EXPECT_EQ(compat_mismatch(a, a), "");
  KvCompat b = a;
  b.model = "other";
  EXPECT_EQ(compat_mismatch(a, b),
            "model differs (here: model 123456 bytes, hash 0123abcd, there: other)");
  b = a;
  b.block_size = 32;
  EXPECT_EQ(compat_mismatch(a, b), "block size 4 here, 32 there");
  b.tp = 2;
  b.layout = "q8";
  EXPECT_EQ(compat_mismatch(a, b),
            "KV layout differs (here: f16 L2 H2 D8 B4 k-dim-major/v-row-major, there: q8); block "
            "size 4 here, 32 there; tensor-parallel degree 1 here, 2 there");
}

// ---------------------------------------------------------------------------------------------
// Server and puller

TEST(KvTransfer, RoundTripEqualsTheSourceBytes) {
  FakeKv kv(16, 1003);  // an odd block size
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  // 5 full blocks and a partial one: the partial block is pinned (released) but not served.
  const std::vector<int32_t> ids = {9, 2, 14, 0, 7, 11};
  const std::vector<int32_t> tokens = prompt(5 * kXferBlockSize + 2);
  const uint64_t handle = server->offer(tokens, ids);
  EXPECT_NE(handle, 0u);
  EXPECT_EQ(server->stats().pinned_blocks, 6);
  EXPECT_EQ(server->stats().live_handles, 1);

  const auto r = kv_pull(pull_request(*server, handle, tokens));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->first_block, 0);
  EXPECT_EQ(r->blocks.n_blocks, 5);
  EXPECT_EQ(r->blocks.bytes_per_block, 1003u);
  EXPECT_EQ(r->blocks.layout, "fake f16 B4");
  EXPECT_EQ(r->blocks.bytes, kv.expected(std::span(ids).first(5)));
  EXPECT_GT(r->seconds, 0);

  ASSERT_TRUE(wait_until([&] { return server->stats().pulled == 1; }));
  EXPECT_EQ(kv.releases(), (std::vector<std::vector<int32_t>>{ids}));
  const auto st = server->stats();
  EXPECT_EQ(st.pinned_blocks, 0);
  EXPECT_EQ(st.live_handles, 0);
  EXPECT_EQ(st.failed + st.refused + st.expired, 0u);
  EXPECT_GT(st.bytes_sent, 5 * 1003u);
  EXPECT_EQ(kv.exports(), (std::vector<std::vector<int32_t>>{{9, 2, 14, 0, 7}}));
}

TEST(KvTransfer, FirstBlockSkipsTheBlocksThePullerHas) {
  FakeKv kv(8, 256);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> ids = {1, 3, 5, 7, 0};
  const std::vector<int32_t> tokens = prompt(5 * kXferBlockSize);
  KvPullRequest req = pull_request(*server, server->offer(tokens, ids), tokens);
  req.first_block = 2;
  const auto r = kv_pull(req);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->first_block, 2);
  EXPECT_EQ(r->blocks.n_blocks, 3);
  EXPECT_EQ(r->blocks.bytes, kv.expected(std::span(ids).subspan(2)));
  EXPECT_EQ(kv.exports(), (std::vector<std::vector<int32_t>>{{5, 7, 0}}));
  ASSERT_TRUE(wait_until([&] { return kv.n_releases() == 1; }));
  EXPECT_EQ(kv.releases()[0], ids);  // every pin, not just the ones served
}

TEST(KvTransfer, AllBlocksAlreadyHeldIsAnEmptyPull) {
  FakeKv kv(4, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize + 1);
  KvPullRequest req = pull_request(*server, server->offer(tokens, {0, 1, 2}), tokens);
  req.first_block = 2;
  const auto r = kv_pull(req);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->blocks.n_blocks, 0);
  EXPECT_TRUE(r->blocks.bytes.empty());
  EXPECT_TRUE(kv.exports().empty());
  ASSERT_TRUE(wait_until([&] { return server->stats().pulled == 1; }));
  EXPECT_EQ(kv.release_counts(), (std::map<int32_t, int>{{0, 1}, {1, 1}, {2, 1}}));
}

TEST(KvTransfer, DivergingPromptsServeOnlyTheCommonFullBlocks) {
  FakeKv kv(8, 128);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> ids = {4, 5, 6, 7};
  const std::vector<int32_t> tokens = prompt(4 * kXferBlockSize);
  std::vector<int32_t> mine = tokens;
  mine[2 * kXferBlockSize + 3] = -5;  // differs in block 2
  const auto r = kv_pull(pull_request(*server, server->offer(tokens, ids), mine));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->blocks.n_blocks, 2);
  EXPECT_EQ(r->blocks.bytes, kv.expected(std::span(ids).first(2)));
}

TEST(KvTransfer, TokensMismatchIsRefusedAndReleased) {
  FakeKv kv(8, 128);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(3 * kXferBlockSize);
  std::vector<int32_t> mine = tokens;
  mine[1] = 99999;
  const uint64_t h = server->offer(tokens, {0, 1, 2});
  const auto r = kv_pull(pull_request(*server, h, mine));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("KV transfer from 127.0.0.1:" + std::to_string(server->port())),
            std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("refused: the prompt differs from the offered one at token 1"),
            std::string::npos)
      << r.message();
  ASSERT_TRUE(wait_until([&] { return server->stats().refused == 1; }));
  EXPECT_EQ(kv.releases(), (std::vector<std::vector<int32_t>>{{0, 1, 2}}));
  EXPECT_TRUE(kv.exports().empty());

  // first_block beyond the common blocks is refused too.
  const uint64_t h2 = server->offer(tokens, {3, 4, 5});
  KvPullRequest req = pull_request(*server, h2, tokens);
  req.tokens.resize(kXferBlockSize);
  req.first_block = 2;
  const auto r2 = kv_pull(req);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.message().find("first block 2 is beyond the 1 full blocks"), std::string::npos)
      << r2.message();
  ASSERT_TRUE(wait_until([&] { return kv.n_releases() == 2; }));
}

TEST(KvTransfer, CompatMismatchIsRefusedForEachField) {
  FakeKv kv(8, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize);
  const std::vector<std::pair<std::function<void(KvCompat&)>, std::string>> cases = {
      {[](KvCompat& c) { c.model = "model 9 bytes, hash ff"; },
       "refused: model differs (here: model 9 bytes, hash ff, there: model 123456 bytes, hash "
       "0123abcd)"},
      {[](KvCompat& c) { c.layout = "q8_0 L2"; }, "refused: KV layout differs (here: q8_0 L2"},
      {[](KvCompat& c) { c.block_size = 8; }, "refused: block size 8 here, 4 there"},
      {[](KvCompat& c) { c.tp = 2; }, "refused: tensor-parallel degree 2 here, 1 there"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> ids = {int32_t(2 * i), int32_t(2 * i + 1)};
    KvPullRequest req = pull_request(*server, server->offer(tokens, ids), tokens);
    cases[i].first(req.compat);
    const auto r = kv_pull(req);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_NE(r.message().find(cases[i].second), std::string::npos) << r.message();
    ASSERT_TRUE(wait_until([&] { return kv.n_releases() == i + 1; }));
    EXPECT_EQ(kv.releases().back(), ids);
  }
  EXPECT_EQ(server->stats().refused, cases.size());
  EXPECT_TRUE(kv.exports().empty());
}

TEST(KvTransfer, UnknownHandleIsRefused) {
  FakeKv kv(4, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const auto r = kv_pull(pull_request(*server, 0x3039, prompt(kXferBlockSize)));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("handle 0x0000000000003039 is unknown or expired (offered handles "
                             "live 60 s"),
            std::string::npos)
      << r.message();
  ASSERT_TRUE(wait_until([&] { return server->stats().refused == 1; }));
  EXPECT_TRUE(kv.releases().empty());
}

TEST(KvTransfer, SecondPullOfAHandleIsRefused) {
  FakeKv kv(4, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize);
  const uint64_t h = server->offer(tokens, {0, 1});
  ASSERT_TRUE(kv_pull(pull_request(*server, h, tokens)).ok());
  const auto again = kv_pull(pull_request(*server, h, tokens));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("is unknown or expired"), std::string::npos) << again.message();
  ASSERT_TRUE(wait_until([&] { return server->stats().refused == 1; }));
  // The first transfer's thread counts it and releases the blocks after the client has them all,
  // so the refusal of the second pull, on another connection, can be counted first.
  ASSERT_TRUE(wait_until([&] { return server->stats().pulled == 1 && kv.n_releases() == 1; }));
  EXPECT_EQ(server->stats().pulled, 1u);
  EXPECT_EQ(kv.n_releases(), 1u);
}

TEST(KvTransfer, ExpiredHandleIsReleasedAndThenUnknown) {
  FakeKv kv(4, 64);
  KvTransferServerOptions o = test_options();
  o.handle_ttl_s = 0.15;
  auto server = start_server(kv, o);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize);
  const auto t0 = Clock::now();
  const uint64_t h = server->offer(tokens, {2, 3});
  ASSERT_TRUE(wait_until([&] { return kv.n_releases() == 1; }));
  EXPECT_GE(seconds_since(t0), 0.14);
  EXPECT_EQ(kv.releases()[0], (std::vector<int32_t>{2, 3}));
  ASSERT_TRUE(wait_until([&] { return server->stats().expired == 1; }));
  EXPECT_EQ(server->stats().pinned_blocks, 0);
  const auto r = kv_pull(pull_request(*server, h, tokens));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unknown or expired (offered handles live 0.15 s"), std::string::npos)
      << r.message();
  EXPECT_EQ(kv.n_releases(), 1u);
}

TEST(KvTransfer, CancelReleasesOnce) {
  FakeKv kv(4, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const uint64_t h = server->offer(prompt(2 * kXferBlockSize), {0, 1});
  server->cancel(h);
  server->cancel(h);        // no-op
  server->cancel(h ^ 0x1);  // unknown: no-op
  EXPECT_EQ(kv.releases(), (std::vector<std::vector<int32_t>>{{0, 1}}));
  const auto st = server->stats();
  EXPECT_EQ(st.cancelled, 1u);
  EXPECT_EQ(st.live_handles, 0);
}

TEST(KvTransfer, ServerClosingMidTransferFailsThePullAndReleases) {
  FakeKv kv(8, 4096);
  KvTransferServerOptions o = test_options();
  o.fail_after_blocks = 2;
  auto server = start_server(kv, o);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(8 * kXferBlockSize);
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto r = kv_pull(pull_request(*server, server->offer(tokens, ids), tokens));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("connection closed after 2 of 8 blocks"), std::string::npos)
      << r.message();
  ASSERT_TRUE(wait_until([&] { return server->stats().failed == 1; }));
  EXPECT_EQ(kv.releases(), (std::vector<std::vector<int32_t>>{ids}));
  EXPECT_EQ(server->stats().pulled, 0u);
}

// The send_delay_ms test hook (process-level tests kill a worker between blocks): one block
// per sendmsg, this long apart; blocks_sent counts each as it goes out, so a pull in progress
// shows how far it got.
TEST(KvTransfer, SendDelayPacesTheBlocksAndTheSentCountMovesDuringThePull) {
  FakeKv kv(4, 512);
  KvTransferServerOptions o = test_options();
  o.send_delay_ms = 200;
  auto server = start_server(kv, o);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(4 * kXferBlockSize);
  const std::vector<int32_t> ids = {0, 1, 2, 3};
  const uint64_t handle = server->offer(tokens, ids);
  const auto t0 = Clock::now();
  Result<KvPullResult> r = make_error("not pulled");
  std::thread puller([&] { r = kv_pull(pull_request(*server, handle, tokens)); });
  // Mid-pull: some blocks out, not all, nothing released yet.
  const bool partial = wait_until([&] { return server->stats().blocks_sent >= 1; });
  const KvTransferServerStats mid = server->stats();
  puller.join();
  ASSERT_TRUE(partial);
  EXPECT_LT(mid.blocks_sent, 4u);
  EXPECT_EQ(mid.pinned_blocks, 4);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->blocks.bytes, kv.expected(ids));
  EXPECT_GE(seconds_since(t0), 0.55);  // three delays
  ASSERT_TRUE(wait_until([&] { return server->stats().pulled == 1; }));
  EXPECT_EQ(server->stats().blocks_sent, 4u);
  EXPECT_EQ(server->stats().pinned_blocks, 0);
}

TEST(KvTransfer, ClientHangingUpMidTransferReleases) {
  FakeKv kv(64, 256 << 10);  // 16 MiB: more than the socket buffers hold
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(64 * kXferBlockSize);
  std::vector<int32_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[size_t(i)] = i;
  PullMessage p;
  p.compat = test_compat();
  p.handle = server->offer(tokens, ids);
  p.tokens = tokens;
  const int fd = connect_raw(server->port());
  send_raw(fd, encode_pull_message(p));
  const auto reply = recv_reply(fd);
  ASSERT_TRUE(reply.ok()) << reply.message();
  ASSERT_TRUE(reply->ok) << reply->message;
  EXPECT_EQ(reply->n_blocks, 64);
  EXPECT_EQ(recv_raw(fd, 1000).size(), 1000u);  // the transfer is under way
  ::close(fd);
  ASSERT_TRUE(wait_until([&] { return server->stats().failed == 1; }));
  EXPECT_EQ(kv.releases(), (std::vector<std::vector<int32_t>>{ids}));
  EXPECT_EQ(server->stats().pinned_blocks, 0);
}

TEST(KvTransfer, CorruptedBlockFailsTheChecksum) {
  FakeKv kv(8, 1000);
  KvTransferServerOptions o = test_options();
  o.corrupt_block = 3;
  auto server = start_server(kv, o);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(6 * kXferBlockSize);
  const auto r = kv_pull(pull_request(*server, server->offer(tokens, {0, 1, 2, 3, 4, 5}), tokens));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("block 3 checksum mismatch"), std::string::npos) << r.message();
  // No ACK: the server counts the pull failed and releases.
  ASSERT_TRUE(wait_until([&] { return server->stats().failed == 1; }));
  EXPECT_EQ(kv.n_releases(), 1u);
  EXPECT_EQ(server->stats().pulled, 0u);
}

// A recurrent state offered with the blocks: sent after them when the puller lacks it (its
// first_block is below the state's) and the prompts share the blocks it follows; released once
// whatever happens; a corrupted one fails the checksum.
TEST(KvTransfer, AnOfferedStateTravelsWithTheBlocks) {
  FakeKv kv(8, 256);
  std::vector<uint8_t> state(3001);
  for (size_t i = 0; i < state.size(); ++i) state[i] = uint8_t(i * 31 + 7);
  std::mutex mu;
  std::vector<int32_t> state_releases;
  KvTransferServer::StateFns fns;
  fns.export_state = [&](int32_t slot) -> Result<KvBlocks> {
    if (slot != 42) return make_error("slot ", slot, " not pinned");
    KvBlocks b;
    b.layout = "state f32 R3";
    b.n_blocks = 1;
    b.bytes_per_block = state.size();
    b.bytes = state;
    return b;
  };
  fns.release_state = [&](int32_t slot) {
    std::lock_guard lock(mu);
    state_releases.push_back(slot);
  };
  const auto released = [&] {
    std::lock_guard lock(mu);
    return state_releases.size();
  };
  for (bool corrupt : {false, true}) {
    KvTransferServerOptions o = test_options();
    o.corrupt_state = corrupt;
    auto server = KvTransferServer::start(o, kv.export_fn(), kv.release_fn(), fns);
    ASSERT_TRUE(server.ok()) << server.message();
    const std::vector<int32_t> ids = {1, 3, 5, 7};
    const std::vector<int32_t> tokens = prompt(4 * kXferBlockSize + 1);
    const size_t before = released();
    // The state after 3 blocks; a puller holding 1 block gets blocks 1..3 and the state.
    KvPullRequest req = pull_request(**server, (*server)->offer(tokens, ids, {42, 3}), tokens);
    req.first_block = 1;
    const auto r = kv_pull(req);
    if (corrupt) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.message().find("the state's checksum mismatch"), std::string::npos)
          << r.message();
    } else {
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_EQ(r->blocks.n_blocks, 3);
      EXPECT_EQ(r->state_at, 3);
      EXPECT_EQ(r->state.n_blocks, 1);
      EXPECT_EQ(r->state.layout, "state f32 R3");
      EXPECT_EQ(r->state.bytes, state);
      ASSERT_TRUE(wait_until([&] { return (*server)->stats().states_sent == 1; }));
    }
    ASSERT_TRUE(wait_until([&] { return released() == before + 1; }));
    if (corrupt) continue;
    // A puller that has the state's blocks and more (first_block 3): no state; one whose prompt
    // diverges inside the state's blocks: none either.
    req = pull_request(**server, (*server)->offer(tokens, ids, {42, 3}), tokens);
    req.first_block = 3;
    auto r2 = kv_pull(req);
    ASSERT_TRUE(r2.ok()) << r2.message();
    EXPECT_EQ(r2->state_at, 0);
    EXPECT_TRUE(r2->state.bytes.empty());
    std::vector<int32_t> other = tokens;
    other[2 * kXferBlockSize + 1] = 9999;
    r2 = kv_pull(pull_request(**server, (*server)->offer(tokens, ids, {42, 3}), other));
    ASSERT_TRUE(r2.ok()) << r2.message();
    EXPECT_EQ(r2->blocks.n_blocks, 2);
    EXPECT_EQ(r2->state_at, 0);
    // Unpulled: released at stop.
    (*server)->offer(tokens, ids, {42, 3});
    (*server)->stop();
    EXPECT_EQ(released(), before + 4);
  }
}

TEST(KvTransfer, ExportFailureIsReportedAndReleases) {
  FakeKv kv(4, 64);
  kv.fail_exports();
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize);
  const auto r = kv_pull(pull_request(*server, server->offer(tokens, {0, 1}), tokens));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("cannot read the offered blocks: device lost"), std::string::npos)
      << r.message();
  ASSERT_TRUE(wait_until([&] { return server->stats().failed == 1; }));
  EXPECT_EQ(kv.n_releases(), 1u);
}

TEST(KvTransfer, PullTimesOutAgainstASilentListener) {
  // A listener nobody accepts on: the kernel completes the handshake and buffers the PULL.
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  KvPullRequest req;
  req.host = "127.0.0.1";
  req.port = ntohs(a.sin_port);
  req.handle = 1;
  req.tokens = prompt(2 * kXferBlockSize);
  req.compat = test_compat();
  req.timeout_s = 0.3;
  const auto t0 = Clock::now();
  const auto r = kv_pull(req);
  const double took = seconds_since(t0);
  ::close(lfd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("timed out after 0.3 s waiting for the reply"), std::string::npos)
      << r.message();
  EXPECT_GE(took, 0.28);
  EXPECT_LT(took, 1.5);
}

TEST(KvTransfer, ConnectRefusedIsReported) {
  // A port that was free a moment ago.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  KvPullRequest req;
  req.host = "127.0.0.1";
  req.port = ntohs(a.sin_port);
  req.handle = 1;
  req.compat = test_compat();
  const auto r = kv_pull(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("KV transfer from 127.0.0.1:" + std::to_string(req.port) +
                             ": cannot connect: Connection refused"),
            std::string::npos)
      << r.message();
}

TEST(KvTransfer, StopReleasesLiveHandlesAndIsIdempotent) {
  FakeKv kv(4, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const int port = server->port();
  server->offer(prompt(2 * kXferBlockSize), {0, 1});
  server->offer(prompt(kXferBlockSize), {2});
  server->stop();
  EXPECT_EQ(kv.release_counts(), (std::map<int32_t, int>{{0, 1}, {1, 1}, {2, 1}}));
  server->stop();
  EXPECT_EQ(kv.n_releases(), 2u);
  // Offered after stop: never servable, released at once.
  server->offer(prompt(kXferBlockSize), {3});
  EXPECT_EQ(kv.n_releases(), 3u);
  const auto st = server->stats();
  EXPECT_EQ(st.live_handles, 0);
  EXPECT_EQ(st.pinned_blocks, 0);
  KvPullRequest req = pull_request(*server, 1, prompt(kXferBlockSize));
  req.port = port;
  EXPECT_FALSE(kv_pull(req).ok());  // the listener is closed
}

TEST(KvTransfer, StopDoesNotHangOnAStalledTransfer) {
  FakeKv kv(64, 512 << 10);  // 32 MiB: the server blocks in send on a client that never reads
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  const std::vector<int32_t> tokens = prompt(64 * kXferBlockSize);
  std::vector<int32_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[size_t(i)] = i;
  PullMessage p;
  p.compat = test_compat();
  p.handle = server->offer(tokens, ids);
  p.tokens = tokens;
  const int fd = connect_raw(server->port());
  send_raw(fd, encode_pull_message(p));
  ASSERT_TRUE(wait_until([&] { return kv.exports().size() == 1; }));
  // The server is sending (bytes wait in our receive queue, which we never read).
  ASSERT_TRUE(wait_until([&] {
    int queued = 0;
    return ::ioctl(fd, FIONREAD, &queued) == 0 && queued > 0;
  }));
  const auto t0 = Clock::now();
  server->stop();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(kv.releases(), (std::vector<std::vector<int32_t>>{ids}));
  EXPECT_EQ(server->stats().failed, 1u);
  ::close(fd);
}

TEST(KvTransfer, ManyConcurrentPullsAreAllCorrect) {
  constexpr int kThreads = 8;
  FakeKv kv(kThreads * 4, 4099);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::vector<std::string> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<int32_t> ids = {4 * t + 3, 4 * t + 1, 4 * t, 4 * t + 2};
      const std::vector<int32_t> tokens = prompt(4 * kXferBlockSize + t % 3, 1000 * t);
      const uint64_t h = server->offer(tokens, ids);
      const auto r = kv_pull(pull_request(*server, h, tokens));
      if (!r.ok()) {
        errors[size_t(t)] = r.message();
      } else if (r->blocks.bytes == kv.expected(ids)) {
        ++ok;
      } else {
        errors[size_t(t)] = "wrong bytes";
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(ok.load(), kThreads);
  ASSERT_TRUE(wait_until([&] { return server->stats().pulled == uint64_t(kThreads); }));
  const auto counts = kv.release_counts();
  EXPECT_EQ(counts.size(), size_t(4 * kThreads));
  for (const auto& [id, n] : counts) EXPECT_EQ(n, 1) << id;
}

TEST(KvTransfer, GarbageGetsAnErrorAndTheServerGoesOn) {
  FakeKv kv(4, 64);
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  {
    const int fd = connect_raw(server->port());
    const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_raw(fd, std::span(reinterpret_cast<const uint8_t*>(http.data()), http.size()));
    const auto reply = recv_reply(fd);
    ::close(fd);
    ASSERT_TRUE(reply.ok()) << reply.message();
    EXPECT_FALSE(reply->ok);
    EXPECT_EQ(reply->code, KvErrorCode::kBadRequest);
    EXPECT_NE(reply->message.find("bad magic 'GET '"), std::string::npos) << reply->message;
  }
  {
    // A PULL header announcing a payload larger than any PULL: refused before reading it.
    std::vector<uint8_t> m = encode_pull_message(PullMessage{});
    m.resize(kKvHeaderBytes);
    m[8] = m[9] = m[10] = m[11] = 0xff;
    const int fd = connect_raw(server->port());
    send_raw(fd, m);
    const auto reply = recv_reply(fd);
    ::close(fd);
    ASSERT_TRUE(reply.ok()) << reply.message();
    EXPECT_NE(reply->message.find("PULL payload of 4294967295 bytes"), std::string::npos)
        << reply->message;
  }
  {
    // Random bytes, several lengths.
    std::mt19937 rng(7);
    for (int len : {1, 11, 12, 100, 5000}) {
      std::vector<uint8_t> junk(static_cast<size_t>(len));
      for (auto& b : junk) b = uint8_t(rng());
      const int fd = connect_raw(server->port());
      send_raw(fd, junk);
      ::shutdown(fd, SHUT_WR);
      (void)recv_raw(fd, 1 << 16);
      ::close(fd);
    }
  }
  ASSERT_TRUE(wait_until([&] { return server->stats().malformed == 7; }));
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize);
  const auto r = kv_pull(pull_request(*server, server->offer(tokens, {0, 1}), tokens));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->blocks.bytes, kv.expected(std::vector<int32_t>{0, 1}));
}

TEST(KvTransfer, ConnectionsBeyondTheLimitAreRefused) {
  FakeKv kv(4, 64);
  KvTransferServerOptions o = test_options();
  o.max_connections = 1;
  auto server = start_server(kv, o);
  ASSERT_TRUE(server);
  const int idle = connect_raw(server->port());  // holds the one slot, sends nothing
  const std::vector<int32_t> tokens = prompt(2 * kXferBlockSize);
  const uint64_t h = server->offer(tokens, {0, 1});
  ASSERT_TRUE(wait_until([&] { return server->stats().connections == 1; }));
  const auto r = kv_pull(pull_request(*server, h, tokens));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(server->stats().busy, 1u);
  ::close(idle);  // frees the slot
  ASSERT_TRUE(wait_until([&] { return server->stats().malformed == 1; }));
  const auto again = kv_pull(pull_request(*server, h, tokens));
  ASSERT_TRUE(again.ok()) << again.message();  // a refused connection claims no handle
}

TEST(KvTransfer, StartRefusesBadOptionsAndABusyPort) {
  FakeKv kv(4, 64);
  KvTransferServerOptions o = test_options();
  o.compat.block_size = 0;
  EXPECT_FALSE(KvTransferServer::start(o, kv.export_fn(), kv.release_fn()).ok());
  auto server = start_server(kv);
  ASSERT_TRUE(server);
  o = test_options();
  o.port = server->port();
  const auto second = KvTransferServer::start(o, kv.export_fn(), kv.release_fn());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.message().find("cannot listen: Address already in use"), std::string::npos)
      << second.message();
}

}  // namespace
}  // namespace sluice
