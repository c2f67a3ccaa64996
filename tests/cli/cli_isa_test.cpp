// One ISA per process, forceable with SLUICE_ISA: a bad or unavailable ISA is refused with a
// clear error before anything runs; the chosen one is printed; every ISA this CPU runs serves a
// whole model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "kernels/matmul_isa.h"
#include "test_util.h"

namespace sluice {
namespace {

// SLUICE_ISA for the commands run in one scope (children inherit the environment).
class ScopedIsa {
 public:
  explicit ScopedIsa(const char* isa) { setenv("SLUICE_ISA", isa, 1); }
  ~ScopedIsa() { unsetenv("SLUICE_ISA"); }
};

class CliIsa : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.path("tiny.gguf");
    const auto synth = test::run_sluice("synth --preset tiny --type q4_0 -t 1 -o " + model_);
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
  }
  test::TempDir dir_;
  std::string model_;
};

TEST_F(CliIsa, UnknownIsaIsRefused) {
  const ScopedIsa isa("avx9000");
  const auto r = test::run_sluice("info " + model_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("SLUICE_ISA='avx9000' is not an ISA: use scalar, avx2 or avx512"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliIsa, IsaTheCpuLacksIsRefusedAndOneItRunsIsUsed) {
  for (MatmulIsa want : {MatmulIsa::kScalar, MatmulIsa::kAvx2, MatmulIsa::kAvx512}) {
    const std::string name = matmul_isa_name(want);
    const ScopedIsa isa(name.c_str());
    const auto r = test::run_sluice("info --json " + model_);
    if (!cpu_runs_isa(want)) {
      EXPECT_EQ(r.exit_code, 2) << name;
      EXPECT_NE(r.err.find("SLUICE_ISA=" + name + ": this CPU lacks"), std::string::npos) << r.err;
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["kernels"], name);
    const auto text = test::run_sluice("info " + model_);
    EXPECT_NE(text.out.find("kernels:      " + name), std::string::npos) << text.out;
  }
}

TEST_F(CliIsa, EveryIsaTheCpuRunsGeneratesAndBenchNamesIt) {
  const std::string cache = dir_.path("roofline.json");
  ASSERT_TRUE(test::write_roofline_cache(cache, 400));
  for (MatmulIsa want : {MatmulIsa::kScalar, MatmulIsa::kAvx2, MatmulIsa::kAvx512}) {
    if (!cpu_runs_isa(want)) continue;
    const std::string name = matmul_isa_name(want);
    const ScopedIsa isa(name.c_str());
    const auto r = test::run_sluice(
        "run " + model_ + " -p hello -n 6 --temp 0 --ignore-eos --output-format json -t 2");
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].size(), 6u) << name << ": " << r.out;
    EXPECT_EQ(j["finish_reason"], "length");
    const auto b = test::run_sluice("bench " + model_ + " --roofline-file " + cache +
                                    " -t 1 -p 8 -n 2 -r 1 --no-probe");
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_NE((b.out + b.err).find("kernels " + name), std::string::npos) << b.out << b.err;
  }
}

}  // namespace
}  // namespace sluice
