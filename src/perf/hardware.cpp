#include "perf/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "perf/machine.h"

namespace sluice {

double peak_flops(const HardwareSpec& hw, int act_bits) {
  if (act_bits <= 8 && hw.ops_int8 > 0) return hw.ops_int8;
  return hw.flops_bf16;
}

HardwareSpec aggregate(const HardwareSpec& chip, int n_chips) {
  HardwareSpec out = chip;
  const double n = std::max(n_chips, 1);
  out.hbm_bytes_per_s *= n;
  out.flops_bf16 *= n;
  out.ops_int8 *= n;
  out.memory_bytes *= n;
  if (n_chips > 1) out.name = std::to_string(n_chips) + " x " + chip.name;
  return out;
}

const std::vector<HardwareSpec>& hardware_presets() {
  // GPU rows: llm-inference-complete-guide.md's GPU table (VRAM, BW, BF16 TFLOPS) and its
  // "NVLink (900 GB/s on H100)" / "PCIe (64 GB/s)"; int8 dense peaks and the A100/B200 NVLink
  // figures from NVIDIA's datasheets. The H100 bf16 peak is how-to-scale-your-model.md's 9.89e14.
  // TPU rows: how-to-scale-your-model.md's spec tables (HBM per chip, bf16/int8 FLOPs/s, ICI bidi
  // per link). TPU v5e HBM bandwidth is 8.2e11, the value the seeds' roofline derivation
  // (1.97e14 / 8.2e11 = 240), the LLaMA 2-13B tables (0.82 TB/s per chip) and the LLaMA 3-70B
  // roofline code use; the spec table and some worked answers round it to 8.1e11.
  static const std::vector<HardwareSpec> presets = {
      {"H100", 3.35e12, 9.89e14, 1.979e15, 80e9, 9e11, 1,
       "H100 SXM: 3.35 TB/s, 989 TFLOP/s bf16, 80 GB, NVLink 900 GB/s"},
      {"H200", 4.8e12, 9.89e14, 1.979e15, 141e9, 9e11, 1,
       "H200 SXM: 4.8 TB/s, 989 TFLOP/s bf16, 141 GB, NVLink 900 GB/s"},
      {"A100", 2.04e12, 3.12e14, 6.24e14, 80e9, 6e11, 1,
       "A100 SXM 80GB: 2.04 TB/s, 312 TFLOP/s bf16, NVLink 600 GB/s"},
      {"B200", 8e12, 2.25e15, 4.5e15, 192e9, 1.8e12, 1,
       "B200: 8 TB/s, 2250 TFLOP/s bf16, 192 GB, NVLink 1.8 TB/s"},
      {"RTX 4090", 1.01e12, 1.65e14, 6.6e14, 24e9, 6.4e10, 1,
       "RTX 4090: 1.01 TB/s, 165 TFLOP/s bf16, 24 GB, PCIe 4.0 x16 64 GB/s"},
      {"TPU v5e", 8.2e11, 1.97e14, 3.94e14, 16e9, 9e10, 2,
       "TPU v5e: 8.2e11 B/s HBM, 1.97e14 bf16, 3.94e14 int8, 16 GB, ICI 9e10 B/s x 2 axes"},
      {"TPU v5p", 2.8e12, 4.59e14, 9.18e14, 96e9, 1.8e11, 3,
       "TPU v5p: 2.8e12 B/s HBM, 4.59e14 bf16, 9.18e14 int8, 96 GB, ICI 1.8e11 B/s x 3 axes"},
  };
  return presets;
}

namespace {

std::string normalize(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' || c == '-' || c == '_') continue;
    out.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace

const HardwareSpec* find_hardware(std::string_view name) {
  const std::string want = normalize(name);
  for (const HardwareSpec& hw : hardware_presets()) {
    if (normalize(hw.name) == want) return &hw;
  }
  // Unambiguous short forms: "v5e", "4090".
  const HardwareSpec* found = nullptr;
  for (const HardwareSpec& hw : hardware_presets()) {
    const std::string n = normalize(hw.name);
    if (n.size() > want.size() && !want.empty() &&
        n.compare(n.size() - want.size(), want.size(), want) == 0) {
      if (found) return nullptr;
      found = &hw;
    }
  }
  return found;
}

std::string hardware_names() {
  std::string out;
  for (const HardwareSpec& hw : hardware_presets()) out += hw.name + ", ";
  return out + "local";
}

HardwareSpec hardware_from_roofline(const MachineRoofline& r, double memory_bytes) {
  HardwareSpec hw;
  hw.name = "local (" + (r.cpu.empty() ? std::string("this machine") : r.cpu) + ")";
  hw.hbm_bytes_per_s = r.read_gbps * 1e9;
  hw.flops_bf16 = (r.peak_gflops_bf16 > 0 ? r.peak_gflops_bf16 : r.peak_gflops_f32) * 1e9;
  hw.ops_int8 = r.peak_gops_int8 * 1e9;
  hw.memory_bytes = memory_bytes;
  hw.link_bytes_per_s = 0;
  hw.link_axes = 1;
  hw.source = "measured by `sluice bench --roofline` at " + r.measured_at + " with " +
              std::to_string(r.threads) + " threads";
  return hw;
}

Result<HardwareSpec> load_local_hardware(const std::string& path) {
  const std::string p = path.empty() ? default_roofline_path() : path;
  auto r = load_roofline(p);
  if (!r.ok()) {
    const char* hint = "sluice bench --roofline";
    return make_error("hardware 'local' needs this machine's measured roofline: ", r.message(),
                      r.message().find(hint) == std::string::npos
                          ? "; run `sluice bench --roofline` to measure and cache it"
                          : "");
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double ram = pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
  return hardware_from_roofline(*r, ram);
}

}  // namespace sluice
