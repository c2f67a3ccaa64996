// libFuzzer target: the KV disk tier's block-file parser (parse_kv_disk_header,
// check_kv_disk_header, parse_kv_disk_block) on arbitrary bytes. Checks: no crash, hang,
// exception or allocation past the bounds; an accepted header is within them (compat <= 4096
// bytes, tokens <= 65536, header inside the input) and re-encodes to exactly the input's header
// bytes; the whole-file check accepts exactly when the size and the payload crc32c agree, and
// never under another hash, compat, payload size or token.
//
// The header checksum would stop mutations at the first check, so each input also runs with
// its checksums repaired: the header crc, then the payload crc as well (when the fields say
// where they lie), which takes the fuzzer past them to the checks behind.
//
//   scripts/fuzz 60 kv_disk_fuzz
// Seeds: fuzz/seeds/kv_disk_fuzz (block files as KvDiskTier writes them; one with absurd sizes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "base/crc32c.h"
#include "kv_io/kv_disk.h"

namespace {

using sluice::KvDiskBlockExpect;

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

void check(std::span<const uint8_t> file) {
  const auto h = sluice::parse_kv_disk_header(file);
  if (!h.ok()) {
    if (h.message().empty()) std::abort();
    if (sluice::parse_kv_disk_block(file, KvDiskBlockExpect{}).ok()) std::abort();
    return;
  }
  if (h->compat.size() > sluice::kKvDiskMaxCompatBytes) std::abort();
  if (h->tokens.size() > sluice::kKvDiskMaxTokens) std::abort();
  if (h->header_bytes > file.size()) std::abort();
  if (h->header_bytes != sluice::kv_disk_file_bytes(h->compat.size(), h->tokens.size(), 0)) {
    std::abort();
  }
  const std::vector<uint8_t> again =
      sluice::encode_kv_disk_header(h->hash, h->compat, h->tokens, h->payload_bytes, h->crc);
  if (again.size() != h->header_bytes || std::memcmp(again.data(), file.data(), again.size())) {
    std::abort();
  }

  const KvDiskBlockExpect expect{h->hash, h->compat, h->tokens, h->payload_bytes};
  if (!sluice::check_kv_disk_header(*h, expect).ok()) std::abort();
  const uint64_t rest = file.size() - h->header_bytes;
  const bool whole =
      rest == h->payload_bytes && sluice::crc32c(file.data() + h->header_bytes, rest) == h->crc;
  if (sluice::parse_kv_disk_block(file, expect).ok() != whole) std::abort();

  KvDiskBlockExpect other = expect;
  other.hash ^= 1;
  if (sluice::parse_kv_disk_block(file, other).ok()) std::abort();
  other = expect;
  other.payload_bytes += 1;
  if (sluice::parse_kv_disk_block(file, other).ok()) std::abort();
  std::string compat = h->compat + "x";
  other = expect;
  other.compat = compat;
  if (sluice::parse_kv_disk_block(file, other).ok()) std::abort();
  if (!h->tokens.empty()) {
    std::vector<int32_t> tokens = h->tokens;
    tokens.back() ^= 1;
    other = expect;
    other.tokens = tokens;
    if (sluice::parse_kv_disk_block(file, other).ok()) std::abort();
    tokens.pop_back();
    other.tokens = tokens;
    if (sluice::parse_kv_disk_block(file, other).ok()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  check(file);

  // With the checksums repaired, where the (bounded) header fields place them inside the input.
  if (size < sluice::kKvDiskFixedHeaderBytes) return 0;
  const uint64_t compat_bytes = le32(data + 16), n_tokens = le32(data + 20);
  if (compat_bytes > sluice::kKvDiskMaxCompatBytes || n_tokens > sluice::kKvDiskMaxTokens) return 0;
  const uint64_t header_bytes = sluice::kv_disk_file_bytes(compat_bytes, n_tokens, 0);
  if (header_bytes > size) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  const auto fix_header_crc = [&] {
    uint32_t crc = sluice::crc32c(fixed.data(), 36);
    crc = sluice::crc32c(fixed.data() + 40, header_bytes - 40, crc);
    put_le32(fixed.data() + 36, crc);
  };
  fix_header_crc();
  check(fixed);
  put_le32(fixed.data() + 32, sluice::crc32c(fixed.data() + header_bytes, size - header_bytes));
  fix_header_crc();  // it covers the payload crc field
  check(fixed);
  return 0;
}
