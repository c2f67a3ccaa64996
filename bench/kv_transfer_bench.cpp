// KV transfer throughput over loopback TCP (kv_io/kv_transfer.h) against a plain socket copy of
// the same bytes. Each is one transfer of n_blocks x bytes_per_block per iteration; bytes/s
// counts the block bytes only (headers and the handshake are overhead the numbers include).
//   BM_KvPull/<n>/<bytes>:         offer + kv_pull (connect, PULL, crc32c on both sides, ACK),
//                                  the exporter copying the blocks out of a pool (as an
//                                  Executor::export_blocks does) and the puller's fresh buffer
//   BM_KvPullPreparedExport/...:   the same with the exporter handing over a buffer prepared
//                                  outside the timing: the transport alone
//   BM_SocketCopy/<n>/<bytes>:     one thread send()s the bytes, another recv()s them into a
//                                  reused buffer, same socket options (TCP_NODELAY, 4 MiB)
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "kv_io/kv_transfer.h"

namespace sluice {
namespace {

constexpr int32_t kBlockSize = 16;

std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(&v[i], &r, 8);
  }
  return v;
}

KvCompat bench_compat() {
  KvCompat c;
  c.model = "bench";
  c.layout = "f16 bench";
  c.block_size = kBlockSize;
  return c;
}

void pull_bench(benchmark::State& state, bool prepared_export) {
  const int32_t n_blocks = int32_t(state.range(0));
  const size_t bpb = size_t(state.range(1));
  const std::vector<uint8_t> pool = random_bytes(size_t(n_blocks) * bpb);  // [n_blocks, bpb]
  KvBlocks prepared;
  std::mutex mu;
  auto prepare = [&] {
    std::lock_guard lock(mu);
    prepared = KvBlocks{"f16 bench", n_blocks, bpb, pool};
  };
  auto exporter = [&](std::span<const int32_t> ids) -> Result<KvBlocks> {
    if (prepared_export) {
      std::lock_guard lock(mu);
      return std::move(prepared);
    }
    KvBlocks b{"f16 bench", int32_t(ids.size()), bpb, {}};
    b.bytes.resize(ids.size() * bpb);
    for (size_t i = 0; i < ids.size(); ++i)
      std::memcpy(b.bytes.data() + i * bpb, pool.data() + size_t(ids[i]) * bpb, bpb);
    return b;
  };
  KvTransferServerOptions o;
  o.compat = bench_compat();
  auto server = KvTransferServer::start(o, exporter, [](std::span<const int32_t>) {});
  if (!server.ok()) {
    state.SkipWithError(server.message().c_str());
    return;
  }
  std::vector<int32_t> tokens(size_t(n_blocks) * kBlockSize);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) ids[size_t(i)] = i;
  KvPullRequest req;
  req.host = "127.0.0.1";
  req.port = (*server)->port();
  req.tokens = tokens;
  req.compat = bench_compat();
  for (auto _ : state) {
    if (prepared_export) {
      state.PauseTiming();
      prepare();
      state.ResumeTiming();
    }
    req.handle = (*server)->offer(tokens, ids);
    auto r = kv_pull(req);
    if (!r.ok()) {
      state.SkipWithError(r.message().c_str());
      break;
    }
    benchmark::DoNotOptimize(r->blocks.bytes.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n_blocks) * int64_t(bpb));
}

void BM_KvPull(benchmark::State& state) {
  pull_bench(state, false);
}
void BM_KvPullPreparedExport(benchmark::State& state) {
  pull_bench(state, true);
}

void tune(int fd) {
  const int one = 1, buf = 4 << 20;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

void BM_SocketCopy(benchmark::State& state) {
  const size_t total = size_t(state.range(0)) * size_t(state.range(1));
  const std::vector<uint8_t> src = random_bytes(total);
  std::vector<uint8_t> dst(total);
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  tune(lfd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    state.SkipWithError("cannot listen on loopback");
    return;
  }
  const int cfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  tune(cfd);
  if (::connect(cfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    state.SkipWithError("cannot connect on loopback");
    return;
  }
  const int sfd = ::accept(lfd, nullptr, nullptr);
  for (auto _ : state) {
    std::thread sender([&] {
      size_t done = 0;
      while (done < total) {
        const ssize_t n = ::send(sfd, src.data() + done, total - done, MSG_NOSIGNAL);
        if (n <= 0) return;
        done += size_t(n);
      }
    });
    size_t got = 0;
    while (got < total) {
      const ssize_t n = ::recv(cfd, dst.data() + got, total - got, 0);
      if (n <= 0) break;
      got += size_t(n);
    }
    sender.join();
    if (got != total) {
      state.SkipWithError("short copy");
      break;
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(total));
  ::close(sfd);
  ::close(cfd);
  ::close(lfd);
}

// 64 x 512 KiB = 32 MiB (e.g. 8k tokens of a 1B model's f16 KV at block size 128); and the same
// bytes in 2048 blocks of 16 KiB, where per-block costs show.
void transfer_args(benchmark::internal::Benchmark* b) {
  b->Args({64, 512 << 10})->Args({2048, 16 << 10})->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_KvPull)->Apply(transfer_args);
BENCHMARK(BM_KvPullPreparedExport)->Apply(transfer_args);
BENCHMARK(BM_SocketCopy)->Apply(transfer_args);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
