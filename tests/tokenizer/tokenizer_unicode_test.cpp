// UTF-8 helpers, the GPT-2 byte alphabet, case mapping and accent stripping.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/unicode.h"

namespace sluice::unicode {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

TEST(TokenizerUnicode, DecodeValid) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99";  // a é € 🦙
  DecodedCp d = decode_utf8(s, 0);
  EXPECT_EQ(d.cp, 'a');
  d = decode_utf8(s, 1);
  EXPECT_TRUE(d.valid);
  EXPECT_EQ(d.cp, 0xE9u);
  EXPECT_EQ(d.len, 2u);
  d = decode_utf8(s, 3);
  EXPECT_EQ(d.cp, 0x20ACu);
  d = decode_utf8(s, 6);
  EXPECT_EQ(d.cp, 0x1F999u);
  EXPECT_EQ(d.len, 4u);
  EXPECT_TRUE(is_valid_utf8(s));
}

TEST(TokenizerUnicode, DecodeInvalid) {
  // Overlong, surrogate, beyond U+10FFFF, stray continuation, truncated.
  for (const std::string s : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE2\x82"}) {
    EXPECT_FALSE(is_valid_utf8(s)) << s;
    DecodedCp d = decode_utf8(s, 0);
    EXPECT_FALSE(d.valid);
    EXPECT_GE(d.len, 1u);
  }
  EXPECT_EQ(decode_utf8("\xE2\x82"
                        "a",
                        0)
                .len,
            2u);  // maximal subpart
}

TEST(TokenizerUnicode, EncodeRoundTrip) {
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    const std::string s = utf8(cp);
    DecodedCp d = decode_utf8(s, 0);
    EXPECT_TRUE(d.valid) << cp;
    EXPECT_EQ(d.cp, cp);
    EXPECT_EQ(d.len, s.size());
  }
  EXPECT_EQ(utf8(0xD800), "\xEF\xBF\xBD");  // surrogates are not encodable
}

TEST(TokenizerUnicode, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("ab"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\xA6"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // invalid, never completes
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);
}

TEST(TokenizerUnicode, Sanitize) {
  EXPECT_EQ(sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), "\xEF\xBF\xBD");
}

TEST(TokenizerUnicode, Gpt2Alphabet) {
  EXPECT_EQ(byte_to_gpt2_cp(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_gpt2_cp('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_gpt2_cp('A'), uint32_t('A'));
  EXPECT_EQ(byte_to_gpt2_cp(0xAD), 0x143u);  // the soft hyphen is the last remapped byte
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_gpt2_cp(uint8_t(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(gpt2_cp_to_byte(cp), b);
    EXPECT_EQ(byte_to_gpt2_utf8(uint8_t(b)), utf8(cp));
  }
  EXPECT_EQ(gpt2_cp_to_byte(' '), -1);
  EXPECT_EQ(gpt2_cp_to_byte(0x2581), -1);
}

TEST(TokenizerUnicode, Lowercase) {
  EXPECT_EQ(to_lower('A'), uint32_t('a'));
  EXPECT_EQ(to_lower('z'), uint32_t('z'));
  EXPECT_EQ(to_lower(0xC9), 0xE9u);    // É
  EXPECT_EQ(to_lower(0x100), 0x101u);  // Ā (alternating block)
  EXPECT_EQ(to_lower(0x101), 0x101u);
  EXPECT_EQ(to_lower(0x391), 0x3B1u);      // Greek Alpha
  EXPECT_EQ(to_lower(0x411), 0x431u);      // Cyrillic Be
  EXPECT_EQ(to_lower(0x130), 0x69u);       // İ -> i (first of "i̇")
  EXPECT_EQ(to_lower(0xDF), 0xDFu);        // ß
  EXPECT_EQ(to_lower(0x10400), 0x10428u);  // Deseret
  EXPECT_EQ(to_lower(0x4E2D), 0x4E2Du);
}

TEST(TokenizerUnicode, StripAccents) {
  auto strip = [](uint32_t cp) {
    std::string s;
    append_stripped_nfd(s, cp);
    return s;
  };
  EXPECT_EQ(strip(0xE9), "e");                                       // é
  EXPECT_EQ(strip(0xC5), "A");                                       // Å
  EXPECT_EQ(strip(0xFC), "u");                                       // ü
  EXPECT_EQ(strip(0x1EC7), "e");                                     // ệ (two marks)
  EXPECT_EQ(strip(0x419), "\xD0\x98");                               // Й -> И
  EXPECT_EQ(strip(0x212B), "A");                                     // Angstrom sign
  EXPECT_EQ(strip(0xAC00), "\xE1\x84\x80\xE1\x85\xA1");              // 가 -> ᄀ ᅡ
  EXPECT_EQ(strip(0xAC01), "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");  // 각
  EXPECT_EQ(strip('x'), "x");
  EXPECT_EQ(strip(0x4E2D), "\xE4\xB8\xAD");
}

}  // namespace
}  // namespace sluice::unicode
