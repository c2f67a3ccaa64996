#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sluice {
namespace {

// Resident KiB of the mapping that starts at `start` (/proc/self/smaps).
long rss_kib(const void* start) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's header line
      in = lo == reinterpret_cast<unsigned long>(start);
      continue;
    }
    long kib = 0;
    if (in && std::sscanf(line.c_str(), "Rss: %ld kB", &kib) == 1) return kib;
  }
  return -1;
}

uint8_t byte_at(size_t i) {
  return uint8_t(i * 7 + i / 4096);
}

// A file of its own per test and process: ctest runs the tests of this file in parallel
// processes, and one truncating another's mapped file kills it with SIGBUS.
std::string temp_file(size_t bytes) {
  const std::string path = ::testing::TempDir() + "mapped_file_test." +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "." +
                           std::to_string(::getpid()) + ".bin";
  std::vector<char> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = char(byte_at(i));
  std::ofstream(path, std::ios::binary).write(data.data(), std::streamsize(bytes));
  return path;
}

TEST(MappedFile, ReleaseDropsResidentPagesAndKeepsContents) {
  const size_t bytes = size_t(8) << 20;
  const std::string path = temp_file(bytes);
  Result<MappedFile> f = MappedFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  long sum = 0;
  for (size_t i = 0; i < bytes; i += 512) sum += f->data()[i];
  ASSERT_GE(rss_kib(f->data()), 8000) << "all 8 MiB touched";
  f->release(f->data() + 100, bytes - 200);  // the whole pages inside: all but the first and last
  EXPECT_LE(rss_kib(f->data()), 2 * 4 + 64);
  long again = 0;
  for (size_t i = 0; i < bytes; i += 512) again += f->data()[i];
  EXPECT_EQ(sum, again) << "released pages read back from the file";
  for (size_t i : {size_t(0), size_t(4095), size_t(4096), bytes / 2, bytes - 1}) {
    EXPECT_EQ(f->data()[i], byte_at(i)) << i;
  }
  std::remove(path.c_str());
}

TEST(MappedFile, ReleaseOutsideTheMappingDoesNothing) {
  const std::string path = temp_file(size_t(1) << 20);
  Result<MappedFile> f = MappedFile::open(path);
  ASSERT_TRUE(f.ok());
  std::vector<char> heap(size_t(1) << 20, 3);
  f->release(heap.data(), heap.size());  // not ours: untouched
  EXPECT_EQ(heap[heap.size() / 2], 3);
  f->release(f->data() + 4096, size_t(1) << 20);  // runs past the end: refused
  f->release(nullptr, 10);
  EXPECT_EQ(f->data()[5000], byte_at(5000));
  MappedFile empty;
  empty.release(heap.data(), 10);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sluice
