// GGUF metadata values: the 13 value types of the GGUF spec, arrays nest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice {

// On-disk value type ids (gguf_type). The variant index of GgufValue::v equals the id.
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
constexpr uint32_t kGgufTypeCount = 13;

std::string_view gguf_type_name(GgufType t);

struct GgufValue;

// A homogeneous array; `elem_type` is kept even when empty so files round-trip exactly.
struct GgufArray {
  GgufType elem_type = GgufType::UINT8;
  std::vector<GgufValue> items;
};

struct GgufValue {
  using Variant = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
  Variant v;

  GgufValue() = default;
  template <class T>
  GgufValue(T x) : v(std::move(x)) {}              // NOLINT: implicit from any member type
  GgufValue(const char* s) : v(std::string(s)) {}  // NOLINT

  GgufType type() const { return GgufType(v.index()); }
  template <class T>
  const T* get_if() const {
    return std::get_if<T>(&v);
  }
  bool operator==(const GgufValue& o) const;
};

inline bool operator==(const GgufArray& a, const GgufArray& b) {
  return a.elem_type == b.elem_type && a.items == b.items;
}
inline bool GgufValue::operator==(const GgufValue& o) const {
  return v == o.v;
}

// Helpers to build arrays.
GgufArray make_string_array(const std::vector<std::string>& items);
template <class T>
GgufArray make_array(GgufType elem_type, const std::vector<T>& items) {
  GgufArray a;
  a.elem_type = elem_type;
  a.items.reserve(items.size());
  for (const T& x : items) a.items.emplace_back(x);
  return a;
}

// Short human-readable rendering (arrays abbreviated), for `sluice info`.
std::string format_value(const GgufValue& v, size_t max_items = 8);

}  // namespace sluice
