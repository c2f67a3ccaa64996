#include "base/unicode.h"

#include <algorithm>

#include "base/unicode_data.h"

namespace sluice::unicode {

namespace {

bool is_cont(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Valid range of the second byte of a sequence led by `lead` (Unicode Table 3-7).
void second_byte_range(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

// Sequence length for a valid lead byte, 0 for bytes that never start a sequence.
uint32_t lead_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

struct Gpt2Tables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<char, 256 * 2> utf8{};  // 2 bytes per entry
  std::array<uint8_t, 256> utf8_len{};
  std::array<int16_t, 324> cp_to_byte{};  // code points < 324 cover the whole alphabet
  Gpt2Tables() {
    cp_to_byte.fill(-1);
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? uint32_t(b) : 256 + n++;
      byte_to_cp[b] = cp;
      cp_to_byte[cp] = int16_t(b);
      std::string s;
      append_utf8(s, cp);
      utf8_len[b] = uint8_t(s.size());
      std::copy(s.begin(), s.end(), utf8.begin() + 2 * b);
    }
  }
};

const Gpt2Tables& gpt2_tables() {
  static const Gpt2Tables tables;
  return tables;
}

}  // namespace

DecodedCp decode_utf8(std::string_view s, size_t pos) {
  const uint8_t b0 = uint8_t(s[pos]);
  const uint32_t n = lead_len(b0);
  if (n == 1) return {b0, 1, true};
  if (n == 0) return {kReplacementChar, 1, false};
  uint8_t lo, hi;
  second_byte_range(b0, lo, hi);
  uint32_t cp = b0 & (0xFF >> (n + 1));
  for (uint32_t i = 1; i < n; ++i) {
    if (pos + i >= s.size()) return {kReplacementChar, i, false};
    const uint8_t b = uint8_t(s[pos + i]);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : is_cont(b);
    if (!ok) return {kReplacementChar, i, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, n, true};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    DecodedCp d = decode_utf8(s, i);
    if (!d.valid) return false;
    i += d.len;
  }
  return true;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A pending sequence is at most 3 bytes: find the last lead byte among them.
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const uint8_t b = uint8_t(s[n - k]);
    if (is_cont(b)) continue;
    const uint32_t need = lead_len(b);
    if (need <= k) return 0;  // complete (or invalid: not ours to hold)
    DecodedCp d = decode_utf8(s, n - k);
    // Incomplete-but-valid means decoding ran out of bytes exactly at the end.
    return (!d.valid && d.len == k) ? k : 0;
  }
  return 0;
}

std::string sanitize_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    DecodedCp d = decode_utf8(s, i);
    if (d.valid) {
      out.append(s.substr(i, d.len));
    } else {
      append_utf8(out, kReplacementChar);
    }
    i += d.len;
  }
  return out;
}

uint32_t byte_to_gpt2_cp(uint8_t b) {
  return gpt2_tables().byte_to_cp[b];
}

std::string_view byte_to_gpt2_utf8(uint8_t b) {
  const Gpt2Tables& t = gpt2_tables();
  return std::string_view(t.utf8.data() + 2 * b, t.utf8_len[b]);
}

int gpt2_cp_to_byte(uint32_t cp) {
  const Gpt2Tables& t = gpt2_tables();
  return cp < t.cp_to_byte.size() ? t.cp_to_byte[cp] : -1;
}

uint32_t to_lower(uint32_t cp) {
  using unicode_data::kLower;
  using unicode_data::kLowerCount;
  // Last range whose first <= cp.
  const auto* end = kLower + kLowerCount;
  const auto* it = std::upper_bound(
      kLower, end, cp, [](uint32_t c, const unicode_data::CaseRange& r) { return c < r.first; });
  if (it == kLower) return cp;
  --it;
  if (cp > it->last || (cp - it->first) % uint32_t(it->step) != 0) return cp;
  return uint32_t(int64_t(cp) + it->delta);
}

void append_stripped_nfd(std::string& out, uint32_t cp) {
  // Hangul syllables decompose algorithmically into L V (T) jamo (Unicode 3.12).
  constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr uint32_t kTCount = 28, kNCount = 21 * 28, kSCount = 19 * 21 * 28;
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    append_utf8(out, kLBase + s / kNCount);
    append_utf8(out, kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) append_utf8(out, kTBase + s % kTCount);
    return;
  }
  using namespace unicode_data;
  const auto* s_end = kStripSingle + kStripSingleCount;
  const auto* s_it = std::lower_bound(kStripSingle, s_end, cp,
                                      [](const CpPair& p, uint32_t c) { return p.cp < c; });
  if (s_it != s_end && s_it->cp == cp) {
    append_utf8(out, s_it->to);
    return;
  }
  const auto* m_end = kStripMulti + kStripMultiCount;
  const auto* m_it =
      std::lower_bound(kStripMulti, m_end, cp, [](const CpSeq& p, uint32_t c) { return p.cp < c; });
  if (m_it != m_end && m_it->cp == cp) {
    for (uint32_t i = 0; i < m_it->n; ++i) append_utf8(out, m_it->to[i]);
    return;
  }
  append_utf8(out, cp);
}

}  // namespace sluice::unicode
