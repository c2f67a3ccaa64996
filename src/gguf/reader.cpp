// GGUF reader: validates every byte it trusts. Each error names the file, the offset and what
// is wrong; nothing past the end of the buffer is ever read.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"

namespace sluice {

namespace {
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
// Smallest encoded size of a value of each type; bounds array counts before allocating.
constexpr size_t kMinEncodedSize[kGgufTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
}  // namespace

// Cursor over the file bytes; every read is bounds-checked.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const std::string& name)
      : p_(data), size_(size), name_(name) {}

  Status parse(GgufFile& f);

 private:
  Error fail(size_t at, const std::string& what) const {
    return make_error("invalid GGUF file '", name_, "' at offset ", at, ": ", what);
  }
  size_t remaining() const { return size_ - pos_; }

  template <class T>
  Status read_pod(T& out, const char* what) {
    if (remaining() < sizeof(T)) {
      return fail(pos_, std::string("truncated file while reading ") + what + " (need " +
                            std::to_string(sizeof(T)) + " bytes, " + std::to_string(remaining()) +
                            " left)");
    }
    std::memcpy(&out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return {};
  }

  Status read_string(std::string& out, const char* what) {
    const size_t at = pos_;
    uint64_t len = 0;
    SLUICE_RETURN_IF_ERROR(read_pod(len, what));
    if (len > remaining()) {
      return fail(at, std::string(what) + " has length " + std::to_string(len) + " but only " +
                          std::to_string(remaining()) + " bytes remain");
    }
    out.assign(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return {};
  }

  Status read_value(GgufType type, GgufValue& out, int depth);

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

Status GgufParser::read_value(GgufType type, GgufValue& out, int depth) {
  const size_t at = pos_;
  switch (type) {
    case GgufType::UINT8: {
      uint8_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "u8 value"));
      out = x;
      break;
    }
    case GgufType::INT8: {
      int8_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "i8 value"));
      out = x;
      break;
    }
    case GgufType::UINT16: {
      uint16_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "u16 value"));
      out = x;
      break;
    }
    case GgufType::INT16: {
      int16_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "i16 value"));
      out = x;
      break;
    }
    case GgufType::UINT32: {
      uint32_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "u32 value"));
      out = x;
      break;
    }
    case GgufType::INT32: {
      int32_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "i32 value"));
      out = x;
      break;
    }
    case GgufType::FLOAT32: {
      float x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "f32 value"));
      out = x;
      break;
    }
    case GgufType::UINT64: {
      uint64_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "u64 value"));
      out = x;
      break;
    }
    case GgufType::INT64: {
      int64_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "i64 value"));
      out = x;
      break;
    }
    case GgufType::FLOAT64: {
      double x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "f64 value"));
      out = x;
      break;
    }
    case GgufType::BOOL: {
      uint8_t x;
      SLUICE_RETURN_IF_ERROR(read_pod(x, "bool value"));
      if (x > 1) return fail(at, "bool value is " + std::to_string(x) + ", expected 0 or 1");
      out = bool(x);
      break;
    }
    case GgufType::STRING: {
      std::string s;
      SLUICE_RETURN_IF_ERROR(read_string(s, "string value"));
      out = std::move(s);
      break;
    }
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) {
        return fail(at, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      }
      uint32_t elem = 0;
      SLUICE_RETURN_IF_ERROR(read_pod(elem, "array element type"));
      if (elem >= kGgufTypeCount)
        return fail(at, "unknown array element type " + std::to_string(elem));
      uint64_t count = 0;
      SLUICE_RETURN_IF_ERROR(read_pod(count, "array length"));
      if (count > remaining() / kMinEncodedSize[elem]) {
        return fail(at, "array of " + std::to_string(count) + " " +
                            std::string(gguf_type_name(GgufType(elem))) +
                            " elements cannot fit in the " + std::to_string(remaining()) +
                            " bytes that remain");
      }
      GgufArray arr;
      arr.elem_type = GgufType(elem);
      arr.items.resize(size_t(count));
      for (auto& item : arr.items) {
        SLUICE_RETURN_IF_ERROR(read_value(arr.elem_type, item, depth + 1));
      }
      out = std::move(arr);
      break;
    }
    default:
      return fail(at, "unknown value type " + std::to_string(uint32_t(type)));
  }
  return {};
}

Status GgufParser::parse(GgufFile& f) {
  uint32_t magic = 0;
  SLUICE_RETURN_IF_ERROR(read_pod(magic, "magic"));
  if (magic != kMagic) {
    return fail(0, "bad magic (not a GGUF file): expected \"GGUF\"");
  }
  uint32_t version = 0;
  SLUICE_RETURN_IF_ERROR(read_pod(version, "version"));
  if (version == 1) return fail(4, "GGUF version 1 is not supported (re-convert the model)");
  if ((version & 0xffff) == 0 && version != 0) {
    return fail(4, "big-endian GGUF files are not supported");
  }
  if (version != 2 && version != 3) {
    return fail(4, "unsupported GGUF version " + std::to_string(version) + " (expected 2 or 3)");
  }
  f.version_ = version;

  uint64_t n_tensors = 0, n_kv = 0;
  SLUICE_RETURN_IF_ERROR(read_pod(n_tensors, "tensor count"));
  SLUICE_RETURN_IF_ERROR(read_pod(n_kv, "metadata count"));
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least
  // 8 + 4 + 8 + 4 + 8 bytes. Reject counts that cannot fit before allocating anything.
  if (n_kv > remaining() / 13) {
    return fail(16, "metadata count " + std::to_string(n_kv) + " cannot fit in the file");
  }
  if (n_tensors > remaining() / 32) {
    return fail(8, "tensor count " + std::to_string(n_tensors) + " cannot fit in the file");
  }

  f.kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = pos_;
    std::string key;
    SLUICE_RETURN_IF_ERROR(read_string(key, "metadata key"));
    uint32_t type = 0;
    SLUICE_RETURN_IF_ERROR(read_pod(type, "metadata value type"));
    if (type >= kGgufTypeCount) {
      return fail(pos_ - 4,
                  "metadata key '" + key + "' has unknown value type " + std::to_string(type));
    }
    GgufValue value;
    SLUICE_RETURN_IF_ERROR(read_value(GgufType(type), value, 0));
    if (f.kv_index_.count(key)) return fail(at, "duplicate metadata key '" + key + "'");
    f.kv_index_.emplace(key, f.kv_.size());
    f.kv_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = f.find("general.alignment")) {
    const uint32_t* al = a->get_if<uint32_t>();
    if (!al) {
      return fail(0, "general.alignment has type " + std::string(gguf_type_name(a->type())) +
                         ", expected u32");
    }
    if (*al == 0 || !std::has_single_bit(*al)) {
      return fail(0, "general.alignment is " + std::to_string(*al) + ", expected a power of 2");
    }
    f.alignment_ = *al;
  }

  f.tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = pos_;
    GgufTensorInfo t;
    SLUICE_RETURN_IF_ERROR(read_string(t.name, "tensor name"));
    uint32_t n_dims = 0;
    SLUICE_RETURN_IF_ERROR(read_pod(n_dims, "tensor dimension count"));
    if (n_dims > uint32_t(kGgufMaxDims)) {
      return fail(at, "tensor '" + t.name + "' has " + std::to_string(n_dims) +
                          " dimensions (at most 4 are supported)");
    }
    t.n_dims = int(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      SLUICE_RETURN_IF_ERROR(read_pod(ne, "tensor dimension"));
      if (ne > uint64_t(std::numeric_limits<int64_t>::max())) {
        return fail(at, "tensor '" + t.name + "' dimension " + std::to_string(d) + " is " +
                            std::to_string(ne) + " (too large)");
      }
      t.ne[d] = int64_t(ne);
    }
    uint32_t type = 0;
    SLUICE_RETURN_IF_ERROR(read_pod(type, "tensor type"));
    const TypeTraits* tr = type_traits(type);
    if (!tr) {
      return fail(at, "tensor '" + t.name + "' has unknown type id " + std::to_string(type));
    }
    t.type = GgmlType(type);
    SLUICE_RETURN_IF_ERROR(read_pod(t.offset, "tensor data offset"));

    // Element count without overflow: every dimension bounded by INT64_MAX / product so far.
    int64_t n = 1;
    for (int d = 0; d < kGgufMaxDims; ++d) {
      if (t.ne[d] == 0) {
        n = 0;
        break;
      }
      if (n > std::numeric_limits<int64_t>::max() / t.ne[d]) {
        return fail(at, "tensor '" + t.name + "' shape " + t.shape_string() +
                            " overflows the element count");
      }
      n *= t.ne[d];
    }
    if (t.ne[0] % tr->block_size != 0) {
      return fail(at, "tensor '" + t.name + "' of type " + std::string(tr->name) +
                          " has row length " + std::to_string(t.ne[0]) +
                          ", not a multiple of the block size " + std::to_string(tr->block_size));
    }
    const uint64_t n_blocks = uint64_t(n) / uint64_t(tr->block_size);
    if (n_blocks > std::numeric_limits<uint64_t>::max() / tr->type_size) {
      return fail(at, "tensor '" + t.name + "' byte size overflows");
    }
    t.n_bytes = size_t(n_blocks * tr->type_size);
    if (t.offset % f.alignment_ != 0) {
      return fail(at, "tensor '" + t.name + "' data offset " + std::to_string(t.offset) +
                          " is not a multiple of the alignment " + std::to_string(f.alignment_));
    }
    if (f.tensor_index_.count(t.name)) return fail(at, "duplicate tensor name '" + t.name + "'");
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t end_of_infos = pos_;
  const uint64_t data_offset = (end_of_infos + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  f.data_offset_ = data_offset;
  if (!f.tensors_.empty() && data_offset > size_) {
    return fail(pos_, "file ends before the data section (expected it at offset " +
                          std::to_string(data_offset) + ")");
  }
  const uint64_t data_size = f.tensors_.empty() ? 0 : size_ - data_offset;

  // Every tensor inside the file, and no two overlapping.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (GgufTensorInfo& t : f.tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return fail(data_offset + std::min<uint64_t>(t.offset, data_size),
                  "tensor '" + t.name + "' extends past the end of the file (offset " +
                      std::to_string(t.offset) + ", size " + std::to_string(t.n_bytes) +
                      ", data section " + std::to_string(data_size) + " bytes)");
    }
    t.data = p_ + data_offset + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* a = by_offset[i - 1];
    const GgufTensorInfo* b = by_offset[i];
    if (a->offset + a->n_bytes > b->offset) {
      return fail(data_offset + b->offset,
                  "tensor '" + b->name + "' overlaps tensor '" + a->name + "'");
    }
  }
  return {};
}

std::string GgufTensorInfo::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < std::max(n_dims, 1); ++d) {
    if (d) s += ", ";
    s += std::to_string(ne[d]);
  }
  return s + "]";
}

Result<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
  GgufFile f;
  f.path_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  GgufParser parser(data, size, f.path_);
  SLUICE_RETURN_IF_ERROR(parser.parse(f));
  return f;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  SLUICE_ASSIGN_OR_RETURN(GgufFile f, parse(map.data(), map.size(), path));
  f.map_ = std::move(map);  // the mapping's address does not change on move
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// Integer value of any integer-typed (or bool) GGUF value.
bool as_int64(const GgufValue& v, int64_t& out, bool& overflow) {
  overflow = false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > uint64_t(std::numeric_limits<int64_t>::max())) {
            overflow = true;
            return false;
          }
          out = int64_t(x);
          return true;
        } else if constexpr (std::is_integral_v<T>) {
          out = int64_t(x);
          return true;
        } else {
          return false;
        }
      },
      v.v);
}

}  // namespace

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error("'", path_, "': metadata key '", key, "' not found");
  int64_t out = 0;
  bool overflow = false;
  if (!as_int64(*v, out, overflow)) {
    if (overflow) return make_error("'", path_, "': metadata key '", key, "' is out of range");
    return make_error("'", path_, "': metadata key '", key, "' has type ",
                      gguf_type_name(v->type()), ", expected an integer");
  }
  return out;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error("'", path_, "': metadata key '", key, "' not found");
  if (const float* f = v->get_if<float>()) return double(*f);
  if (const double* d = v->get_if<double>()) return *d;
  int64_t out = 0;
  bool overflow = false;
  if (as_int64(*v, out, overflow) && !v->get_if<bool>()) return double(out);
  return make_error("'", path_, "': metadata key '", key, "' has type ", gguf_type_name(v->type()),
                    ", expected a number");
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error("'", path_, "': metadata key '", key, "' not found");
  const GgufArray* arr = v->get_if<GgufArray>();
  if (!arr) {
    return make_error("'", path_, "': metadata key '", key, "' has type ",
                      gguf_type_name(v->type()), ", expected an array");
  }
  std::vector<int64_t> out;
  out.reserve(arr->items.size());
  for (const GgufValue& item : arr->items) {
    int64_t x = 0;
    bool overflow = false;
    if (!as_int64(item, x, overflow)) {
      return make_error("'", path_, "': metadata key '", key, "' is an array of ",
                        gguf_type_name(arr->elem_type), ", expected an array of integers");
    }
    out.push_back(x);
  }
  return out;
}

}  // namespace sluice
