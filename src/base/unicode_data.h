// Generated Unicode tables for what PCRE2 cannot answer: case mapping and canonical
// decomposition. Regenerate unicode_data.cpp with (Python 3, stdlib only):
//   python3 scripts/gen-unicode-data.py | clang-format --assume-filename=x.cpp >ud.cpp
//   mv ud.cpp src/base/unicode_data.cpp
// The Unicode version is that of the Python used (see the first line of unicode_data.cpp).

#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::unicode_data {

struct CpPair {
  uint32_t cp;
  uint32_t to;
};
struct CpSeq {
  uint32_t cp;
  uint32_t n;  // 0..3 code points in `to`
  uint32_t to[3];
};
struct CaseRange {
  uint32_t first;
  uint32_t last;
  int32_t step;   // 1 or 2
  int32_t delta;  // mapped = cp + delta
};

extern const CpPair kStripSingle[];
extern const size_t kStripSingleCount;
extern const CpSeq kStripMulti[];
extern const size_t kStripMultiCount;
extern const CaseRange kLower[];
extern const size_t kLowerCount;

}  // namespace sluice::unicode_data
