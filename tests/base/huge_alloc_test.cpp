#include "base/huge_alloc.h"

#include <gtest/gtest.h>

#include <cstring>

namespace sluice {
namespace {

TEST(HugeAlloc, LargeBuffersAreOwnHugePageAlignedMappings) {
  for (size_t bytes : {size_t(4) << 20, (size_t(5) << 20) + 3, size_t(64) << 20}) {
    StreamedBuffer b = alloc_streamed(bytes);
    ASSERT_TRUE(b);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % (size_t(2) << 20), 0u) << bytes;
    EXPECT_GE(b.get_deleter().mapped, bytes);
    EXPECT_EQ(b.get_deleter().mapped % (size_t(2) << 20), 0u);
    std::memset(b.get(), 0xab, bytes);  // every byte is ours
    EXPECT_EQ(b[bytes - 1], 0xab);
  }
}

TEST(HugeAlloc, SmallBuffersComeFromTheHeap) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(1000), size_t(3) << 20}) {
    StreamedBuffer b = alloc_streamed(bytes);
    ASSERT_TRUE(b);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
    EXPECT_EQ(b.get_deleter().mapped, 0u);
    if (bytes > 0) std::memset(b.get(), 1, bytes);
  }
}

TEST(HugeAlloc, ImpossibleSizeIsNull) {
  EXPECT_FALSE(alloc_streamed(size_t(1) << 62));
}

}  // namespace
}  // namespace sluice
