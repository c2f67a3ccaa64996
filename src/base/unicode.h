// UTF-8 and Unicode helpers for the tokenizers and the chat templates. Character *classes*
// (letters, numbers, whitespace, punctuation) are never decided here: they come from PCRE2
// (UTF + UCP) so that there is one source of truth for Unicode properties. What PCRE2 cannot
// do (case mapping and canonical decomposition) comes from generated tables in
// unicode_data.{h,cpp}.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Bytes a UTF-8 sequence claims from its lead byte's high nibble, as llama.cpp's
// unicode_len_utf8 (1 for ASCII *and* for stray continuation bytes; 2, 3 or 4 otherwise).
// Used where llama.cpp splits text into "characters" without validating them (SPM).
inline size_t utf8_claimed_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// One strictly decoded code point (no overlongs, no surrogates, <= U+10FFFF).
struct DecodedCp {
  uint32_t cp;   // kReplacementChar when !valid
  uint32_t len;  // bytes consumed: the sequence, or the maximal invalid subpart (>= 1)
  bool valid;
};
// Decodes the code point starting at s[pos] (pos < s.size()).
DecodedCp decode_utf8(std::string_view s, size_t pos);

// Appends the UTF-8 encoding of `cp` (cp <= 0x10FFFF; others append U+FFFD).
void append_utf8(std::string& out, uint32_t cp);

bool is_valid_utf8(std::string_view s);

// Length of the longest suffix of `s` that is an incomplete but so far valid UTF-8 sequence
// (0..3): the bytes a streaming decoder must hold back until more arrive.
size_t utf8_incomplete_tail(std::string_view s);

// Replaces every maximal invalid subpart with U+FFFD (the WHATWG/Unicode "substitution of
// maximal subparts" practice). Valid input is returned unchanged.
std::string sanitize_utf8(std::string_view s);

// GPT-2 byte-level alphabet: each byte maps to one printable code point (bytes '!'..'~',
// 0xA1..0xAC and 0xAE..0xFF map to themselves, the other 68 to U+0100.. in byte order).
uint32_t byte_to_gpt2_cp(uint8_t b);
// UTF-8 of byte_to_gpt2_cp(b) (1 or 2 bytes), without allocating.
std::string_view byte_to_gpt2_utf8(uint8_t b);
// Inverse: the byte for a GPT-2 alphabet code point, or -1.
int gpt2_cp_to_byte(uint32_t cp);

// Simple lowercase mapping (first code point of the full mapping, as llama.cpp and Python's
// str.lower()[0]).
uint32_t to_lower(uint32_t cp);

// Appends the canonical decomposition (NFD) of `cp` with all nonspacing marks (Mn) removed:
// "é" -> "e", Hangul syllables -> their jamo. The BERT "strip accents" step for precomposed
// characters (standalone marks in the input are removed by the caller's \p{Mn} check).
void append_stripped_nfd(std::string& out, uint32_t cp);

}  // namespace sluice::unicode
