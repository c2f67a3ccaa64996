// Read-only memory map of a whole file. Move-only: a mapping is expensive and unique.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace sluice {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to size 0 and data() == nullptr.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops this process's resident pages of [p, p + n) (the whole pages inside it; p outside the
  // mapping: nothing). The contents stay: touching them reads the file (the page cache) again.
  // For data copied elsewhere, so it is not held twice.
  void release(const void* p, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace sluice
