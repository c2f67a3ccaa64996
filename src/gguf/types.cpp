#include "gguf/types.h"

#include <array>
#include <cctype>
#include <string>

namespace sluice {
namespace {

struct Entry {
  uint32_t id;
  TypeTraits traits;
};

// Block sizes and byte sizes from ggml's type_traits table.
constexpr Entry kTypes[] = {
    {0, {"f32", 1, 4}},         {1, {"f16", 1, 2}},         {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},      {6, {"q5_0", 32, 22}},      {7, {"q5_1", 32, 24}},
    {8, {"q8_0", 32, 34}},      {9, {"q8_1", 32, 36}},      {10, {"q2_K", 256, 84}},
    {11, {"q3_K", 256, 110}},   {12, {"q4_K", 256, 144}},   {13, {"q5_K", 256, 176}},
    {14, {"q6_K", 256, 210}},   {15, {"q8_K", 256, 292}},   {16, {"iq2_xxs", 256, 66}},
    {17, {"iq2_xs", 256, 74}},  {18, {"iq3_xxs", 256, 98}}, {19, {"iq1_s", 256, 50}},
    {20, {"iq4_nl", 32, 18}},   {21, {"iq3_s", 256, 110}},  {22, {"iq2_s", 256, 82}},
    {23, {"iq4_xs", 256, 136}}, {24, {"i8", 1, 1}},         {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},        {27, {"i64", 1, 8}},        {28, {"f64", 1, 8}},
    {29, {"iq1_m", 256, 56}},   {30, {"bf16", 1, 2}},       {34, {"tq1_0", 256, 54}},
    {35, {"tq2_0", 256, 66}},   {39, {"mxfp4", 32, 17}},
};

constexpr size_t kMaxId = 40;

constexpr std::array<const TypeTraits*, kMaxId> build_index() {
  std::array<const TypeTraits*, kMaxId> idx{};
  for (const Entry& e : kTypes) idx[e.id] = &e.traits;
  return idx;
}

constexpr std::array<const TypeTraits*, kMaxId> kIndex = build_index();

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

const TypeTraits* type_traits(uint32_t type_id) {
  return type_id < kMaxId ? kIndex[type_id] : nullptr;
}

std::optional<GgmlType> parse_type_name(std::string_view name) {
  const std::string want = lower(name);
  for (const Entry& e : kTypes) {
    if (lower(e.traits.name) == want) return GgmlType(e.id);
  }
  return std::nullopt;
}

}  // namespace sluice
