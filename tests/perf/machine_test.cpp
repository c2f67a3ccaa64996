#include "perf/machine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace sluice {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(MachineRoofline, SaveLoadRoundTripAndClearErrors) {
  test::TempDir dir;
  MachineRoofline r;
  r.cpu = "test cpu";
  r.threads = 2;
  r.read_gbps_1t = 38.5;
  r.read_gbps = 46.25;
  r.peak_gflops_f32 = 200;
  r.peak_gflops_bf16 = 400;
  r.peak_gops_int8 = 800;
  r.simd = "avx2";
  r.measured_at = "2026-11-21T00:00:00Z";
  const std::string path = dir.path("sub/roofline.json");
  ASSERT_TRUE(save_roofline(r, path).ok());
  auto back = load_roofline(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->cpu, "test cpu");
  EXPECT_EQ(back->read_gbps, 46.25);
  EXPECT_EQ(back->peak_gops_int8, 800);
  EXPECT_EQ(back->simd, "avx2");  // whose peaks: MFU under SLUICE_ISA=avx2 divides by AVX2's
  auto missing = load_roofline(dir.path("none.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("sluice bench --roofline"), std::string::npos);
}

// A cache written before the "format" key (format 1) still loads, says what it is, and is what
// MBU divides by until something raises it; a newer format is refused with a way out.
TEST(MachineRoofline, OldAndNewerCacheFormats) {
  test::TempDir dir;
  const std::string v1 = dir.path("v1.json");
  write_text(v1,
             R"({"cpu": "old", "threads": 2, "read_gbps_1t": 20, "read_gbps": 28.1,
                       "peak_gflops_f32": 300, "peak_gflops_bf16": 0, "peak_gops_int8": 900,
                       "simd": "avx512", "measured_at": "2026-11-20T00:00:00Z"})");
  auto old = load_roofline(v1);
  ASSERT_TRUE(old.ok()) << old.message();
  EXPECT_EQ(old->format, 1);
  EXPECT_EQ(old->read_gbps, 28.1);
  EXPECT_EQ(old->probe_read_gbps, 28.1);
  EXPECT_EQ(old->read_source, "probe");
  EXPECT_NE(old->read_origin().find("format-1"), std::string::npos) << old->read_origin();
  // A raise rewrites it as format 2, keeping what the probe read.
  EXPECT_FALSE(persist_raised_read_gbps(v1, 25.0, "lower"));
  EXPECT_TRUE(persist_raised_read_gbps(v1, 31.5, "bench tg64 @512"));
  auto raised = load_roofline(v1);
  ASSERT_TRUE(raised.ok()) << raised.message();
  EXPECT_EQ(raised->format, kRooflineFormat);
  EXPECT_EQ(raised->read_gbps, 31.5);
  EXPECT_EQ(raised->probe_read_gbps, 28.1);
  EXPECT_EQ(raised->peak_gops_int8, 900);
  EXPECT_NE(raised->read_origin().find("raised by bench tg64 @512"), std::string::npos)
      << raised->read_origin();
  EXPECT_FALSE(persist_raised_read_gbps(dir.path("none.json"), 50, "x"));  // no file: none made

  const std::string v9 = dir.path("v9.json");
  write_text(v9, R"({"format": 9, "read_gbps": 30})");
  auto newer = load_roofline(v9);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.message().find("format 9"), std::string::npos) << newer.message();
  write_text(v9, R"({"format": 2, "read_gbps": "fast"})");
  EXPECT_FALSE(load_roofline(v9).ok());
}

// The probe's access pattern covers its buffer (every float read once: the sum of a buffer of
// ones is its length) on every ISA path this CPU runs, at odd sizes and thread counts, and its
// bandwidth is finite and positive. Its numbers are reported (sluice bench --roofline), never
// asserted.
TEST(BandwidthProbe, CoversItsBufferOnEveryIsa) {
  std::vector<std::string> isas = {"scalar"};
  if (__builtin_cpu_supports("avx2")) isas.push_back("avx2");
  if (__builtin_cpu_supports("avx512f")) isas.push_back("avx512");
  // 2 matrices and a ragged third (8 MiB each), a ragged last unit and a tail of 3 floats.
  const size_t bytes = (size_t(17) << 20) + 4 * 4099;
  for (const std::string& isa : isas) {
    SCOPED_TRACE(isa);
    const BandwidthProbe probe(2, isa, bytes);
    EXPECT_EQ(probe.simd(), isa);
    ASSERT_EQ(probe.n_floats(), bytes / 4);
    for (int t : {1, 2, 3}) EXPECT_EQ(probe.read_sum(t), double(bytes / 4)) << t << " threads";
    const double gbps = probe.measure(0, 2);
    EXPECT_TRUE(std::isfinite(gbps));
    EXPECT_GT(gbps, 0);
    const double stream = measure_stream_read_gbps(2, isa, size_t(4) << 20, 2);
    EXPECT_TRUE(std::isfinite(stream));
    EXPECT_GT(stream, 0);
  }
}

}  // namespace
}  // namespace sluice
