// This machine's measured ceilings ("the roofline"): read bandwidth and peak arithmetic rates,
// measured by `sluice bench --roofline` and cached as JSON so the planner (`--hw local`),
// `sluice bench` (MBU/MFU) and /metrics can use them without re-measuring.
#pragma once

#include <functional>
#include <string>

#include "base/huge_alloc.h"
#include "base/status.h"

namespace sluice {

// The cache file's format: 1 had no "format" key (its probe read without the decode kernels'
// prefetch and thread split); 2 adds where the bandwidth comes from. load_roofline reads both
// and refuses newer ones.
constexpr int kRooflineFormat = 2;

struct MachineRoofline {
  std::string cpu;              // model name from /proc/cpuinfo
  int threads = 0;              // threads used for the multi-threaded numbers
  double read_gbps_1t = 0;      // streaming read bandwidth, 1 thread (GB/s = 1e9 B/s)
  double read_gbps = 0;         // streaming read bandwidth, `threads` threads: what MBU divides by
  double peak_gflops_f32 = 0;   // f32 FMA peak, `threads` threads (GFLOP/s, FMA = 2 flops)
  double peak_gflops_bf16 = 0;  // bf16 dot-product peak (0 when the CPU lacks AVX512-BF16)
  double peak_gops_int8 = 0;    // int8 dot-product peak (VNNI, or AVX2's vpmaddubsw sequence)
  std::string measured_at;      // ISO-8601 UTC
  std::string simd;             // whose peaks: "avx512", "avx2" or "scalar" (the kernels' ISA)
  // Format 2. read_gbps is the best recent reading: the probe's, or raised by an engine step or a
  // `sluice bench` test that streamed faster (bytes it read / its time), so MBU <= 100%.
  int format = kRooflineFormat;       // of the file it was loaded from (1: no "format" key)
  double probe_read_gbps = 0;         // what the probe read at measured_at (`threads` threads)
  double stream_read_gbps = 0;        // STREAM-style cross-check at measured_at (0: not measured)
  double stream_probe_gbps = 0;       // the probe over the passes interleaved with that read
  std::string read_source = "probe";  // "probe" or "step": who set read_gbps
  std::string read_at;                // when read_gbps was set (ISO-8601 UTC)
  std::string read_by;                // "step": what streamed it ("engine step", "bench tg64 @512")

  // Where read_gbps comes from, for the reports: "probe at T" or "raised by <what> at T (the
  // probe at T0 read X)"; format 1 files say so.
  std::string read_origin() const;
};

// Raises r.read_gbps to `gbps` when that is higher (something streamed faster than the cached
// reading: the reading was low), recording who and when; returns whether it did.
bool raise_read_gbps(MachineRoofline& r, double gbps, const std::string& by);

// Measures everything (a few seconds). `threads` <= 0: all cores. `simd` caps the instruction
// set of the peak measurements at the kernels' ("avx512", "avx2" or "scalar": a process forced to
// SLUICE_ISA=avx2 is measured against AVX2's peaks, not the CPU's best); "" is the CPU's best.
MachineRoofline measure_machine_roofline(int threads, const std::string& simd = "");

// The streaming-read bandwidth probe of `measure_machine_roofline`. It reads the way decode
// reads its weights (kernels/matmul.cpp, matmul_kernels.h): the buffer (512 MiB in huge pages,
// far beyond the caches) is a run of 8 MiB "matrices", each split between a ThreadPool's threads
// in ~4 chunks a thread handed out dynamically, a barrier after each; every 64-byte line is
// prefetched 4 KiB ahead into L1 (prefetch_weights<1>) and read with the ISA's widest loads. It
// keeps its buffer so it can be re-measured between other work: on a shared host the bandwidth
// drifts, and `sluice bench` re-probes alongside each test.
class BandwidthProbe {
 public:
  // threads <= 0: all cores. simd: "avx512", "avx2" or "scalar" (the kernels' ISA; "" the CPU's
  // best). bytes: the buffer (tests use small ones).
  explicit BandwidthProbe(int threads, const std::string& simd = "",
                          size_t bytes = size_t(512) << 20);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  // GB/s (1e9 B/s) with `threads` threads (<= 0: the constructor's, at most those): the best of
  // `passes` passes ~10 ms apart. 0 when the buffer could not be allocated.
  double measure(int threads = 0, int passes = 9) const;
  // One pass with `threads` threads: the sum of every float read (the buffer holds 1.0f each, so
  // a pass that covers it returns n_floats()).
  double read_sum(int threads = 0) const;
  size_t n_floats() const { return n_; }
  const std::string& simd() const { return simd_; }

 private:
  float* buf() const { return reinterpret_cast<float*>(mem_.get()); }

  StreamedBuffer mem_;
  size_t n_ = 0;  // floats
  int threads_ = 1;
  std::string simd_;
};

// STREAM-style read for a cross-check of the probe: `threads` plain threads each sum a static
// share of a `bytes` buffer, no software prefetch; the buffer in huge pages as the probe's and
// the weights are (on 4 KiB pages reads are 10-25% slower on a Zen 4 VM). The best of `reps`
// passes, GB/s (0 when the memory is not there). `between` (if set) runs after each pass: the
// probe's passes interleaved with these see the same drifting bandwidth.
double measure_stream_read_gbps(int threads, const std::string& simd = "",
                                size_t bytes = size_t(1) << 30, int reps = 5,
                                const std::function<void()>& between = nullptr);

// The L3 (last-level) cache's bytes as the OS reports them, 0 when unknown.
size_t last_level_cache_bytes();

// Now as ISO-8601 UTC ("2026-11-29T15:04:05Z").
std::string now_iso8601_utc();

// Default cache file: $SLUICE_CACHE or $XDG_CACHE_HOME/sluice or ~/.cache/sluice, + /roofline.json
std::string default_roofline_path();
// Writes format 2 (kRooflineFormat) atomically (a temp file renamed over `path`).
Status save_roofline(const MachineRoofline& r, const std::string& path);
// Reads format 1 (as a probe reading at measured_at) and 2; an error for newer formats.
Result<MachineRoofline> load_roofline(const std::string& path);
// Raises the read bandwidth cached at `path` to `gbps` (re-read first, so a newer probe in the
// file is not lost); no file or a lower reading: nothing written. Returns whether it wrote.
bool persist_raised_read_gbps(const std::string& path, double gbps, const std::string& by);

}  // namespace sluice
