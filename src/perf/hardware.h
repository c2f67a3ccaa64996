// Accelerator specs for the roofline model: per-chip memory bandwidth, peak arithmetic rates,
// memory capacity and chip-to-chip bandwidth. Presets carry the seeds' numbers where the seeds
// give them (shared/seeds/how-to-scale-your-model.md "TPU specs" table and roofline chapter,
// llm-inference-complete-guide.md GPU table); `local` comes from `sluice bench --roofline`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sluice {

struct MachineRoofline;

// One chip. Rates are dense (no 2:4 sparsity), bytes are decimal (1 GB = 1e9 B), as in the seeds.
struct HardwareSpec {
  std::string name;             // "TPU v5e"
  double hbm_bytes_per_s = 0;   // memory -> compute bandwidth (HBM, GDDR, DRAM)
  double flops_bf16 = 0;        // bf16 matmul peak, FLOP/s (one FMA = 2 FLOPs)
  double ops_int8 = 0;          // int8 x int8 matmul peak, OP/s; 0 = unsupported (uses bf16)
  double memory_bytes = 0;      // memory capacity
  double link_bytes_per_s = 0;  // chip-to-chip, bidirectional, per axis (ICI, NVLink); 0 = none
  int link_axes = 1;            // independent interconnect axes a model-parallel group can use
  std::string source;           // where the numbers come from (shown by `sluice plan`)
};

// Peak matmul rate for activations of `act_bits` (8 -> int8 peak when supported, else bf16).
double peak_flops(const HardwareSpec& hw, int act_bits);

// `n_chips` chips seen as one device: bandwidth, peak rates and memory add up (the seeds'
// "Total Memory Bandwidth", "Total FLOPs/s"); interconnect figures stay per chip. This is the
// perfect-sharding assumption of the seeds' estimates.
HardwareSpec aggregate(const HardwareSpec& chip, int n_chips);

// The built-in presets: H100, H200, A100, B200, RTX 4090, TPU v5e, TPU v5p.
const std::vector<HardwareSpec>& hardware_presets();
// Case-insensitive, ignoring spaces, '-' and '_' ("tpu-v5e", "TPUv5e", "h100").
const HardwareSpec* find_hardware(std::string_view name);
// "H100, H200, ..., local" for help and error messages.
std::string hardware_names();

// This machine as a HardwareSpec: multi-threaded read bandwidth and peaks (the bf16 peak falls
// back to the f32 peak on CPUs without bf16 dot products). `memory_bytes` is physical RAM.
HardwareSpec hardware_from_roofline(const MachineRoofline& r, double memory_bytes);

// Reads the roofline cache written by `sluice bench --roofline` (default path when `path` is
// empty). A missing cache is an error telling the user to run that command.
Result<HardwareSpec> load_local_hardware(const std::string& path);

}  // namespace sluice
