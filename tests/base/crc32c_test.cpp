#include "base/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

TEST(Crc32c, MatchesTheRfc3720Vectors) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xe3069283u);
  EXPECT_EQ(crc32c_scalar(digits.data(), digits.size()), 0xe3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) inc[size_t(i)] = uint8_t(i), dec[size_t(i)] = uint8_t(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46dd794eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113fdb5cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, FastPathEqualsTheTableAtEverySizeAndWhenChained) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(3 * 4096 * 3 + 333);
  for (uint8_t& b : buf) b = uint8_t(rng());
  for (size_t n : {size_t(1), size_t(3), size_t(7), size_t(8), size_t(31), size_t(33), size_t(4097),
                   size_t(12288), size_t(12289), size_t(24576 + 5), buf.size()}) {
    EXPECT_EQ(crc32c(buf.data(), n), crc32c_scalar(buf.data(), n)) << n;
    for (size_t split : {size_t(0), n / 3, n - 1}) {
      const uint32_t a = crc32c(buf.data(), split);
      EXPECT_EQ(crc32c(buf.data() + split, n - split, a), crc32c(buf.data(), n))
          << n << " " << split;
    }
  }
}

TEST(Crc32c, OneFlippedBitChangesIt) {
  std::vector<uint8_t> buf(40000, 0x5a);
  const uint32_t before = crc32c(buf.data(), buf.size());
  buf[29999] ^= 0x10;
  EXPECT_NE(crc32c(buf.data(), buf.size()), before);
}

}  // namespace
}  // namespace sluice
