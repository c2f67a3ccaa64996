#include "kv_io/kv_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "base/crc32c.h"
#include "base/log.h"
#include "base/strings.h"

namespace sluice {
namespace {

constexpr uint8_t kMagic[4] = {'S', 'K', 'V', 'B'};
constexpr uint64_t kHeaderCrcOffset = 36;  // header_crc covers [0, 36) + compat + tokens
constexpr std::string_view kBlockSuffix = ".kvb";
constexpr std::string_view kTempSuffix = ".kvb.tmp";

void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_le32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}
std::string hex2(uint64_t hash) {
  char buf[3];
  std::snprintf(buf, sizeof buf, "%02x", unsigned(hash >> 56));
  return buf;
}

// Lowercase hex digits only (the names this tier writes); nullopt for anything else.
std::optional<uint64_t> parse_hex(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | uint64_t(d);
  }
  return v;
}

// A compat string for a message: clipped, so a 4 KiB fingerprint does not flood the log.
std::string clipped(std::string_view s) {
  constexpr size_t kMax = 120;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...' (" + std::to_string(s.size()) + " bytes)";
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Drops the first `n` bytes from iov[first, n_iov) (a partial read or write); returns the new
// first iovec with bytes left (n_iov when none are).
int advance(iovec* iov, int first, int n_iov, size_t n) {
  for (; first < n_iov && n >= iov[first].iov_len; ++first) n -= iov[first].iov_len;
  if (first < n_iov) {
    iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + n;
    iov[first].iov_len -= n;
  }
  return first;
}

// Reads the file from offset 0 into the buffers in order until they are full or the file
// ends. Returns the bytes read, or -errno.
int64_t pread_all(int fd, iovec* iov, int n_iov) {
  uint64_t done = 0;
  for (int first = advance(iov, 0, n_iov, 0); first < n_iov;) {
    const ssize_t n = ::preadv(fd, iov + first, n_iov - first, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -int64_t(errno);
    if (n == 0) break;  // end of file
    done += uint64_t(n);
    first = advance(iov, first, n_iov, size_t(n));
  }
  return int64_t(done);
}

// Writes the buffers in order at the file position of `fd`.
Status write_all(int fd, iovec* iov, int n_iov) {
  for (int first = advance(iov, 0, n_iov, 0); first < n_iov;) {
    const ssize_t n = ::writev(fd, iov + first, n_iov - first);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(errno_text(errno));
    first = advance(iov, first, n_iov, size_t(n));
  }
  return Status();
}

// mkdir -p.
Status make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return make_error("cannot create directory '", path, "': ", ec.message());
  return Status();
}

}  // namespace

// ---- The block file format ----------------------------------------------------------------

std::vector<uint8_t> encode_kv_disk_header(uint64_t hash, std::string_view compat,
                                           std::span<const int32_t> tokens, uint64_t payload_bytes,
                                           uint32_t payload_crc) {
  std::vector<uint8_t> h(kv_disk_file_bytes(compat.size(), tokens.size(), 0));
  uint8_t* p = h.data();
  std::memcpy(p, kMagic, 4);
  put_le32(p + 4, kKvDiskVersion);
  put_le64(p + 8, hash);
  put_le32(p + 16, uint32_t(compat.size()));
  put_le32(p + 20, uint32_t(tokens.size()));
  put_le64(p + 24, payload_bytes);
  put_le32(p + 32, payload_crc);
  uint8_t* q = p + kKvDiskFixedHeaderBytes;
  if (!compat.empty()) std::memcpy(q, compat.data(), compat.size());
  q += compat.size();
  for (int32_t t : tokens) {
    put_le32(q, uint32_t(t));
    q += 4;
  }
  uint32_t crc = crc32c(p, kHeaderCrcOffset);
  crc = crc32c(p + kKvDiskFixedHeaderBytes, h.size() - kKvDiskFixedHeaderBytes, crc);
  put_le32(p + kHeaderCrcOffset, crc);
  return h;
}

Result<KvDiskBlockHeader> parse_kv_disk_header(std::span<const uint8_t> file_prefix) {
  const uint8_t* p = file_prefix.data();
  const uint64_t size = file_prefix.size();
  if (size < kKvDiskFixedHeaderBytes) {
    return make_error("KV block file truncated: ", size, " bytes, its fixed header needs ",
                      kKvDiskFixedHeaderBytes);
  }
  if (std::memcmp(p, kMagic, 4) != 0) {
    return make_error("not a KV block file: magic 0x", hex16(get_le32(p)).substr(8),
                      ", expected 'SKVB'");
  }
  const uint32_t version = get_le32(p + 4);
  if (version != kKvDiskVersion) {
    return make_error("KV block file version ", version, ", this build reads version ",
                      kKvDiskVersion);
  }
  const uint32_t compat_bytes = get_le32(p + 16);
  const uint32_t n_tokens = get_le32(p + 20);
  if (compat_bytes > kKvDiskMaxCompatBytes) {
    return make_error("KV block file header: compat string of ", compat_bytes, " bytes, at most ",
                      kKvDiskMaxCompatBytes);
  }
  if (n_tokens > kKvDiskMaxTokens) {
    return make_error("KV block file header: ", n_tokens, " tokens, at most ", kKvDiskMaxTokens);
  }
  const uint64_t header_bytes = kv_disk_file_bytes(compat_bytes, n_tokens, 0);
  if (size < header_bytes) {
    return make_error("KV block file truncated: ", size, " bytes, its header (", compat_bytes,
                      " bytes of compat, ", n_tokens, " tokens) needs ", header_bytes);
  }
  uint32_t crc = crc32c(p, kHeaderCrcOffset);
  crc = crc32c(p + kKvDiskFixedHeaderBytes, header_bytes - kKvDiskFixedHeaderBytes, crc);
  const uint32_t stored_crc = get_le32(p + kHeaderCrcOffset);
  if (crc != stored_crc) {
    return make_error("KV block file header checksum mismatch (stored 0x",
                      hex16(stored_crc).substr(8), ", computed 0x", hex16(crc).substr(8), ")");
  }
  KvDiskBlockHeader h;
  h.hash = get_le64(p + 8);
  h.payload_bytes = get_le64(p + 24);
  h.crc = get_le32(p + 32);
  h.header_bytes = header_bytes;
  const uint8_t* q = p + kKvDiskFixedHeaderBytes;
  h.compat.assign(reinterpret_cast<const char*>(q), compat_bytes);
  q += compat_bytes;
  h.tokens.resize(n_tokens);
  for (uint32_t i = 0; i < n_tokens; ++i, q += 4) h.tokens[i] = int32_t(get_le32(q));
  return h;
}

Status check_kv_disk_header(const KvDiskBlockHeader& header, const KvDiskBlockExpect& expect) {
  if (header.hash != expect.hash) {
    return make_error("KV block file holds block ", hex16(header.hash), ", expected ",
                      hex16(expect.hash));
  }
  if (header.compat != expect.compat) {
    return make_error("KV block file written under compat ", clipped(header.compat),
                      ", this cache's compat is ", clipped(expect.compat),
                      " (another model or KV layout)");
  }
  if (header.payload_bytes != expect.payload_bytes) {
    return make_error("KV block file payload of ", header.payload_bytes, " bytes, expected ",
                      expect.payload_bytes);
  }
  if (header.tokens.size() != expect.tokens.size()) {
    return make_error("KV block file holds ", header.tokens.size(), " tokens, expected ",
                      expect.tokens.size());
  }
  for (size_t i = 0; i < header.tokens.size(); ++i) {
    if (header.tokens[i] != expect.tokens[i]) {
      return make_error("KV block file's token ", i, " is ", header.tokens[i], ", expected ",
                        expect.tokens[i], " (a hash collision or a foreign file)");
    }
  }
  return Status();
}

Result<KvDiskBlockHeader> parse_kv_disk_block(std::span<const uint8_t> file,
                                              const KvDiskBlockExpect& expect) {
  SLUICE_ASSIGN_OR_RETURN(KvDiskBlockHeader h, parse_kv_disk_header(file));
  SLUICE_RETURN_IF_ERROR(check_kv_disk_header(h, expect));
  if (file.size() - h.header_bytes != h.payload_bytes) {
    return make_error("KV block file is ", file.size(), " bytes, its header and payload are ",
                      h.header_bytes + h.payload_bytes);
  }
  const uint32_t crc = crc32c(file.data() + h.header_bytes, h.payload_bytes);
  if (crc != h.crc) {
    return make_error("KV block payload checksum mismatch (stored 0x", hex16(h.crc).substr(8),
                      ", computed 0x", hex16(crc).substr(8), ")");
  }
  return h;
}

// ---- The tier -----------------------------------------------------------------------------

// Recycled payload buffers (all bytes_per_block long). A fresh allocation of block size is
// mmap()ed, or heap memory malloc has just trimmed back to the OS, and page-faults on first
// touch: measured 90-230 us per put() of 512 KiB against 20-40 us for a copy into a warm buffer
// (a loaded 2-core host).
// Keeps at most max_free idle buffers (max_pending_bytes / 8 of them: 32 MiB by default).
class KvDiskTier::BufferPool {
 public:
  BufferPool(size_t buffer_bytes, size_t max_free)
      : buffer_bytes_(buffer_bytes), max_free_(max_free) {}
  std::unique_ptr<uint8_t[]> take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        auto b = std::move(free_.back());
        free_.pop_back();
        return b;
      }
    }
    return std::make_unique_for_overwrite<uint8_t[]>(buffer_bytes_);
  }
  void give(std::unique_ptr<uint8_t[]> b) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < max_free_) free_.push_back(std::move(b));
  }

 private:
  const size_t buffer_bytes_, max_free_;
  std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> free_;
};

KvDiskTier::PendingWrite::~PendingWrite() {
  if (pool && payload) pool->give(std::move(payload));
}

KvDiskTier::KvDiskTier(KvDiskOptions options)
    : options_(std::move(options)),
      pool_(std::make_shared<BufferPool>(
          options_.bytes_per_block,
          std::max<size_t>(1, options_.max_pending_bytes / 8 / options_.bytes_per_block))) {}

Result<std::unique_ptr<KvDiskTier>> KvDiskTier::open(const KvDiskOptions& options) {
  const std::string where = "KV disk tier '" + options.dir + "'";
  if (options.dir.empty()) return make_error("KV disk tier: no directory given");
  if (options.bytes_per_block == 0) return make_error(where, ": bytes_per_block must be > 0");
  if (options.compat.size() > kKvDiskMaxCompatBytes) {
    return make_error(where, ": compat string of ", options.compat.size(), " bytes, at most ",
                      kKvDiskMaxCompatBytes);
  }
  const uint64_t smallest = kv_disk_file_bytes(options.compat.size(), 0, options.bytes_per_block);
  if (options.max_bytes < smallest) {
    return make_error(where, ": max_bytes ", options.max_bytes,
                      " cannot hold one block file (at least ", smallest, " bytes)");
  }
  if (struct stat st{}; ::stat(options.dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return make_error(where, ": not a directory");
  }
  SLUICE_RETURN_IF_ERROR(make_dirs(options.dir));

  std::unique_ptr<KvDiskTier> tier(new KvDiskTier(options));
  const std::string lock_path = options.dir + "/LOCK";
  tier->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (tier->lock_fd_ < 0) {
    return make_error(where, ": cannot open '", lock_path, "': ", errno_text(errno));
  }
  if (::flock(tier->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) {
      return make_error(where, ": in use by another KV disk tier (", lock_path,
                        " is locked); give each server its own directory");
    }
    return make_error(where, ": cannot lock '", lock_path, "': ", errno_text(e));
  }
  SLUICE_RETURN_IF_ERROR(tier->scan());
  try {
    tier->writer_ = std::thread([t = tier.get()] { t->writer_loop(); });
  } catch (const std::system_error& e) {
    return make_error(where, ": cannot start the writer thread: ", e.what());
  }
  return tier;
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    paused_ = false;
  }
  work_cv_.notify_one();
  if (writer_.joinable()) writer_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string KvDiskTier::path_of(uint64_t hash) const {
  return options_.dir + "/" + hex2(hash) + "/" + hex16(hash) + std::string(kBlockSuffix);
}

// Lists <dir>/<hh>/: .kvb.tmp files are deleted; <16 hex>.kvb files whose size some block can
// have (header with this compat + 0..65536 tokens + payload) are indexed in mtime order; other
// .kvb files are deleted as rejected. Anything else is left alone and not counted.
Status KvDiskTier::scan() {
  struct Found {
    int64_t mtime_ns;
    uint64_t hash;
    uint64_t bytes;
  };
  std::vector<Found> found;
  const uint64_t base = kv_disk_file_bytes(options_.compat.size(), 0, options_.bytes_per_block);
  uint64_t n_rejected = 0, n_temp = 0;

  DIR* top = ::opendir(options_.dir.c_str());
  if (!top) return make_error("cannot list '", options_.dir, "': ", errno_text(errno));
  std::vector<std::string> subdirs;
  while (const dirent* e = ::readdir(top)) {
    const std::string_view name = e->d_name;
    if (name.size() == 2 && parse_hex(name)) subdirs.emplace_back(name);
  }
  ::closedir(top);

  for (const std::string& sub : subdirs) {
    const std::string sub_path = options_.dir + "/" + sub;
    DIR* d = ::opendir(sub_path.c_str());
    if (!d) {
      if (errno == ENOTDIR) continue;
      return make_error("cannot list '", sub_path, "': ", errno_text(errno));
    }
    const int dfd = ::dirfd(d);
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name.size() == 16 + kTempSuffix.size() && name.ends_with(kTempSuffix) &&
          parse_hex(name.substr(0, 16))) {
        if (::unlinkat(dfd, e->d_name, 0) == 0) ++n_temp;
        continue;
      }
      if (name.size() != 16 + kBlockSuffix.size() || !name.ends_with(kBlockSuffix)) continue;
      const auto hash = parse_hex(name.substr(0, 16));
      if (!hash || name.substr(0, 2) != sub) continue;
      struct stat st {};
      if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
        continue;
      }
      const uint64_t bytes = uint64_t(st.st_size);
      const bool plausible =
          bytes >= base && (bytes - base) % 4 == 0 && (bytes - base) / 4 <= kKvDiskMaxTokens;
      if (!plausible) {
        SLUICE_LOG(kWarn, "KV disk tier: deleting '" + sub_path + "/" + std::string(name) +
                              "': " + std::to_string(bytes) +
                              " bytes, no block of this cache has that size");
        ::unlinkat(dfd, e->d_name, 0);
        ++n_rejected;
        continue;
      }
      found.push_back({int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, *hash, bytes});
    }
    ::closedir(d);
  }

  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.hash < b.hash;
  });
  std::vector<uint64_t> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Found& f : found) {
      lru_.push_back(f.hash);
      index_.emplace(f.hash, Entry{f.bytes, next_gen_++, std::prev(lru_.end())});
      total_bytes_ += f.bytes;
    }
    victims = evict_for(0);
    stats_.rejected += n_rejected;
    stats_.temp_removed += n_temp;
  }
  for (uint64_t h : victims) ::unlink(path_of(h).c_str());
  const KvDiskStats s = stats();
  SLUICE_LOG(kInfo, "KV disk tier '" + options_.dir + "': " + std::to_string(s.files) +
                        " blocks, " + human_bytes(s.bytes_on_disk) + " of " +
                        human_bytes(options_.max_bytes) + "; removed " + std::to_string(n_temp) +
                        " unfinished writes, " + std::to_string(n_rejected) +
                        " invalid files, evicted " + std::to_string(victims.size()));
  return Status();
}

std::vector<uint64_t> KvDiskTier::evict_for(uint64_t need) {
  std::vector<uint64_t> victims;
  while (!lru_.empty() && total_bytes_ + reserved_bytes_ + need > options_.max_bytes) {
    const uint64_t hash = lru_.front();
    erase_locked(index_.find(hash));
    victims.push_back(hash);
    ++stats_.evicted;
  }
  return victims;
}

void KvDiskTier::erase_locked(std::unordered_map<uint64_t, Entry>::iterator it) {
  total_bytes_ -= it->second.file_bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

void KvDiskTier::reject_locked(uint64_t hash, uint64_t gen) {
  ++stats_.rejected;
  const auto it = index_.find(hash);
  if (it == index_.end() || it->second.gen != gen) return;  // evicted or rewritten meanwhile
  erase_locked(it);
  // Under mu_: no write of `hash` can start until the index forgets it (put() refuses stored
  // hashes), so the file deleted here is the one that was read.
  ::unlink(path_of(hash).c_str());
}

bool KvDiskTier::contains(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.contains(hash) || pending_.contains(hash);
}

int32_t KvDiskTier::count_prefix(std::span<const uint64_t> hashes) const {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t n = 0;
  for (uint64_t h : hashes) {
    if (n == INT32_MAX || (!index_.contains(h) && !pending_.contains(h))) break;
    ++n;
  }
  return n;
}

bool KvDiskTier::put(uint64_t hash, std::span<const int32_t> tokens,
                     std::span<const uint8_t> payload) {
  const uint64_t file_bytes =
      kv_disk_file_bytes(options_.compat.size(), tokens.size(), payload.size());
  if (payload.size() != options_.bytes_per_block || tokens.size() > kKvDiskMaxTokens ||
      file_bytes > options_.max_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.write_refused;
    return false;
  }
  const uint64_t cost = payload.size() + 4 * uint64_t(tokens.size());
  // Checked twice: before the copy (a full queue costs the caller no copy) and after it,
  // under the lock that publishes the copy (another put() may have raced in).
  const auto admissible = [&]() -> bool {
    if (index_.contains(hash) || pending_.contains(hash)) return false;
    if (pending_bytes_ + cost > options_.max_pending_bytes) {
      ++stats_.write_dropped;
      return false;
    }
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!admissible()) return false;
  }
  auto w = std::make_shared<PendingWrite>();
  w->hash = hash;
  w->tokens.assign(tokens.begin(), tokens.end());
  w->payload = pool_->take();
  std::memcpy(w->payload.get(), payload.data(), payload.size());
  w->payload_bytes = payload.size();
  w->pool = pool_;
  w->cost = cost;
  w->file_bytes = file_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!admissible()) return false;
    pending_.emplace(hash, w);
    queue_.push_back(std::move(w));
    pending_bytes_ += cost;
  }
  work_cv_.notify_one();
  return true;
}

bool KvDiskTier::get(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> out) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const PendingWrite> queued;
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (out.size() != options_.bytes_per_block || tokens.size() > kKvDiskMaxTokens) {
      ++stats_.misses;
      return false;
    }
    if (const auto p = pending_.find(hash); p != pending_.end()) {
      queued = p->second;
    } else if (const auto it = index_.find(hash); it != index_.end()) {
      gen = it->second.gen;
      lru_.splice(lru_.end(), lru_, it->second.lru);
    } else {
      ++stats_.misses;
      return false;
    }
  }

  if (queued) {  // immutable once queued: copied outside the lock
    const bool same =
        std::equal(tokens.begin(), tokens.end(), queued->tokens.begin(), queued->tokens.end());
    if (same) std::memcpy(out.data(), queued->payload.get(), out.size());
    std::lock_guard<std::mutex> lock(mu_);
    if (!same) {
      ++stats_.misses;
      return false;
    }
    ++stats_.hits;
    ++stats_.pending_hits;
    return true;
  }

  const std::string path = path_of(hash);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.misses;
      // ENOENT: evicted meanwhile (the index no longer has this gen), or deleted by someone
      // else (it does): forget it.
      const auto it = index_.find(hash);
      if (e == ENOENT && it != index_.end() && it->second.gen == gen) erase_locked(it);
    }
    if (e != ENOENT)
      SLUICE_LOG(kWarn, "KV disk tier: cannot open '" + path + "': " + errno_text(e));
    return false;
  }

  // One preadv of the whole file: header, payload straight into `out`, and one byte more to
  // notice a file longer than it should be.
  const uint64_t header_bytes = kv_disk_file_bytes(options_.compat.size(), tokens.size(), 0);
  std::vector<uint8_t> header(header_bytes);
  uint8_t probe = 0;
  iovec iov[3] = {{header.data(), header.size()}, {out.data(), out.size()}, {&probe, 1}};
  const int64_t got = pread_all(fd, iov, 3);

  Status verdict;
  if (got < 0) {
    verdict = make_error("read failed: ", errno_text(int(-got)));
  } else {
    const auto h = parse_kv_disk_header(std::span<const uint8_t>(header).first(
        size_t(std::min<int64_t>(got, int64_t(header_bytes)))));
    const KvDiskBlockExpect expect{hash, options_.compat, tokens, options_.bytes_per_block};
    if (!h.ok()) {
      verdict = h.status();
    } else if (Status s = check_kv_disk_header(*h, expect); !s.ok()) {
      verdict = s;
    } else if (const uint64_t want = header_bytes + out.size(); uint64_t(got) > want) {
      verdict =
          make_error("KV block file is longer than its header and payload (", want, " bytes)");
    } else if (uint64_t(got) < want) {
      verdict =
          make_error("KV block file truncated: ", got, " bytes, its header and payload are ", want);
    } else if (const uint32_t crc = crc32c(out.data(), out.size()); crc != h->crc) {
      verdict = make_error("KV block payload checksum mismatch (stored 0x", hex16(h->crc).substr(8),
                           ", computed 0x", hex16(crc).substr(8), ")");
    }
  }
  if (verdict.ok()) ::futimens(fd, nullptr);  // mtime = last use: the next open()'s LRU order
  ::close(fd);

  const double dt = seconds_since(t0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (got > 0) stats_.bytes_read += uint64_t(got);
    stats_.read_seconds += dt;
    if (verdict.ok()) {
      ++stats_.hits;
      return true;
    }
    reject_locked(hash, gen);
  }
  SLUICE_LOG(kWarn, "KV disk tier: rejected '" + path + "': " + verdict.message());
  return false;
}

void KvDiskTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = false;
  work_cv_.notify_one();
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

void KvDiskTier::pause_writes() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void KvDiskTier::resume_writes() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  work_cv_.notify_one();
}

void KvDiskTier::drop_pending() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : queue_) {
    pending_.erase(w->hash);
    pending_bytes_ -= w->cost;
    ++stats_.write_dropped;
  }
  queue_.clear();
  if (!writing_) idle_cv_.notify_all();
}

KvDiskStats KvDiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvDiskStats s = stats_;
  s.files = index_.size();
  s.bytes_on_disk = total_bytes_;
  s.pending_bytes = pending_bytes_;
  return s;
}

void KvDiskTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || (!paused_ && !queue_.empty()); });
    if (queue_.empty()) {
      if (stop_) break;
      continue;
    }
    std::shared_ptr<const PendingWrite> w = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    // Room first, then the file: the temp file's bytes count from its creation, so the
    // directory never holds more than max_bytes of blocks (put() refused larger files).
    const std::vector<uint64_t> victims = evict_for(w->file_bytes);
    reserved_bytes_ = w->file_bytes;
    lock.unlock();

    // Victims are out of the index: a reader that opened one still reads it whole; one that
    // did not gets ENOENT (a miss). Deleted before the next write, so never a re-put's file.
    for (uint64_t h : victims) ::unlink(path_of(h).c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const Status written = write_file(*w);
    const double dt = seconds_since(t0);

    lock.lock();
    reserved_bytes_ = 0;
    if (written.ok()) {
      if (const auto old = index_.find(w->hash); old != index_.end()) erase_locked(old);
      lru_.push_back(w->hash);
      index_.emplace(w->hash, Entry{w->file_bytes, next_gen_++, std::prev(lru_.end())});
      total_bytes_ += w->file_bytes;
      ++stats_.writes;
      stats_.bytes_written += w->file_bytes;
      stats_.write_seconds += dt;
    } else {
      const uint64_t n = ++stats_.write_errors;
      if ((n & (n - 1)) == 0) {  // 1st, 2nd, 4th, 8th...: a full disk does not flood the log
        SLUICE_LOG(kWarn, "KV disk tier: write failed (" + std::to_string(n) +
                              " so far): " + written.message());
      }
    }
    pending_.erase(w->hash);
    pending_bytes_ -= w->cost;
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

Status KvDiskTier::write_file(const PendingWrite& w) {
  const std::string final_path = path_of(w.hash);
  const std::string temp_path = final_path + ".tmp";
  const std::span<const uint8_t> payload = w.payload_span();
  const uint32_t crc = crc32c(payload.data(), payload.size());
  const std::vector<uint8_t> header =
      encode_kv_disk_header(w.hash, options_.compat, w.tokens, payload.size(), crc);

  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = ::open(temp_path.c_str(), flags, 0644);
  if (fd < 0 && errno == ENOENT) {  // first block of this <hh>/ subdirectory
    SLUICE_RETURN_IF_ERROR(make_dirs(options_.dir + "/" + hex2(w.hash)));
    fd = ::open(temp_path.c_str(), flags, 0644);
  }
  if (fd < 0) return make_error("cannot create '", temp_path, "': ", errno_text(errno));

  iovec iov[2] = {{const_cast<uint8_t*>(header.data()), header.size()},
                  {const_cast<uint8_t*>(payload.data()), payload.size()}};
  Status s = write_all(fd, iov, 2);
  if (s.ok() && options_.sync && ::fdatasync(fd) != 0) s = make_error(errno_text(errno));
  if (::close(fd) != 0 && s.ok()) s = make_error(errno_text(errno));
  if (s.ok() && ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    s = make_error("rename to '", final_path, "': ", errno_text(errno));
  }
  if (!s.ok()) {
    ::unlink(temp_path.c_str());
    return make_error("cannot write '", temp_path, "': ", s.message());
  }
  if (options_.sync) {  // the rename itself survives a power loss once its directory is synced
    const std::string sub = options_.dir + "/" + hex2(w.hash);
    if (const int dfd = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return Status();
}

}  // namespace sluice
