// The KV disk tier: the block file format (encode/parse, bounds, checksums) and KvDiskTier
// (round trip, rejections of damaged files, restart, size bound and LRU eviction, the write
// queue bound, crash leftovers, concurrency). Each test uses a fresh temporary directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/crc32c.h"
#include "kv_io/kv_disk.h"
#include "test_util.h"

extern char** environ;

namespace sluice {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBlockSize = 16;  // tokens per block
constexpr size_t kPayload = 4096;   // bytes_per_block of most tests
const std::string kCompat = "llama-3.2-1b q8_0 | f16 L16 H8 D64 B16";

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A block's hash, tokens and payload all follow from its number, so any file can be checked.
uint64_t hash_of(uint64_t i) {
  return mix(i * 7919 + 1);
}
// The hash chain of a prompt of blocks 0 .. n-1.
std::vector<uint64_t> chain_of(uint64_t n) {
  std::vector<uint64_t> chain;
  for (uint64_t i = 0; i < n; ++i) chain.push_back(hash_of(i));
  return chain;
}
std::vector<int32_t> tokens_of(uint64_t hash) {
  std::vector<int32_t> t(kBlockSize);
  for (int32_t i = 0; i < kBlockSize; ++i) t[size_t(i)] = int32_t(mix(hash + uint64_t(i)) % 128256);
  return t;
}
std::vector<uint8_t> payload_of(uint64_t hash, size_t n = kPayload) {
  std::vector<uint8_t> p(n);
  uint64_t s = hash;
  for (size_t i = 0; i < n; i += 8) {
    s = mix(s);
    for (size_t j = 0; j < 8 && i + j < n; ++j) p[i + j] = uint8_t(s >> (8 * j));
  }
  return p;
}

uint64_t file_bytes(size_t payload = kPayload, const std::string& compat = kCompat) {
  return kv_disk_file_bytes(compat.size(), kBlockSize, payload);
}

KvDiskOptions options_for(const std::string& dir, uint64_t max_blocks, size_t payload = kPayload) {
  KvDiskOptions o;
  o.dir = dir;
  o.compat = kCompat;
  o.bytes_per_block = payload;
  o.max_bytes = max_blocks * file_bytes(payload);
  return o;
}

std::unique_ptr<KvDiskTier> open_tier(const KvDiskOptions& o) {
  auto t = KvDiskTier::open(o);
  EXPECT_TRUE(t.ok()) << t.message();
  return t.ok() ? std::move(t).value() : nullptr;
}

bool put_block(KvDiskTier& tier, uint64_t hash) {
  return tier.put(hash, tokens_of(hash), payload_of(hash, tier.options().bytes_per_block));
}

// get() succeeds and returns exactly the block's payload.
testing::AssertionResult got_block(KvDiskTier& tier, uint64_t hash) {
  std::vector<uint8_t> out(tier.options().bytes_per_block);
  if (!tier.get(hash, tokens_of(hash), out)) return testing::AssertionFailure() << "get() missed";
  if (out != payload_of(hash, out.size())) return testing::AssertionFailure() << "wrong bytes";
  return testing::AssertionSuccess();
}

// Regular files under `dir` (recursively): their count and total size, optionally by suffix.
struct DirUsage {
  uint64_t files = 0, bytes = 0;
};
// Tolerates files vanishing while it lists (a writer may be running).
DirUsage usage(const std::string& dir, const std::string& suffix) {
  DirUsage u;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || !it->path().string().ends_with(suffix)) continue;
    const uint64_t size = it->file_size(ec);
    if (ec) {
      ec.clear();
      continue;
    }
    ++u.files;
    u.bytes += size;
  }
  return u;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  f.seekp(std::streamoff(offset));
  c = char(c ^ 0x40);
  f.write(&c, 1);
}

std::string unique_dir(const test::TempDir& tmp) {
  return tmp.path("kv");
}

// ---- The file format --------------------------------------------------------------------

std::vector<uint8_t> block_file(uint64_t hash, const std::string& compat = kCompat) {
  const auto payload = payload_of(hash);
  auto file = encode_kv_disk_header(hash, compat, tokens_of(hash), payload.size(),
                                    crc32c(payload.data(), payload.size()));
  file.insert(file.end(), payload.begin(), payload.end());
  return file;
}

KvDiskBlockExpect expect_of(uint64_t hash, const std::vector<int32_t>& tokens) {
  return KvDiskBlockExpect{hash, kCompat, tokens, kPayload};
}

TEST(KvDiskFormat, EncodeParseRoundTrip) {
  const uint64_t h = hash_of(1);
  const auto file = block_file(h);
  ASSERT_EQ(file.size(), file_bytes());
  const auto tokens = tokens_of(h);
  const auto parsed = parse_kv_disk_block(file, expect_of(h, tokens));
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  EXPECT_EQ(parsed->hash, h);
  EXPECT_EQ(parsed->compat, kCompat);
  EXPECT_EQ(parsed->tokens, tokens);
  EXPECT_EQ(parsed->payload_bytes, kPayload);
  EXPECT_EQ(parsed->header_bytes, file_bytes() - kPayload);
  EXPECT_EQ(std::string(file.begin(), file.begin() + 4), "SKVB");
}

TEST(KvDiskFormat, RejectsDamageAndMismatchesWithReasons) {
  const uint64_t h = hash_of(2);
  const auto tokens = tokens_of(h);
  const auto good = block_file(h);
  const auto expect = expect_of(h, tokens);
  const auto reason = [&](const std::vector<uint8_t>& f, const KvDiskBlockExpect& e) {
    const auto r = parse_kv_disk_block(f, e);
    return r.ok() ? std::string("accepted") : r.message();
  };
  auto f = good;
  f[0] = 'X';
  EXPECT_NE(reason(f, expect).find("not a KV block file"), std::string::npos);
  f = good;
  f[4] = 9;
  EXPECT_NE(reason(f, expect).find("version 9"), std::string::npos);
  f = good;
  f[40 + kCompat.size() + 3] ^= 1;  // a token: the header checksum covers it
  EXPECT_NE(reason(f, expect).find("header checksum"), std::string::npos);
  f = good;
  f.back() ^= 1;
  EXPECT_NE(reason(f, expect).find("payload checksum"), std::string::npos);
  f = good;
  f.pop_back();
  EXPECT_NE(reason(f, expect).find("header and payload are"), std::string::npos);
  f = good;
  f.push_back(0);
  EXPECT_NE(reason(f, expect).find("header and payload are"), std::string::npos);
  f.assign(good.begin(), good.begin() + 50);
  EXPECT_NE(reason(f, expect).find("truncated"), std::string::npos);

  auto other = tokens;
  other[5] += 1;
  EXPECT_NE(reason(good, expect_of(h, other)).find("token 5"), std::string::npos);
  EXPECT_NE(reason(good, expect_of(h + 1, tokens)).find("holds block"), std::string::npos);
  KvDiskBlockExpect other_compat = expect;
  other_compat.compat = "another model";
  EXPECT_NE(reason(good, other_compat).find("compat"), std::string::npos);
  KvDiskBlockExpect other_size = expect;
  other_size.payload_bytes = 8192;
  EXPECT_NE(reason(good, other_size).find("payload of 4096 bytes, expected 8192"),
            std::string::npos);
}

TEST(KvDiskFormat, AbsurdHeaderValuesAreRefusedBeforeAllocating) {
  auto f = block_file(hash_of(3));
  auto huge_tokens = f;
  huge_tokens[20] = huge_tokens[21] = huge_tokens[22] = huge_tokens[23] = 0xff;  // 4 G tokens
  auto r = parse_kv_disk_header(huge_tokens);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("4294967295 tokens, at most 65536"), std::string::npos);
  auto huge_compat = f;
  huge_compat[16] = 0x01;
  huge_compat[17] = 0x10;  // 4097 bytes
  huge_compat[18] = huge_compat[19] = 0;
  r = parse_kv_disk_header(huge_compat);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("compat string of 4097 bytes"), std::string::npos);
  EXPECT_FALSE(parse_kv_disk_header(std::span<const uint8_t>()).ok());
}

// ---- The tier ---------------------------------------------------------------------------

TEST(KvDiskTier, PutFlushGetRoundTrip) {
  test::TempDir tmp;
  auto tier = open_tier(options_for(unique_dir(tmp), 8));
  ASSERT_TRUE(tier);
  const uint64_t h = hash_of(10);
  EXPECT_TRUE(put_block(*tier, h));
  EXPECT_TRUE(tier->contains(h));
  EXPECT_FALSE(put_block(*tier, h)) << "queued or stored: a second put is refused";
  tier->flush();
  EXPECT_TRUE(got_block(*tier, h));
  const auto s = tier->stats();
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.pending_hits, 0u);
  EXPECT_EQ(s.files, 1u);
  EXPECT_EQ(s.bytes_on_disk, file_bytes());
  EXPECT_EQ(s.bytes_written, file_bytes());
  EXPECT_EQ(s.bytes_read, file_bytes());
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_GT(s.read_seconds, 0);
  EXPECT_GT(s.write_seconds, 0);
  EXPECT_EQ(fs::file_size(tier->path_of(h)), file_bytes());
  EXPECT_FALSE(put_block(*tier, h));
}

TEST(KvDiskTier, GetOfAMissingHashIsAMiss) {
  test::TempDir tmp;
  auto tier = open_tier(options_for(unique_dir(tmp), 8));
  ASSERT_TRUE(tier);
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->get(hash_of(1), tokens_of(hash_of(1)), out));
  EXPECT_EQ(tier->stats().misses, 1u);
  EXPECT_EQ(tier->stats().hits, 0u);
  EXPECT_FALSE(tier->contains(hash_of(1)));
}

TEST(KvDiskTier, OtherTokensAreNotReturned) {
  test::TempDir tmp;
  auto tier = open_tier(options_for(unique_dir(tmp), 8));
  ASSERT_TRUE(tier);
  const uint64_t h = hash_of(11);
  ASSERT_TRUE(put_block(*tier, h));
  auto wrong = tokens_of(h);
  wrong.back() += 1;
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->get(h, wrong, out)) << "from the queue";
  tier->flush();
  EXPECT_FALSE(tier->get(h, wrong, out)) << "from disk";
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_FALSE(fs::exists(tier->path_of(h)));
  EXPECT_FALSE(tier->contains(h));
}

TEST(KvDiskTier, RestartKeepsEveryBlock) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 8);
  {
    auto tier = open_tier(o);
    ASSERT_TRUE(tier);
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(put_block(*tier, hash_of(i)));
    // No flush: the destructor drains the queue.
  }
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().files, 5u);
  EXPECT_EQ(tier->stats().bytes_on_disk, 5 * file_bytes());
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(got_block(*tier, hash_of(i))) << i;
  EXPECT_EQ(tier->stats().hits, 5u);
  EXPECT_EQ(tier->stats().rejected, 0u);
}

// Writes block 0 (and 1) in a fresh tier on `dir`, closes it, and returns block 0's path.
std::string stored_block(const KvDiskOptions& o) {
  auto tier = open_tier(o);
  if (!tier) return {};
  put_block(*tier, hash_of(0));
  put_block(*tier, hash_of(1));
  return tier->path_of(hash_of(0));
}

// Writes block `hash` in `tier` and returns its path.
std::string stored_block_in(KvDiskTier& tier, uint64_t hash) {
  put_block(tier, hash);
  tier.flush();
  return tier.path_of(hash);
}

TEST(KvDiskTier, CorruptPayloadByteIsRejectedAndDeleted) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 8);
  const std::string path = stored_block(o);
  flip_byte(path, file_bytes() - 100);
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_TRUE(tier->contains(hash_of(0))) << "open() reads no payloads";
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->get(hash_of(0), tokens_of(hash_of(0)), out));
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_EQ(tier->stats().hits, 0u);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(tier->contains(hash_of(0)));
  EXPECT_EQ(tier->stats().files, 1u);
  EXPECT_EQ(tier->stats().bytes_on_disk, file_bytes());
  EXPECT_TRUE(got_block(*tier, hash_of(1))) << "the other block is intact";
}

TEST(KvDiskTier, TruncatedOrOverlongFileIsRejected) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 8);
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  ASSERT_TRUE(put_block(*tier, hash_of(0)));
  ASSERT_TRUE(put_block(*tier, hash_of(1)));
  tier->flush();
  // While open: the index still has the block; get() finds the file short.
  fs::resize_file(tier->path_of(hash_of(0)), file_bytes() - 4);
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->get(hash_of(0), tokens_of(hash_of(0)), out));
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_FALSE(fs::exists(tier->path_of(hash_of(0))));
  // Bytes after the payload: the header and checksums are intact, the size is not.
  const std::string path2 = stored_block_in(*tier, hash_of(2));
  std::ofstream(path2, std::ios::app | std::ios::binary) << "tail";
  EXPECT_FALSE(tier->get(hash_of(2), tokens_of(hash_of(2)), out));
  EXPECT_EQ(tier->stats().rejected, 2u);
  EXPECT_FALSE(fs::exists(path2));
  // At start-up: a size no block can have is rejected by the scan.
  const std::string path1 = tier->path_of(hash_of(1));
  tier.reset();
  fs::resize_file(path1, file_bytes() - 1);
  tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_EQ(tier->stats().files, 0u);
  EXPECT_FALSE(fs::exists(path1));
}

TEST(KvDiskTier, FileOfAnotherCompatIsRejected) {
  test::TempDir tmp;
  auto o = options_for(unique_dir(tmp), 8);
  const std::string path = stored_block(o);
  // Same length: passes the scan's size check; get() reads the header and rejects it.
  o.compat = kCompat;
  o.compat.back() = 'X';
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().files, 2u);
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->get(hash_of(0), tokens_of(hash_of(0)), out));
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_FALSE(fs::exists(path));
  // Another length: no block of this cache has such a size; the scan deletes it.
  tier.reset();
  o.compat = "another model";
  tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_EQ(tier->stats().files, 0u);
  EXPECT_EQ(usage(o.dir, ".kvb").files, 0u);
}

TEST(KvDiskTier, HeaderGarbageIsRejected) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 8);
  const std::string path = stored_block(o);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::string garbage(40, '\xab');
    f.write(garbage.data(), std::streamsize(garbage.size()));
  }
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->get(hash_of(0), tokens_of(hash_of(0)), out));
  EXPECT_EQ(tier->stats().rejected, 1u);
  EXPECT_FALSE(fs::exists(path));
}

TEST(KvDiskTier, SizeBoundHoldsUnderChurn) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 10);
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(put_block(*tier, hash_of(i)));
    if (i % 10 == 9) {
      tier->flush();
      ASSERT_LE(usage(o.dir, "").bytes, o.max_bytes) << "after block " << i;
    }
  }
  tier->flush();
  const auto s = tier->stats();
  EXPECT_LE(s.bytes_on_disk, o.max_bytes);
  EXPECT_EQ(s.files, 10u);
  EXPECT_EQ(s.writes, 200u);
  EXPECT_EQ(s.evicted, 190u);
  EXPECT_LE(usage(o.dir, "").bytes, o.max_bytes);  // everything: blocks, temp files, LOCK
  EXPECT_EQ(usage(o.dir, ".kvb").files, 10u);
  for (uint64_t i = 190; i < 200; ++i) EXPECT_TRUE(got_block(*tier, hash_of(i))) << i;
  for (uint64_t i = 0; i < 190; ++i) ASSERT_FALSE(tier->contains(hash_of(i))) << i;
}

TEST(KvDiskTier, GetRefreshesABlockSoItSurvivesEviction) {
  test::TempDir tmp;
  auto tier = open_tier(options_for(unique_dir(tmp), 10));
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(put_block(*tier, hash_of(i)));
  tier->flush();
  ASSERT_TRUE(got_block(*tier, hash_of(0)));  // 0 is now the most recently used
  for (uint64_t i = 10; i < 15; ++i) ASSERT_TRUE(put_block(*tier, hash_of(i)));
  tier->flush();
  EXPECT_TRUE(tier->contains(hash_of(0)));
  for (uint64_t i = 1; i <= 5; ++i) EXPECT_FALSE(tier->contains(hash_of(i))) << i;
  for (uint64_t i = 6; i < 15; ++i) EXPECT_TRUE(tier->contains(hash_of(i))) << i;
  EXPECT_TRUE(got_block(*tier, hash_of(0)));
}

TEST(KvDiskTier, RestartOrdersLruByMtimeAndHitsTouchIt) {
  test::TempDir tmp;
  auto o = options_for(unique_dir(tmp), 10);
  {
    auto tier = open_tier(o);
    ASSERT_TRUE(tier);
    for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(put_block(*tier, hash_of(i)));
    tier->flush();
    // Block i last used i hours ago (9 oldest, 0 newest)...
    const auto now = fs::file_time_type::clock::now();
    for (uint64_t i = 0; i < 10; ++i) {
      fs::last_write_time(tier->path_of(hash_of(i)), now - std::chrono::hours(1 + i));
    }
    // ...except block 7, read now.
    ASSERT_TRUE(got_block(*tier, hash_of(7)));
  }
  o.max_bytes = 3 * file_bytes();  // the reopened tier keeps the 3 most recently used
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().evicted, 7u);
  EXPECT_EQ(tier->stats().files, 3u);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(tier->contains(hash_of(i)), i == 7 || i == 0 || i == 1) << i;
  }
  EXPECT_EQ(usage(o.dir, ".kvb").files, 3u);
}

TEST(KvDiskTier, FullQueueDropsPutsWithoutBlocking) {
  test::TempDir tmp;
  auto o = options_for(unique_dir(tmp), 100);
  const uint64_t cost = kPayload + 4 * kBlockSize;  // a queued block's bytes
  o.max_pending_bytes = 3 * cost;
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  tier->pause_writes();  // nothing leaves the queue: put() would wait forever if it blocked
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(put_block(*tier, hash_of(i)), i < 3) << i;
  auto s = tier->stats();
  EXPECT_EQ(s.write_dropped, 7u);
  EXPECT_EQ(s.pending_bytes, 3 * cost);
  EXPECT_EQ(s.writes, 0u);
  // Queued blocks count as present and are served from memory.
  const std::vector<uint64_t> chain = {hash_of(0), hash_of(1), hash_of(2), hash_of(3)};
  EXPECT_EQ(tier->count_prefix(chain), 3);
  EXPECT_TRUE(got_block(*tier, hash_of(2)));
  EXPECT_EQ(tier->stats().pending_hits, 1u);
  tier->flush();
  s = tier->stats();
  EXPECT_EQ(s.writes, 3u);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_TRUE(put_block(*tier, hash_of(3))) << "room again";

  // A queue smaller than one block drops every put.
  test::TempDir tmp2;
  auto tiny = options_for(unique_dir(tmp2), 100);
  tiny.max_pending_bytes = cost - 1;
  auto tier2 = open_tier(tiny);
  ASSERT_TRUE(tier2);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_FALSE(put_block(*tier2, hash_of(i)));
  tier2->flush();
  EXPECT_EQ(tier2->stats().write_dropped, 5u);
  EXPECT_EQ(tier2->stats().writes, 0u);
}

TEST(KvDiskTier, DropPendingDiscardsQueuedWritesAndTheDestructorDrains) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 100);
  {
    auto tier = open_tier(o);
    ASSERT_TRUE(tier);
    tier->pause_writes();
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(put_block(*tier, hash_of(i)));
    tier->drop_pending();
    EXPECT_EQ(tier->stats().write_dropped, 4u);
    EXPECT_FALSE(tier->contains(hash_of(0)));
    for (uint64_t i = 4; i < 7; ++i) ASSERT_TRUE(put_block(*tier, hash_of(i)));
    // Destroyed paused with 3 queued: they are written.
  }
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().files, 3u);
  for (uint64_t i = 4; i < 7; ++i) EXPECT_TRUE(got_block(*tier, hash_of(i)));
}

TEST(KvDiskTier, PutRefusesBlocksItCannotStore) {
  test::TempDir tmp;
  auto tier = open_tier(options_for(unique_dir(tmp), 2));
  ASSERT_TRUE(tier);
  const uint64_t h = hash_of(0);
  EXPECT_FALSE(tier->put(h, tokens_of(h), payload_of(h, kPayload - 1)));
  // 2048 tokens make a file larger than max_bytes (two files of 16 tokens and 4 KiB each).
  std::vector<int32_t> many(2048, 1);
  EXPECT_FALSE(tier->put(h, many, payload_of(h)));
  std::vector<int32_t> absurd(kKvDiskMaxTokens + 1, 1);
  EXPECT_FALSE(tier->put(h, absurd, payload_of(h)));
  EXPECT_EQ(tier->stats().write_refused, 3u);
  EXPECT_FALSE(tier->contains(h));
  std::vector<uint8_t> small(kPayload - 1);
  EXPECT_FALSE(tier->get(h, tokens_of(h), small));
}

TEST(KvDiskTier, LeftoverTempFilesAreDeletedOnOpen) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 8);
  const std::string path = stored_block(o);
  std::string other = path;  // the same <hh>/ directory, another hash
  other[other.size() - 5] = other[other.size() - 5] == '0' ? '1' : '0';
  const std::string temp = other + ".tmp";
  const std::string temp_of_block = path + ".tmp";
  const std::string foreign = o.dir + "/notes.txt";
  std::ofstream(temp) << "half a block";
  std::ofstream(temp_of_block) << "half";
  std::ofstream(foreign) << "not ours";
  ASSERT_EQ(usage(o.dir, ".tmp").files, 2u);
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().temp_removed, 2u);
  EXPECT_EQ(usage(o.dir, ".tmp").files, 0u);
  EXPECT_TRUE(fs::exists(foreign)) << "files the tier did not write are left alone";
  EXPECT_EQ(tier->stats().files, 2u);
  EXPECT_TRUE(got_block(*tier, hash_of(0)));
}

TEST(KvDiskTier, OneTierPerDirectory) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 8);
  auto a = open_tier(o);
  ASSERT_TRUE(a);
  const auto b = KvDiskTier::open(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("in use by another KV disk tier"), std::string::npos) << b.message();
  a.reset();
  EXPECT_TRUE(open_tier(o)) << "the lock goes with the tier";
}

TEST(KvDiskTier, OpenRefusesBadOptions) {
  test::TempDir tmp;
  auto o = options_for(unique_dir(tmp), 8);
  o.max_bytes = 0;
  EXPECT_NE(KvDiskTier::open(o).message().find("cannot hold one block file"), std::string::npos);
  o = options_for(unique_dir(tmp), 8);
  o.bytes_per_block = 0;
  EXPECT_NE(KvDiskTier::open(o).message().find("bytes_per_block must be > 0"), std::string::npos);
  o = options_for(unique_dir(tmp), 8);
  o.compat.assign(kKvDiskMaxCompatBytes + 1, 'c');
  EXPECT_NE(KvDiskTier::open(o).message().find("compat string"), std::string::npos);
  std::ofstream(tmp.path("file")) << "a file, not a directory";
  o = options_for(tmp.path("file/kv"), 8);
  EXPECT_NE(KvDiskTier::open(o).message().find("cannot create directory"), std::string::npos);
  o = options_for(tmp.path("file"), 8);
  EXPECT_NE(KvDiskTier::open(o).message().find("not a directory"), std::string::npos);
  o = options_for(tmp.path("new/parents/kv"), 8);
  EXPECT_TRUE(open_tier(o)) << "parents are created";
}

TEST(KvDiskTier, CountPrefixStopsAtTheFirstMissingHash) {
  test::TempDir tmp;
  auto tier = open_tier(options_for(unique_dir(tmp), 8));
  ASSERT_TRUE(tier);
  const std::vector<uint64_t> chain = chain_of(5);
  for (uint64_t i : {0, 1, 3, 4}) ASSERT_TRUE(put_block(*tier, chain[i]));
  EXPECT_EQ(tier->count_prefix(chain), 2) << "queued";
  tier->flush();
  EXPECT_EQ(tier->count_prefix(chain), 2) << "stored";
  EXPECT_EQ(tier->count_prefix(std::span(chain).subspan(3)), 2);
  EXPECT_EQ(tier->count_prefix(std::span(chain).subspan(2)), 0);
  EXPECT_EQ(tier->count_prefix({}), 0);
  const auto s = tier->stats();
  EXPECT_EQ(s.hits + s.misses, 0u) << "an index probe, not a read";
}

TEST(KvDiskTier, ConcurrentPutsAndGetsNeverReturnWrongData) {
  test::TempDir tmp;
  const auto o = options_for(unique_dir(tmp), 48);  // evicts while readers read
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  constexpr uint64_t kBlocks = 240;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> gets{0}, hits{0}, wrong{0};
  std::atomic<int32_t> puts_started{0};  // blocks whose put() began: a bound on any prefix
  std::vector<std::thread> threads;
  for (uint64_t w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (uint64_t i = w; i < kBlocks; i += 2) {
        ++puts_started;
        while (!put_block(*tier, hash_of(i)) && !tier->contains(hash_of(i))) {
          std::this_thread::yield();  // queue full: retry
        }
      }
    });
  }
  for (uint64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<uint8_t> out(kPayload);
      uint64_t x = r;
      while (!done.load()) {
        x = mix(x);
        const uint64_t h = hash_of(x % kBlocks);
        ++gets;
        if (tier->get(h, tokens_of(h), out)) {
          ++hits;
          if (out != payload_of(h)) ++wrong;
        }
      }
    });
  }
  threads.emplace_back([&] {
    const std::vector<uint64_t> chain = chain_of(kBlocks);
    while (!done.load()) {
      // A block counts once its put() queued it, so never more than the puts begun before the
      // count (read after it).
      const int32_t n = tier->count_prefix(chain);
      EXPECT_LE(n, puts_started.load());
      EXPECT_LE(tier->stats().bytes_on_disk, o.max_bytes);
      std::this_thread::yield();
    }
  });
  threads[0].join();
  threads[1].join();
  tier->flush();
  done = true;
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();

  const auto s = tier->stats();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(s.rejected, 0u) << "races must not make valid files look damaged";
  EXPECT_EQ(s.hits, hits.load());
  EXPECT_EQ(s.hits + s.misses, gets.load());
  EXPECT_GT(s.hits, 0u);
  EXPECT_EQ(s.writes, kBlocks);
  EXPECT_EQ(s.files, 48u);
  EXPECT_LE(usage(o.dir, "").bytes, o.max_bytes);
  // Nothing is queued any more: the prefix is the leading blocks still stored, at most the 48
  // files the budget holds.
  int32_t stored_prefix = 0;
  while (stored_prefix < int32_t(kBlocks) && tier->contains(hash_of(uint64_t(stored_prefix))))
    ++stored_prefix;
  EXPECT_EQ(tier->count_prefix(chain_of(kBlocks)), stored_prefix);
  EXPECT_LE(stored_prefix, 48);
}

// ---- kill -9 during writes ----------------------------------------------------------------

constexpr size_t kBigPayload = 256 << 10;  // slow enough writes that a kill often lands mid-file
const char* const kChildDirVar = "SLUICE_KV_DISK_CHILD_DIR";

// Run only as the child of KillDuringWritesLeavesOnlyTempFiles: writes blocks until killed.
TEST(KvDiskTierChild, DISABLED_WritesUntilKilled) {
  const char* dir = std::getenv(kChildDirVar);
  if (!dir) GTEST_SKIP() << "run by KillDuringWritesLeavesOnlyTempFiles";
  auto tier = open_tier(options_for(dir, 24, kBigPayload));
  ASSERT_TRUE(tier);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (uint64_t i = 0; std::chrono::steady_clock::now() < end; ++i) {
    while (!put_block(*tier, hash_of(i)))
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

TEST(KvDiskTier, KillDuringWritesLeavesOnlyTempFiles) {
  test::TempDir tmp;
  const std::string dir = unique_dir(tmp);
  const std::string env_var = std::string(kChildDirVar) + "=" + dir;
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(env_var.c_str()));
  env.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=KvDiskTierChild.DISABLED_WritesUntilKilled";
  std::string also = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), also.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, env.data()), 0);
  posix_spawn_file_actions_destroy(&actions);

  // Once the child has written (and evicted) a while, kill it wherever it is.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline &&
         !(fs::exists(dir) && usage(dir, ".kvb").files >= 24)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended before the kill (status " << status << ")";

  const uint64_t n_temp = usage(dir, ".tmp").files;
  ASSERT_LE(n_temp, 1u) << "one writer: at most one file in progress";
  auto o = options_for(dir, 24, kBigPayload);
  auto tier = open_tier(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->stats().temp_removed, n_temp);
  EXPECT_EQ(usage(dir, ".tmp").files, 0u);
  EXPECT_LE(usage(dir, "").bytes, o.max_bytes);
  EXPECT_GE(tier->stats().files, 20u);
  // Every block file left is whole: its name, header, tokens and payload all check out.
  uint64_t checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".kvb") continue;
    const uint64_t h = std::stoull(e.path().stem().string(), nullptr, 16);
    EXPECT_TRUE(got_block(*tier, h)) << e.path();
    ++checked;
  }
  EXPECT_EQ(checked, tier->stats().hits);
  EXPECT_EQ(tier->stats().rejected, 0u);
}

}  // namespace
}  // namespace sluice
