// Block-granular KV transfer over TCP, for disaggregated prefill/decode. A prefill worker
// computes a prompt's KV blocks, keeps them pinned and offer()s them under an unguessable
// handle; a decode worker kv_pull()s them by that handle and imports them. This file is the
// transport only: the engine supplies the bytes (ExportFn) and takes the pins back (ReleaseFn).
//
// The conversation on one connection (every message framed, little-endian, versioned):
//
//   puller                                    server
//   PULL {compat, handle, first_block, tokens} ->
//                                            <- OK {first_block, n_blocks, bytes_per_block, layout}
//                                               | ERROR {code, message}  (then close)
//                                            <- BLOCK {index, crc32c} + bytes    x n_blocks
//                                            <- STATE {at, crc32c} + bytes       (0 or 1)
//                                            <- END {n_blocks, crc32c of the crcs}
//   ACK {n_blocks, crc32c of the crcs}       ->  (the pull counts complete; pins released)
//
// Every message starts with a 12-byte header:
//
//   offset 0      4        6       8             12
//          | magic | version | type | payload bytes | payload ...
//          "SLKV"    u16       u16    u32
//
// and its payload (integers little-endian; a string is a u32 length and that many bytes):
//
//   PULL   u64 handle, i32 first_block, i32 block_size, i32 tp, str model, str layout,
//          u32 n_tokens, i32 tokens[n_tokens]
//   OK     i32 first_block, i32 n_blocks, u64 bytes_per_block, str layout,
//          i32 state_at, u64 state_bytes, str state_layout
//   ERROR  u16 code (KvErrorCode), str message
//   BLOCK  i32 index, u32 crc32c of the data, then bytes_per_block bytes of data
//   STATE  i32 state_at, u32 crc32c of the data, then state_bytes bytes of data
//   END    i32 n_blocks, u32 crc chain (kv_crc_chain over the blocks' crcs, then the state's)
//
// The state (models with recurrent layers, version 2): the offer's saved recurrent state after
// its first state_at full blocks (a checkpoint, KvCacheManager), sent when the puller lacks it
// (first_block < state_at) and the prompts share those blocks; state_at 0: none. Without it a
// recurrent model's puller could use none of the blocks beyond its own checkpoints.
//   ACK    the END's two fields, echoed
//
// Zero copy: a BLOCK header plus its {index, crc} is 20 bytes and END is exactly 20 bytes too,
// so the puller reads block i's data straight into its result buffer together with the next
// frame's head in one recvmsg, and checks each block's crc32c as it arrives. The server sends
// straight from the exported buffer: one sendmsg of [head, data, head, data, ...] per ~1 MiB.
//
// The pins: the server releases every offered handle's blocks exactly once: when its pull
// completes (ACK), fails (checksum, EOF, timeout, disconnect), is refused (compat, tokens), when
// the handle expires unpulled, is cancel()ed, or the server stops. A handle is claimed by the
// first pull that names it: a second pull of it is refused as unknown.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sluice {

// What both ends must agree on for blocks to mean the same thing; a pull whose compat differs
// is refused with an error naming the field, worded from the puller's side ("here" is the
// puller, "there" the server).
struct KvCompat {
  std::string model;       // model fingerprint (e.g. "model 123456 bytes, hash 0123abcd...")
  std::string layout;      // KV layout tag: dtype, layers, kv heads, head dim, block size, TP ranks
  int32_t block_size = 0;  // tokens per block
  int32_t tp = 1;          // tensor-parallel degree
};

// "" when equal, else every difference joined by "; ", read from `mine`'s side:
// "block size 16 here, 32 there", "model differs (here: a, there: b)".
std::string compat_mismatch(const KvCompat& mine, const KvCompat& theirs);

// The pulled blocks: n_blocks blocks of bytes_per_block bytes, in order.
struct KvBlocks {
  std::string layout;  // the exporter's tag (Executor's KvBlockData::layout)
  int32_t n_blocks = 0;
  size_t bytes_per_block = 0;
  std::vector<uint8_t> bytes;  // [n_blocks, bytes_per_block]
};

// ---------------------------------------------------------------------------------------------
// The wire format. Pure functions (no I/O), strict: a parse accepts only the exact encoding of a
// valid message, so hostile bytes can neither crash a side nor make it allocate more than the
// bytes it was sent (bounded below). kv_transfer_fuzz drives every parser.

inline constexpr uint32_t kKvMagic = 0x564B4C53;  // "SLKV" as little-endian bytes
inline constexpr uint16_t kKvVersion = 2;
inline constexpr size_t kKvHeaderBytes = 12;     // magic, version, type, payload bytes
inline constexpr size_t kKvFrameHeadBytes = 20;  // BLOCK header + {index, crc}; all of END
inline constexpr size_t kKvMaxTokens = size_t(1) << 22;
inline constexpr size_t kKvMaxStringBytes = 4096;  // model, layout
inline constexpr size_t kKvMaxErrorBytes = 16384;  // an ERROR's message
inline constexpr uint64_t kKvMaxBytesPerBlock = uint64_t(1) << 30;

enum class KvMessageType : uint16_t {
  kPull = 1,
  kOk = 2,
  kError = 3,
  kBlock = 4,
  kEnd = 5,
  kAck = 6,
  kState = 7,
};
const char* to_string(KvMessageType type);

// A message's first 12 bytes. The payload size is bounded per type (a PULL by kKvMaxTokens,
// a BLOCK by kKvMaxBytesPerBlock, fixed-size messages exactly).
struct KvMessageHeader {
  KvMessageType type = KvMessageType::kPull;
  uint32_t payload_bytes = 0;
};
// Needs at least kKvHeaderBytes bytes (reads only those). Errors name the bad field.
Result<KvMessageHeader> parse_message_header(std::span<const uint8_t> bytes);

// Client -> server.
struct PullMessage {
  KvCompat compat;
  uint64_t handle = 0;
  int32_t first_block = 0;
  std::vector<int32_t> tokens;
};
std::vector<uint8_t> encode_pull_message(const PullMessage& pull);
// A whole PULL message (header and payload, nothing after).
Result<PullMessage> parse_pull_message(std::span<const uint8_t> message);

// Why a server refused or failed a pull (ERROR's code).
enum class KvErrorCode : uint16_t {
  kBadRequest = 1,     // not a well-formed PULL
  kUnknownHandle = 2,  // never offered, expired, cancelled or already pulled
  kIncompatible = 3,   // compat differs
  kTokensDiffer = 4,   // no common full block, or first_block beyond the common ones
  kExportFailed = 5,   // the server could not read its blocks
  kBusy = 6,           // max_connections reached
};

// Server -> client, the answer to a PULL: OK or ERROR.
struct ReplyHeader {
  bool ok = false;
  // OK: the blocks that follow cover [first_block, first_block + n_blocks).
  int32_t first_block = 0;
  int32_t n_blocks = 0;
  uint64_t bytes_per_block = 0;  // <= kKvMaxBytesPerBlock; > 0 when n_blocks > 0
  std::string layout;
  // The recurrent state after the first state_at full blocks follows the blocks (0: none;
  // else first_block < state_at <= first_block + n_blocks, 0 < state_bytes <= the bound).
  int32_t state_at = 0;
  uint64_t state_bytes = 0;
  std::string state_layout;
  // ERROR:
  KvErrorCode code = KvErrorCode::kBadRequest;
  std::string message;
};
std::vector<uint8_t> encode_reply_header(const ReplyHeader& reply);
// A whole OK or ERROR message (header and payload, nothing after).
Result<ReplyHeader> parse_reply_header(std::span<const uint8_t> message);

// The 20 bytes before each block's (or the state's) data, or a whole END.
struct FrameHead {
  bool end = false;
  // BLOCK: the block's index in the prompt; STATE: state_at; END: the number of blocks sent
  int32_t index = 0;
  // BLOCK, STATE: crc32c of its bytes; END: the chain of the crcs (u32 LE each) sent before it
  uint32_t crc = 0;
  bool state = false;  // a STATE frame (its data: state_bytes bytes)
};
// END's crc: chain = kv_crc_chain(chain, crc of block i) over the blocks in order, from 0.
uint32_t kv_crc_chain(uint32_t chain, uint32_t block_crc);
// Encodes into exactly kKvFrameHeadBytes bytes (a BLOCK or STATE head's payload size counts the
// data: `data_bytes`).
void encode_frame_head(const FrameHead& head, uint64_t data_bytes, uint8_t* out);
// Exactly kKvFrameHeadBytes bytes: a BLOCK whose payload is {index, crc} + bytes_per_block
// bytes of data, a STATE likewise of state_bytes (only when state_bytes > 0), or an END.
Result<FrameHead> parse_block_frame_header(std::span<const uint8_t> head, uint64_t bytes_per_block,
                                           uint64_t state_bytes = 0);

// Client -> server after verifying everything: the END's two fields echoed.
struct AckMessage {
  int32_t n_blocks = 0;
  uint32_t crc = 0;
};
std::vector<uint8_t> encode_ack_message(const AckMessage& ack);
Result<AckMessage> parse_ack_message(std::span<const uint8_t> message);

// The common full blocks of the offered and the pulled prompt: block i counts while both hold
// tokens [i*block_size, (i+1)*block_size) and they are equal (the offered side holds at most
// n_offered_blocks of them). K/V of block i depends only on the tokens up to its end, so these
// blocks are valid for the puller even when the prompts diverge later.
int32_t common_full_blocks(std::span<const int32_t> offered, int32_t n_offered_blocks,
                           std::span<const int32_t> pulled, int32_t block_size);

// ---------------------------------------------------------------------------------------------
// The server: holds offered handles and serves pulls of them.

struct KvTransferServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: ephemeral (see port())
  KvCompat compat;
  double handle_ttl_s = 60;  // an offered handle not pulled by then is released
  // Each send/recv (SO_SNDTIMEO/SO_RCVTIMEO and the poll deadlines): the PULL must arrive within
  // it of the connect, each block frame go out within it, and the ACK come within it of the END.
  double io_timeout_s = 10;
  int max_connections = 64;  // connections served at once; beyond it refused with kBusy
  // Fault injection for tests: >= 0 closes the connection after sending that many blocks.
  int fail_after_blocks = -1;
  // Fault injection for tests: >= 0 flips a byte of that block (index in the prompt) after its
  // checksum was computed, as a corruption in transit.
  int corrupt_block = -1;
  bool corrupt_state = false;  // likewise, a byte of the state
  // Test hook, for process-level tests that kill a worker mid-transfer (`sluice serve` sets it
  // from SLUICE_TEST_KV_SEND_DELAY_MS, read once at start): > 0 sends one block per sendmsg and
  // sleeps this long before each block after the first (stop() may wait out one sleep).
  // 0: off (blocks go out in groups).
  int send_delay_ms = 0;
};

// A recurrent state offered with the blocks (KvTransferServer::offer): the executor's state slot
// holding the state after the first `at_block` full blocks (pinned like the blocks).
struct OfferedState {
  int32_t slot = -1;  // -1: none
  int32_t at_block = 0;
};

struct KvTransferServerStats {
  uint64_t offered = 0;
  uint64_t pulled = 0;     // complete (ACKed)
  uint64_t failed = 0;     // claimed, then export, I/O, a disconnect or a bad ACK ended it
  uint64_t expired = 0;    // released by the ttl
  uint64_t cancelled = 0;  // released by cancel()
  uint64_t refused = 0;    // compat, tokens (or first_block) or an unknown handle
  uint64_t malformed = 0;  // connections that did not send a well-formed PULL
  uint64_t busy = 0;       // connections refused at max_connections
  uint64_t bytes_sent = 0;
  // Block frames handed to the socket, counted as each group goes out, whether the pull then
  // completes or not: it moves during a pull (bytes_sent is added when the connection ends).
  uint64_t blocks_sent = 0;
  uint64_t states_sent = 0;   // recurrent states sent with blocks
  int64_t pinned_blocks = 0;  // gauge: blocks of live handles (offered, not yet released)
  int64_t live_handles = 0;   // gauge
  int64_t connections = 0;    // gauge: connections being served (at most max_connections)
};

class KvTransferServer {
 public:
  // Reads pinned blocks' bytes, in order (called on a connection thread; the caller makes it
  // safe): block_ids.size() blocks of one size, else the pull fails. The server sends straight
  // from the returned buffer.
  using ExportFn = std::function<Result<KvBlocks>(std::span<const int32_t> block_ids)>;
  // Unpins blocks: called exactly once per offered handle with all its block_ids (see the top of
  // this file), on a connection thread, the reaper, or the thread calling cancel()/stop()/offer().
  // Must not throw, nor call stop().
  using ReleaseFn = std::function<void(std::span<const int32_t> block_ids)>;
  // Offered states (models with recurrent layers): reads a pinned state slot (one "block"), and
  // unpins it, exactly once per offer that has one, as ReleaseFn does its blocks.
  struct StateFns {
    std::function<Result<KvBlocks>(int32_t slot)> export_state;
    std::function<void(int32_t slot)> release_state;
  };

  // Listens on options.host:port. Fails on bad options or when the address cannot be bound.
  static Result<std::unique_ptr<KvTransferServer>> start(const KvTransferServerOptions& options,
                                                         ExportFn export_fn, ReleaseFn release_fn,
                                                         StateFns state_fns = {});
  ~KvTransferServer();  // stop()
  KvTransferServer(const KvTransferServer&) = delete;
  KvTransferServer& operator=(const KvTransferServer&) = delete;

  int port() const { return port_; }
  // Offers the pinned blocks of `tokens`' full blocks: block_ids[i] holds tokens
  // [i*block_size, (i+1)*block_size). Ids past the full blocks (a partial last block) are not
  // served but are released with the rest. Returns a handle (unguessable 64-bit random,
  // nonzero). After stop() the blocks are released at once (the handle is never servable).
  // With a `state` (its slot pinned; needs StateFns), a pull that lacks it gets it too.
  uint64_t offer(std::vector<int32_t> tokens, std::vector<int32_t> block_ids,
                 OfferedState state = {});
  // Releases a handle not pulled (e.g. the HTTP answer carrying it failed). Unknown or already
  // claimed by a pull: no-op.
  void cancel(uint64_t handle);
  KvTransferServerStats stats() const;
  // Closes the listener and every connection (shutdown(), so blocked I/O returns), joins every
  // thread, releases every live handle. Idempotent; safe from any thread but a ReleaseFn's.
  void stop();

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  struct Offer {
    std::vector<int32_t> tokens;
    std::vector<int32_t> block_ids;
    SteadyTime expiry;
    OfferedState state;
  };
  struct Connection {
    int fd = -1;
    std::thread thread;
    bool done = false;  // guarded by mutex_; the thread is joinable and finished
  };
  enum class Outcome { kPulled, kFailed, kRefused, kMalformed };
  // What one connection holds while it serves a pull.
  struct ServeState {
    Offer claimed;  // the handle's offer, once claimed (then this connection releases it)
    bool has_claim = false;
    uint64_t bytes_sent = 0;
    bool state_sent = false;  // a complete pull carried the offer's state
  };

  KvTransferServer(const KvTransferServerOptions& options, ExportFn export_fn, ReleaseFn release_fn,
                   StateFns state_fns);
  void accept_loop();
  void reap_loop();
  // A connection thread: serves one pull, releases what it claimed, counts the outcome.
  void serve(Connection* conn);
  Outcome serve_pull(int fd, ServeState& st);
  // Joins and closes connections whose thread finished.
  void join_finished();
  // Releases `offer`'s pins (when not null; release_fn_ first, never under mutex_), then, in one
  // step under mutex_, takes them out of the gauges, counts `counter` (when not null) and
  // `bytes_sent`, and marks `conn` (when not null) done: whatever stats() shows has happened.
  void finish(const Offer* offer, uint64_t KvTransferServerStats::*counter, uint64_t bytes_sent,
              Connection* conn = nullptr);

  const KvTransferServerOptions options_;
  const ExportFn export_fn_;
  const ReleaseFn release_fn_;
  const StateFns state_fns_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: wakes the accept thread (stop, a finished connection)
  int port_ = 0;
  std::thread accept_thread_;
  std::thread reap_thread_;

  std::mutex stop_mutex_;  // serializes stop()
  bool stopped_ = false;   // guarded by stop_mutex_
  mutable std::mutex mutex_;
  std::condition_variable reap_cv_;
  bool stopping_ = false;                       // guarded by mutex_
  std::unordered_map<uint64_t, Offer> offers_;  // guarded by mutex_
  // guarded by mutex_; offer order is expiry order (one ttl), so the reaper looks at the front
  std::deque<std::pair<SteadyTime, uint64_t>> expiries_;
  std::list<std::unique_ptr<Connection>> connections_;  // guarded by mutex_
  KvTransferServerStats stats_;                         // guarded by mutex_
};

// ---------------------------------------------------------------------------------------------
// The puller.

struct KvPullRequest {
  std::string host;
  int port = 0;
  uint64_t handle = 0;
  // The puller's prompt tokens. The server serves [first_block, c) where c counts the full
  // blocks both prompts share from the start (common_full_blocks); it refuses a pull that
  // shares no full block while both prompts have one, or whose first_block is beyond c.
  std::vector<int32_t> tokens;
  int32_t first_block = 0;  // skip blocks the puller already has: serve [first_block, n)
  KvCompat compat;
  double timeout_s = 10;  // connect + the whole pull (name resolution, if any, is not bounded)
  // A reply announcing more bytes than this is refused before anything is allocated.
  uint64_t max_bytes = uint64_t(16) << 30;
};

struct KvPullResult {
  KvBlocks blocks;
  int32_t first_block = 0;  // blocks cover [first_block, first_block + blocks.n_blocks)
  // The recurrent state after the first state_at full blocks (state.n_blocks 1), if sent.
  KvBlocks state;
  int32_t state_at = 0;
  double seconds = 0;
};

// Connects, sends the pull, receives and verifies every block (checksum), acks (best effort:
// the data is verified by then). Any failure (connect refused, timeout, compat/token mismatch,
// unknown/expired handle, bad checksum, truncated stream, a server that closes mid-transfer)
// returns an error naming the server and what went wrong, and no partial data.
Result<KvPullResult> kv_pull(const KvPullRequest& request);

}  // namespace sluice
