// This machine's measured ceilings ("the roofline"): read bandwidth and peak arithmetic rates,
// measured by `sluice bench --roofline` and cached as JSON so the planner (`--hw local`),
// `sluice bench` (MBU/MFU) and /metrics can use them without re-measuring.
#pragma once

#include <string>

#include "base/huge_alloc.h"
#include "base/status.h"

namespace sluice {

struct MachineRoofline {
  std::string cpu;              // model name from /proc/cpuinfo
  int threads = 0;              // threads used for the multi-threaded numbers
  double read_gbps_1t = 0;      // streaming read bandwidth, 1 thread (GB/s = 1e9 B/s)
  double read_gbps = 0;         // streaming read bandwidth, `threads` threads
  double peak_gflops_f32 = 0;   // f32 FMA peak, `threads` threads (GFLOP/s, FMA = 2 flops)
  double peak_gflops_bf16 = 0;  // bf16 dot-product peak (0 when the CPU lacks AVX512-BF16)
  double peak_gops_int8 = 0;    // int8 dot-product peak (VNNI, or AVX2's vpmaddubsw sequence)
  std::string measured_at;      // ISO-8601 UTC
  std::string simd;             // whose peaks: "avx512", "avx2" or "scalar" (the kernels' ISA)
};

// Measures everything (a few seconds). `threads` <= 0: all cores. `simd` caps the instruction
// set of the peak measurements at the kernels' ("avx512", "avx2" or "scalar": a process forced to
// SLUICE_ISA=avx2 is measured against AVX2's peaks, not the CPU's best); "" is the CPU's best.
MachineRoofline measure_machine_roofline(int threads, const std::string& simd = "");

// The streaming-read bandwidth probe of `measure_machine_roofline`, keeping its buffer (512 MiB
// in huge pages, far beyond the caches) so it can be re-measured between other work: on a
// shared host the bandwidth drifts, and `sluice bench` divides each test by the bandwidth
// probed alongside it.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(int threads);  // <= 0: all cores
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  // GB/s (1e9 B/s) with `threads` threads (<= 0: the constructor's): the best of 5 passes.
  double measure(int threads = 0) const;

 private:
  float* buf() const { return reinterpret_cast<float*>(mem_.get()); }

  StreamedBuffer mem_;
  size_t n_ = 0;  // floats
  int threads_ = 1;
};

// Default cache file: $SLUICE_CACHE or $XDG_CACHE_HOME/sluice or ~/.cache/sluice, + /roofline.json
std::string default_roofline_path();
Status save_roofline(const MachineRoofline& r, const std::string& path);
Result<MachineRoofline> load_roofline(const std::string& path);

}  // namespace sluice
