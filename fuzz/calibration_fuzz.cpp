// libFuzzer target: the simulator's calibration file (sim::parse_calibration, the text half of
// load_calibration) on arbitrary bytes. Checks: no crash, hang or exception (a wrongly typed
// field is an error value); an error names the file; an accepted calibration has its numbers in
// the documented ranges (efficiencies in [1e-3, 2], costs >= 0, all finite).
//
//   scripts/fuzz 60 calibration_fuzz
// Seeds: fuzz/seeds/calibration_fuzz (a file as save_calibration writes it).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sim/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto c = sluice::sim::parse_calibration(text, "cal.json");
  if (!c.ok()) {
    if (c.message().rfind("calibration 'cal.json'", 0) != 0) std::abort();
    return 0;
  }
  for (double v : {c->mem_efficiency, c->compute_efficiency}) {
    if (!(v >= 1e-3 && v <= 2)) std::abort();
  }
  for (double v : {c->step_overhead_s, c->per_seq_s, c->per_row_s}) {
    if (!(v >= 0) || !std::isfinite(v)) std::abort();
  }
  return 0;
}
