// ggml tensor types as stored in GGUF files: ids, block sizes and byte sizes, exactly as
// ggml.h / ggml.c define them. The block layouts themselves live in quants.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

// Values are the on-disk type ids (ggml_type). Gaps are ids ggml has retired.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

// Storage facts of one type: `block_size` elements are stored in `type_size` bytes.
struct TypeTraits {
  std::string_view name;  // lower-case, as llama.cpp prints it ("q4_K", "f16")
  int64_t block_size;
  size_t type_size;
};

// Traits of a type id read from a file; nullptr for ids ggml does not define.
const TypeTraits* type_traits(uint32_t type_id);
inline const TypeTraits& type_traits(GgmlType t) {
  return *type_traits(uint32_t(t));
}
inline std::string_view type_name(GgmlType t) {
  return type_traits(t).name;
}

// Parses a name as printed by type_name (case-insensitive: "Q4_K", "q4_k", "bf16").
std::optional<GgmlType> parse_type_name(std::string_view name);

// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline size_t row_size(GgmlType t, int64_t n) {
  const TypeTraits& tr = type_traits(t);
  return size_t(n / tr.block_size) * tr.type_size;
}

}  // namespace sluice
