// parse_calibration (calibration.h): apart from calibration.cpp so that it can be built without
// the engine (fuzz/calibration_fuzz.cpp).
#include <nlohmann/json.hpp>

#include "sim/calibration.h"

namespace sluice::sim {

Result<SimCalibration> parse_calibration(std::string_view json, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return make_error("calibration '", path, "' is not a JSON object");
  SimCalibration c;
  auto num = [&](const char* key, double& dst, double scale, double lo, double hi) -> Status {
    if (!j.contains(key)) return {};
    if (!j[key].is_number())
      return make_error("calibration '", path, "': '", key, "' not a number");
    const double v = j[key].get<double>();
    if (!(v >= lo && v <= hi)) {
      return make_error("calibration '", path, "': '", key, "' = ", v, " outside [", lo, ", ", hi,
                        "]");
    }
    dst = v * scale;
    return {};
  };
  SLUICE_RETURN_IF_ERROR(num("mem_efficiency", c.mem_efficiency, 1, 1e-3, 2));
  SLUICE_RETURN_IF_ERROR(num("compute_efficiency", c.compute_efficiency, 1, 1e-3, 2));
  SLUICE_RETURN_IF_ERROR(num("step_overhead_ms", c.step_overhead_s, 1e-3, 0, 1e4));
  SLUICE_RETURN_IF_ERROR(num("per_seq_us", c.per_seq_s, 1e-6, 0, 1e7));
  SLUICE_RETURN_IF_ERROR(num("per_row_us", c.per_row_s, 1e-6, 0, 1e7));
  if (j.contains("combine")) {
    if (j["combine"] == "sum") {
      c.additive = true;
    } else if (j["combine"] != "max") {
      return make_error("calibration '", path, "': 'combine' must be \"max\" or \"sum\"");
    }
  }
  c.source = "file " + path;
  if (auto s = j.find("source"); s != j.end()) {
    // (j.value() would throw on a non-string, and nothing catches it: sluice sim would abort)
    if (!s->is_string()) return make_error("calibration '", path, "': 'source' must be a string");
    c.source = s->get<std::string>();
  }
  return c;
}

}  // namespace sluice::sim
