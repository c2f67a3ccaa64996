// Every malformed GGUF gives a clear error naming the file, the offset and what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace sluice {
namespace {

// Hand-assembles GGUF bytes so tests can write what our writer never would.
struct Raw {
  std::vector<uint8_t> b;
  template <class T>
  Raw& pod(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Raw& str(const std::string& s) {
    pod(uint64_t(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return pod(uint32_t(0x46554747)).pod(version).pod(n_tensors).pod(n_kv);
  }
  Raw& kv_u32(const std::string& k, uint32_t v) { return str(k).pod(uint32_t(4)).pod(v); }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    str(name).pod(uint32_t(ne.size()));
    for (uint64_t x : ne) pod(x);
    return pod(type).pod(off);
  }
  Raw& pad(size_t align = 32) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

std::string parse_error(const Raw& r) {
  auto f = GgufFile::parse(r.b.data(), r.b.size(), "bad.gguf");
  return f.ok() ? std::string("<parsed>") : f.message();
}

#define EXPECT_GGUF_ERROR(raw, needle)                                        \
  do {                                                                        \
    std::string msg_ = parse_error(raw);                                      \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "error was: " << msg_; \
    EXPECT_NE(msg_.find("'bad.gguf' at offset"), std::string::npos) << msg_;  \
  } while (0)

TEST(GgufMalformed, Magic) {
  Raw r;
  r.pod(uint32_t(0x46554746)).pod(uint32_t(3)).pod(uint64_t(0)).pod(uint64_t(0));
  EXPECT_GGUF_ERROR(r, "bad magic");
  EXPECT_GGUF_ERROR(Raw{}, "truncated file while reading magic");
}

TEST(GgufMalformed, Versions) {
  EXPECT_GGUF_ERROR(Raw{}.header(0, 0, 1), "version 1 is not supported");
  EXPECT_GGUF_ERROR(Raw{}.header(0, 0, 99), "unsupported GGUF version 99");
  EXPECT_GGUF_ERROR(Raw{}.header(0, 0, 0x03000000), "big-endian");
  EXPECT_EQ(parse_error(Raw{}.header(0, 0, 2)), "<parsed>");
}

TEST(GgufMalformed, EveryTruncationOfAValidFileFailsCleanly) {
  GgufWriter w;
  w.set("general.architecture", "llama");
  w.set("a.list", make_string_array({"x", "yy", "zzz"}));
  w.set("a.f", 1.0f);
  std::vector<float> data(64, 0.5f);
  ASSERT_TRUE(w.add_tensor("t0", GgmlType::F32, {8, 8}, data.data()).ok());
  ASSERT_TRUE(w.add_tensor("t1", GgmlType::F32, {16}, data.data()).ok());
  auto bytes = w.write_to_buffer();
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(GgufFile::parse(bytes->data(), bytes->size()).ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    // Copy into an exact-size heap buffer so ASan catches any read past the end.
    std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + n);
    auto f = GgufFile::parse(cut.data(), cut.size(), "cut.gguf");
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_NE(f.message().find("'cut.gguf' at offset"), std::string::npos) << f.message();
  }
}

TEST(GgufMalformed, StringLengthPastEnd) {
  Raw r;
  r.header(0, 1).pod(uint64_t(1000)).zeros(20);
  EXPECT_GGUF_ERROR(r, "metadata key has length 1000 but only");
  Raw v;
  v.header(0, 1).str("key").pod(uint32_t(8)).pod(uint64_t(uint64_t(1) << 63));
  EXPECT_GGUF_ERROR(v, "string value has length");
}

TEST(GgufMalformed, ArrayCountsThatOverflow) {
  Raw r;
  r.header(0, 1).str("arr").pod(uint32_t(9)).pod(uint32_t(6)).pod(uint64_t(1) << 61);
  EXPECT_GGUF_ERROR(r, "cannot fit");
  Raw s;
  s.header(0, 1).str("arr").pod(uint32_t(9)).pod(uint32_t(8)).pod(~uint64_t(0));
  EXPECT_GGUF_ERROR(s, "cannot fit");
}

TEST(GgufMalformed, CountsThatCannotFit) {
  EXPECT_GGUF_ERROR(Raw{}.header(0, uint64_t(1) << 62), "metadata count");
  EXPECT_GGUF_ERROR(Raw{}.header(uint64_t(1) << 62, 0), "tensor count");
}

TEST(GgufMalformed, UnknownValueTypes) {
  Raw r;
  r.header(0, 1).str("k").pod(uint32_t(13)).pod(uint32_t(0));
  EXPECT_GGUF_ERROR(r, "metadata key 'k' has unknown value type 13");
  Raw a;
  a.header(0, 1).str("k").pod(uint32_t(9)).pod(uint32_t(77)).pod(uint64_t(0));
  EXPECT_GGUF_ERROR(a, "unknown array element type 77");
  Raw b;
  b.header(0, 1).str("k").pod(uint32_t(7)).pod(uint8_t(2));
  EXPECT_GGUF_ERROR(b, "bool value is 2");
}

TEST(GgufMalformed, DeeplyNestedArrays) {
  Raw r;
  r.header(0, 1).str("k").pod(uint32_t(9));
  for (int i = 0; i < 100; ++i) r.pod(uint32_t(9)).pod(uint64_t(1));
  r.pod(uint32_t(0)).pod(uint64_t(0));
  EXPECT_GGUF_ERROR(r, "nested deeper");
}

TEST(GgufMalformed, DuplicateKeysAndTensors) {
  Raw r;
  r.header(0, 2).kv_u32("a", 1).kv_u32("a", 2);
  EXPECT_GGUF_ERROR(r, "duplicate metadata key 'a'");
  Raw t;
  t.header(2, 0).tensor("w", {32}, 0, 0).tensor("w", {32}, 0, 128).pad().zeros(256);
  EXPECT_GGUF_ERROR(t, "duplicate tensor name 'w'");
}

TEST(GgufMalformed, TensorTypesAndShapes) {
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {32}, 5, 0).pad().zeros(64),
                    "tensor 'w' has unknown type id 5");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {32}, 200, 0).pad().zeros(64),
                    "unknown type id 200");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).pad().zeros(64),
                    "has 5 dimensions");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0),
                    "overflows the element count");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {~uint64_t(0)}, 0, 0), "too large");
  // Q8_0 rows must be a multiple of 32 elements.
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {33, 2}, 8, 0).pad().zeros(256),
                    "row length 33, not a multiple of the block size 32");
}

TEST(GgufMalformed, TensorDataOutsideFileOrMisaligned) {
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {64}, 0, 0).pad().zeros(100),
                    "tensor 'w' extends past the end of the file");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {8}, 0, uint64_t(1) << 60).pad().zeros(64),
                    "extends past the end");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {8}, 0, 4).pad().zeros(64),
                    "data offset 4 is not a multiple of the alignment 32");
  EXPECT_GGUF_ERROR(Raw{}.header(1, 0).tensor("w", {8}, 0, 0), "file ends before the data section");
  EXPECT_GGUF_ERROR(
      Raw{}.header(2, 0).tensor("a", {64}, 0, 0).tensor("b", {8}, 0, 32).pad().zeros(512),
      "tensor 'b' overlaps tensor 'a'");
}

TEST(GgufMalformed, Alignment) {
  EXPECT_GGUF_ERROR(Raw{}.header(0, 1).kv_u32("general.alignment", 48), "power of 2");
  EXPECT_GGUF_ERROR(Raw{}.header(0, 1).kv_u32("general.alignment", 0), "power of 2");
  Raw r;
  r.header(0, 1).str("general.alignment").pod(uint32_t(5)).pod(int32_t(32));
  EXPECT_GGUF_ERROR(r, "general.alignment has type i32, expected u32");
}

TEST(GgufMalformed, OpenNamesTheFile) {
  auto f = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("'/nonexistent/model.gguf'"), std::string::npos);
  auto d = GgufFile::open("/tmp");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace sluice
