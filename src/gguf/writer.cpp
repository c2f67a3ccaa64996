// GGUF v3 writer with llama.cpp's layout (see gguf.h), streaming tensor data so multi-GB
// files never need to be held in memory.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "gguf/gguf.h"

namespace sluice {

namespace {

using Sink = std::function<Status(const void*, size_t)>;

uint64_t pad_to(uint64_t x, uint64_t align) {
  return (x + align - 1) / align * align;
}

// Serializes metadata and tensor infos into a byte buffer (small: no tensor data).
class HeaderBuilder {
 public:
  template <class T>
  void pod(T x) {
    const auto* b = reinterpret_cast<const uint8_t*>(&x);
    buf.insert(buf.end(), b, b + sizeof(T));
  }
  void str(const std::string& s) {
    pod(uint64_t(s.size()));
    buf.insert(buf.end(), s.begin(), s.end());
  }
  void value(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            str(x);
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            pod(uint32_t(x.elem_type));
            pod(uint64_t(x.items.size()));
            for (const GgufValue& item : x.items) value(item);
          } else if constexpr (std::is_same_v<T, bool>) {
            pod(uint8_t(x ? 1 : 0));
          } else {
            pod(x);
          }
        },
        v.v);
  }
  std::vector<uint8_t> buf;
};

// Arrays must be homogeneous and of their declared element type.
Status check_value(const std::string& key, const GgufValue& v) {
  const GgufArray* a = v.get_if<GgufArray>();
  if (!a) return {};
  for (const GgufValue& item : a->items) {
    if (item.type() != a->elem_type) {
      return make_error("metadata key '", key, "': array of ", gguf_type_name(a->elem_type),
                        " holds a ", gguf_type_name(item.type()));
    }
    SLUICE_RETURN_IF_ERROR(check_value(key, item));
  }
  return {};
}

}  // namespace

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::remove(std::string_view key) {
  std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
}

const GgufValue* GgufWriter::find(std::string_view key) const {
  for (const auto& [k, v] : kv_) {
    if (k == key) return &v;
  }
  return nullptr;
}

uint32_t GgufWriter::alignment() const {
  if (const GgufValue* v = find("general.alignment")) {
    if (const uint32_t* a = v->get_if<uint32_t>()) return *a;
  }
  return kGgufDefaultAlignment;
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                              const void* data) {
  Source src = [data](uint8_t* dst, size_t n) -> Status {
    if (n) std::memcpy(dst, data, n);
    return {};
  };
  return add_tensor(std::move(name), type, std::move(ne), std::move(src));
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                              Source source) {
  if (ne.empty() || ne.size() > size_t(kGgufMaxDims)) {
    return make_error("tensor '", name, "': ", ne.size(), " dimensions (expected 1 to 4)");
  }
  for (const Tensor& t : tensors_) {
    if (t.info.name == name) return make_error("duplicate tensor name '", name, "'");
  }
  const TypeTraits* tr = type_traits(uint32_t(type));
  if (!tr) return make_error("tensor '", name, "': unknown type");
  Tensor t;
  t.info.name = std::move(name);
  t.info.type = type;
  t.info.n_dims = int(ne.size());
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0 || (ne[d] > 0 && n > std::numeric_limits<int64_t>::max() / ne[d])) {
      return make_error("tensor '", t.info.name, "': invalid shape");
    }
    t.info.ne[d] = ne[d];
    n *= ne[d];
  }
  if (ne[0] % tr->block_size != 0) {
    return make_error("tensor '", t.info.name, "': row length ", ne[0],
                      " is not a multiple of the ", tr->name, " block size ", tr->block_size);
  }
  t.info.n_bytes = size_t(n / tr->block_size) * tr->type_size;
  t.source = std::move(source);
  tensors_.push_back(std::move(t));
  return {};
}

Status GgufWriter::add_all(const GgufFile& file) {
  for (const auto& [k, v] : file.metadata()) set(k, v);
  for (const GgufTensorInfo& t : file.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + std::max(t.n_dims, 1));
    SLUICE_RETURN_IF_ERROR(add_tensor(t.name, t.type, ne, static_cast<const void*>(t.data)));
  }
  return {};
}

Status GgufWriter::write_to(const Sink& sink, const Progress& progress) const {
  const uint32_t align = alignment();
  if (align == 0 || (align & (align - 1)) != 0) {
    return make_error("general.alignment must be a power of 2 (got ", align, ")");
  }
  HeaderBuilder h;
  h.pod(uint32_t(0x46554747));  // "GGUF"
  h.pod(uint32_t(3));
  h.pod(uint64_t(tensors_.size()));
  h.pod(uint64_t(kv_.size()));
  for (const auto& [k, v] : kv_) {
    SLUICE_RETURN_IF_ERROR(check_value(k, v));
    h.str(k);
    h.pod(uint32_t(v.type()));
    h.value(v);
  }
  uint64_t offset = 0;
  uint64_t total = 0;
  for (const Tensor& t : tensors_) {
    h.str(t.info.name);
    h.pod(uint32_t(t.info.n_dims));
    for (int d = 0; d < t.info.n_dims; ++d) h.pod(uint64_t(t.info.ne[d]));
    h.pod(uint32_t(t.info.type));
    h.pod(offset);
    offset += pad_to(t.info.n_bytes, align);
    total += t.info.n_bytes;
  }
  // The data section is aligned; a file without tensors ends right after the metadata (as
  // gguf-py writes vocab-only files).
  if (!tensors_.empty()) h.buf.resize(pad_to(h.buf.size(), align), 0);
  SLUICE_RETURN_IF_ERROR(sink(h.buf.data(), h.buf.size()));

  // Tensor data, each padded with zeros to the alignment. One staging buffer, reused.
  std::vector<uint8_t> staging;
  uint64_t done = 0;
  for (const Tensor& t : tensors_) {
    staging.assign(pad_to(t.info.n_bytes, align), 0);
    SLUICE_RETURN_IF_ERROR(t.source(staging.data(), t.info.n_bytes));
    SLUICE_RETURN_IF_ERROR(sink(staging.data(), staging.size()));
    done += t.info.n_bytes;
    if (progress) progress(done, total);
  }
  return {};
}

Status GgufWriter::write(const std::string& path, const Progress& progress) const {
  // Write to a temporary name and rename, so a failed write never leaves a truncated model.
  const std::string tmp = path + ".partial";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return make_error("cannot create '", tmp, "': ", std::strerror(errno));
  Sink sink = [&](const void* p, size_t n) -> Status {
    if (n && std::fwrite(p, 1, n, f.get()) != n) {
      return make_error("write to '", tmp, "' failed: ", std::strerror(errno));
    }
    return {};
  };
  Status st = write_to(sink, progress);
  if (st.ok() && std::fflush(f.get()) != 0) {
    st = make_error("write to '", tmp, "' failed: ", std::strerror(errno));
  }
  FILE* raw = f.release();
  if (std::fclose(raw) != 0 && st.ok()) {
    st = make_error("closing '", tmp, "' failed: ", std::strerror(errno));
  }
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
  }
  return {};
}

Result<std::vector<uint8_t>> GgufWriter::write_to_buffer() const {
  std::vector<uint8_t> out;
  Sink sink = [&](const void* p, size_t n) -> Status {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return {};
  };
  SLUICE_RETURN_IF_ERROR(write_to(sink, {}));
  return out;
}

}  // namespace sluice
