// GGUF v2/v3 reader (mmap) and writer. Knows nothing about models: metadata key/values,
// a tensor directory and the aligned data section.
//
// File layout (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x (string key | u32 type | value)            string = u64 len | bytes
//   n_tensors x (string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset)
//   zero padding to `general.alignment` (default 32)
//   data section: each tensor at data_offset + offset (offsets aligned, zero padded)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "gguf/types.h"
#include "gguf/value.h"

namespace sluice {

constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr int kGgufMaxDims = 4;

// One entry of the tensor directory.
struct GgufTensorInfo {
  std::string name;
  int n_dims = 0;
  int64_t ne[kGgufMaxDims] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader only)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[2048, 128256]"
};

// A parsed, validated, memory-mapped GGUF file. Move-only (owns the mapping).
class GgufFile {
 public:
  // Parses and validates everything (header, metadata, tensor directory, bounds, alignment).
  static Result<GgufFile> open(const std::string& path);
  // Parses a buffer that stays owned by the caller (fuzzing, tests). Same validation.
  static Result<GgufFile> parse(const uint8_t* data, size_t size, std::string name = "<memory>");

  GgufFile() = default;
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  // The whole file's bytes (the mapping, or the caller's buffer).
  const uint8_t* bytes() const { return base_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed access: an error if the key is missing or holds another type.
  template <class T>
  Result<T> get(std::string_view key) const;
  // Like get<T>, but a missing key yields `fallback` (a wrong type is still an error).
  template <class T>
  Result<T> get_or(std::string_view key, T fallback) const;
  // Any integer type (u8..i64, and bool), range-checked into int64.
  Result<int64_t> get_int(std::string_view key) const;
  // Any float or integer type.
  Result<double> get_float(std::string_view key) const;
  // Array of T: an error if the key is missing, not an array, or elements are not T.
  template <class T>
  Result<std::vector<T>> get_array(std::string_view key) const;
  // Array of any integer element type, as int64.
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // Tensor directory, in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Drops the resident pages of [p, p + n) when this file is mapped (MappedFile::release);
  // parsed buffers are the caller's and stay untouched.
  void release(const void* p, size_t n) const { map_.release(p, n); }

 private:
  std::string path_;
  MappedFile map_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend class GgufParser;
};

// Writes GGUF v3 files laid out as llama.cpp's writers do: metadata and tensor infos in
// insertion order, tensor offsets aligned to `general.alignment` (default 32), each tensor's
// data zero-padded to the alignment. Tensor data can be streamed (multi-GB synthetic models).
class GgufWriter {
 public:
  // Fills `dst` (exactly the tensor's byte size) with the tensor data.
  using Source = std::function<Status(uint8_t* dst, size_t n_bytes)>;
  // Called after each tensor with (bytes written so far, total bytes).
  using Progress = std::function<void(uint64_t done, uint64_t total)>;

  // Sets a key; an existing key keeps its position, a new one is appended.
  void set(std::string key, GgufValue value);
  void remove(std::string_view key);
  const GgufValue* find(std::string_view key) const;

  // Adds a tensor whose bytes are copied from `data` at write time (must stay valid).
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data);
  // Adds a tensor whose bytes are produced by `source` at write time.
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, Source source);

  // Copies all metadata and tensors (by reference to its mapping) of a file.
  Status add_all(const GgufFile& file);

  Status write(const std::string& path, const Progress& progress = {}) const;
  // Serializes to memory (tests, fuzz corpus).
  Result<std::vector<uint8_t>> write_to_buffer() const;

 private:
  struct Tensor {
    GgufTensorInfo info;
    Source source;
  };
  uint32_t alignment() const;
  Status write_to(const std::function<Status(const void*, size_t)>& sink,
                  const Progress& progress) const;

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

// ---- template definitions ----

template <class T>
Result<T> GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error("'", path_, "': metadata key '", key, "' not found");
  const T* p = v->get_if<T>();
  if (!p) {
    GgufValue probe{T{}};
    return make_error("'", path_, "': metadata key '", key, "' has type ",
                      gguf_type_name(v->type()), ", expected ", gguf_type_name(probe.type()));
  }
  return *p;
}

template <class T>
Result<T> GgufFile::get_or(std::string_view key, T fallback) const {
  if (!find(key)) return fallback;
  return get<T>(key);
}

template <class T>
Result<std::vector<T>> GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error("'", path_, "': metadata key '", key, "' not found");
  const GgufArray* ap = v->get_if<GgufArray>();
  if (!ap) {
    return make_error("'", path_, "': metadata key '", key, "' has type ",
                      gguf_type_name(v->type()), ", expected an array");
  }
  const GgufArray& arr = *ap;
  std::vector<T> out;
  out.reserve(arr.items.size());
  GgufValue probe{T{}};
  if (!arr.items.empty() && arr.elem_type != probe.type()) {
    return make_error("'", path_, "': metadata key '", key, "' is an array of ",
                      gguf_type_name(arr.elem_type), ", expected an array of ",
                      gguf_type_name(probe.type()));
  }
  for (const GgufValue& item : arr.items) out.push_back(*item.get_if<T>());
  return out;
}

}  // namespace sluice
