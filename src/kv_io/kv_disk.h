// The disk tier of the prefix cache: full KV blocks kept in files, one file per block, named by
// the block's chain hash, so that a restart (or a request whose blocks the memory cache already
// evicted) finds them again. A standalone, thread-safe component: the engine decides what to
// put() and get(); this class owns only the directory.
//
//   <dir>/LOCK                      flock()ed while a tier has the directory open (one at a time)
//   <dir>/<hh>/<hash16>.kvb         one block; hh = the hash's top byte, hash16 = all 16 hex digits
//   <dir>/<hh>/<hash16>.kvb.tmp     a write in progress; renamed onto .kvb when complete
//
// Block file (all integers little-endian):
//
//   offset  size  field
//   0       4     magic "SKVB"
//   4       4     version (1)
//   8       8     hash             the block's chain hash (the file name says the same)
//   16      4     compat_bytes     <= 4096
//   20      4     n_tokens         <= 65536
//   24      8     payload_bytes    == bytes_per_block of the tier that reads it
//   32      4     payload_crc      crc32c of the payload
//   36      4     header_crc       crc32c of bytes [0, 36), then compat, then the tokens
//   40      ...   compat           the model fingerprint + KV layout tag (not NUL-terminated)
//   ...     4*n   tokens           the block's token ids (int32)
//   ...     ...   payload          the block's KV bytes, opaque here
//
// Consistency: a file appears under its final name only complete (written to .tmp, then
// rename()), so a crash or `kill -9` leaves at most a .tmp file, which the next open() deletes.
// Files are not fsync()ed unless KvDiskOptions::sync: after a power loss a file may be torn
// under its final name; get() then finds a wrong size or checksum and rejects it. get() never
// returns data whose header, tokens, size and payload checksum do not all match.
//
// Costs: open() lists the directory and stat()s every file (no reads); get() is one open, one
// preadv of the whole file and a crc32c of the payload (~8 GB/s); put() copies the block and
// returns; one writer thread creates, writes and renames the files and evicts.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace sluice {

struct KvDiskOptions {
  std::string dir;         // created if missing (with parents); one tier at a time may open it
  uint64_t max_bytes = 0;  // bound on the block files' sizes together (--kv-disk-gb); > 0
  // Model fingerprint + KV layout tag; a file written under another compat is rejected (and
  // deleted) when read. At most 4096 bytes.
  std::string compat;
  size_t bytes_per_block = 0;  // every block's payload size; > 0
  // Queued writes at most (the copies put() makes); beyond it a put() is dropped (counted),
  // never blocking the caller.
  size_t max_pending_bytes = 256u << 20;
  // fdatasync() each file before renaming it into place, fsync() its directory after: a
  // power loss then neither tears a block nor loses a written one (a torn one is caught by its
  // checksum either way). Costs two disk flushes per block.
  bool sync = false;
};

struct KvDiskStats {
  uint64_t hits = 0, misses = 0;  // get(): found and valid / not found
  uint64_t pending_hits = 0;      // of the hits, served from the write queue (no disk read)
  // get() or the start-up scan found a corrupt, truncated or mismatched file (deleted). A
  // file whose tokens differ from the ones asked for counts here too (a queued block with
  // other tokens is a miss).
  uint64_t rejected = 0;
  uint64_t writes = 0;         // block files written (renamed into place)
  uint64_t write_dropped = 0;  // put()s dropped: queue full, or queued writes drop_pending() cut
  uint64_t write_refused = 0;  // put()s of a wrong payload size, > 65536 tokens, or > max_bytes
  uint64_t write_errors = 0;   // writes that failed (disk full, I/O error; logged)
  uint64_t evicted = 0;        // files removed to hold max_bytes
  uint64_t temp_removed = 0;   // leftovers of interrupted writes that open() deleted
  uint64_t bytes_read = 0, bytes_written = 0;  // file bytes (header + payload)
  double read_seconds = 0, write_seconds = 0;  // summed latencies of disk reads / file writes
  uint64_t files = 0, bytes_on_disk = 0;       // gauges: indexed block files, their sizes
  uint64_t pending_bytes = 0;                  // gauge: memory held by queued writes
};

// The header of a block file, as parse_kv_disk_header() read it.
struct KvDiskBlockHeader {
  uint64_t hash = 0;
  std::string compat;
  std::vector<int32_t> tokens;
  uint64_t payload_bytes = 0;
  uint32_t crc = 0;           // crc32c of the payload
  uint64_t header_bytes = 0;  // where the payload starts: 40 + compat + 4 * tokens
};

// What a block file must say to be the block a reader asked for.
struct KvDiskBlockExpect {
  uint64_t hash = 0;
  std::string_view compat;
  std::span<const int32_t> tokens;
  uint64_t payload_bytes = 0;
};

constexpr uint32_t kKvDiskVersion = 1;
constexpr uint64_t kKvDiskFixedHeaderBytes = 40;
constexpr uint64_t kKvDiskMaxCompatBytes = 4096;
constexpr uint64_t kKvDiskMaxTokens = 65536;

// Size of a block file: header + payload.
constexpr uint64_t kv_disk_file_bytes(size_t compat_bytes, size_t n_tokens, size_t payload_bytes) {
  return kKvDiskFixedHeaderBytes + compat_bytes + 4 * uint64_t(n_tokens) + payload_bytes;
}

// The header bytes of a block file whose payload has crc32c `payload_crc` (the payload
// follows them). compat and tokens must be within the bounds above.
std::vector<uint8_t> encode_kv_disk_header(uint64_t hash, std::string_view compat,
                                           std::span<const int32_t> tokens, uint64_t payload_bytes,
                                           uint32_t payload_crc);

// Parses and checks the header at the start of a block file's bytes (the payload may follow or
// not): magic, version, bounds (compat <= 4096 bytes, tokens <= 65536, checked before anything
// is allocated), header checksum. Pure; any bytes are safe input.
Result<KvDiskBlockHeader> parse_kv_disk_header(std::span<const uint8_t> file_prefix);
// Checks a parsed header against what the reader expects: hash, compat, payload size, tokens.
Status check_kv_disk_header(const KvDiskBlockHeader& header, const KvDiskBlockExpect& expect);
// A whole block file: the header parses and matches `expect`, the file is exactly header +
// payload long, and the payload's crc32c matches. Returns the header.
Result<KvDiskBlockHeader> parse_kv_disk_block(std::span<const uint8_t> file,
                                              const KvDiskBlockExpect& expect);

class KvDiskTier {
 public:
  // Creates/opens the directory and locks it, rebuilds the index from the file names, sizes
  // and mtimes there (LRU order = mtime order; files are validated fully by get()), deletes
  // leftover .tmp files and files whose size no block can have, evicts down to max_bytes, and
  // starts the writer thread. Errors: bad options, an unusable directory, a directory another
  // tier holds.
  static Result<std::unique_ptr<KvDiskTier>> open(const KvDiskOptions& options);
  // Drains the queue (every queued block is written; bounded by max_pending_bytes, and ignores
  // a pause) and joins the writer. Call drop_pending() first for a fast shutdown.
  ~KvDiskTier();
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  // In the index or queued.
  bool contains(uint64_t hash) const;
  // Queues block `hash` (its tokens and its bytes_per_block payload) for an asynchronous write;
  // copies both. False when already stored or queued, when the queue is full (write_dropped)
  // and when the block cannot be stored (write_refused: payload of the wrong size, more than
  // 65536 tokens, a file larger than max_bytes). Never waits for the disk.
  bool put(uint64_t hash, std::span<const int32_t> tokens, std::span<const uint8_t> payload);
  // Reads block `hash` into `out` (bytes_per_block bytes) if it is stored or queued and valid:
  // header (magic, version, compat, hash, payload size, checksum), tokens equal to `tokens`,
  // file size, payload crc32c. A file failing any check is deleted and counted in `rejected`.
  // Returns false on a miss or a rejection; `out` is then unspecified (it may hold part of a
  // rejected file): use it only after true. A hit makes the block most recently used (and
  // touches its file's mtime, the LRU order of the next open()). Thread-safe; concurrent with
  // put() and other get()s (reads run outside the lock).
  bool get(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> out);
  // How many leading hashes of a prompt's block-hash chain are stored or queued (index only:
  // no reads, no LRU change).
  int32_t count_prefix(std::span<const uint64_t> hashes) const;

  // Waits until every queued write is done (resumes paused writes first).
  void flush();
  // Queued writes wait while paused (the writer finishes the one it is on); put() keeps
  // queueing up to max_pending_bytes, then drops. For latency-critical phases or a backup of
  // the directory; flush() and the destructor resume.
  void pause_writes();
  void resume_writes();
  // Discards the queued writes not yet started (counted in write_dropped).
  void drop_pending();

  KvDiskStats stats() const;
  const KvDiskOptions& options() const { return options_; }
  // The file block `hash` is (or would be) stored in.
  std::string path_of(uint64_t hash) const;

 private:
  class BufferPool;
  // A queued block: immutable once queued, shared by the queue, the writer and readers of it;
  // its payload buffer goes back to the pool when the last of them lets go.
  struct PendingWrite {
    PendingWrite() = default;
    PendingWrite(const PendingWrite&) = delete;
    PendingWrite& operator=(const PendingWrite&) = delete;
    ~PendingWrite();
    std::span<const uint8_t> payload_span() const { return {payload.get(), payload_bytes}; }

    uint64_t hash = 0;
    std::vector<int32_t> tokens;
    std::unique_ptr<uint8_t[]> payload;  // [payload_bytes]
    size_t payload_bytes = 0;
    uint64_t cost = 0;        // counted in pending_bytes_
    uint64_t file_bytes = 0;  // header + payload
    std::shared_ptr<BufferPool> pool;
  };
  // An indexed block file.
  struct Entry {
    uint64_t file_bytes = 0;
    uint64_t gen = 0;                   // which write of this hash (see get(): stale verdicts)
    std::list<uint64_t>::iterator lru;  // position in lru_
  };

  explicit KvDiskTier(KvDiskOptions options);
  Status scan();
  void writer_loop();
  // Writes one block file (temp + rename); the reservation of its bytes is held.
  Status write_file(const PendingWrite& w);
  // Removes lru_'s least recently used entries until `need` more bytes fit; returns their
  // hashes, whose files the caller unlinks. Needs mu_.
  std::vector<uint64_t> evict_for(uint64_t need);
  // Drops `hash` from the index and deletes its file, if the index still holds write `gen`
  // (a rejection found by a reader). Needs mu_.
  void reject_locked(uint64_t hash, uint64_t gen);
  void erase_locked(std::unordered_map<uint64_t, Entry>::iterator it);

  const KvDiskOptions options_;
  int lock_fd_ = -1;
  const std::shared_ptr<BufferPool> pool_;  // before the queue: outlives its buffers

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // writer: queue non-empty, resume, stop
  std::condition_variable idle_cv_;  // flush(): queue drained
  std::unordered_map<uint64_t, Entry> index_;
  std::list<uint64_t> lru_;  // front = least recently used
  std::unordered_map<uint64_t, std::shared_ptr<const PendingWrite>> pending_;  // queued + writing
  std::deque<std::shared_ptr<const PendingWrite>> queue_;  // not yet started, FIFO
  uint64_t total_bytes_ = 0;                               // sum of index_'s file_bytes
  uint64_t reserved_bytes_ = 0;  // the file being written; total + reserved <= max_bytes
  uint64_t pending_bytes_ = 0;
  uint64_t next_gen_ = 1;
  bool writing_ = false;
  bool paused_ = false;
  bool stop_ = false;
  KvDiskStats stats_;

  std::thread writer_;
};

}  // namespace sluice
