#include "perf/machine.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace sluice {
namespace {

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

}  // namespace
}  // namespace sluice
