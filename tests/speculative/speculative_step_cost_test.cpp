// MeasuredStepCost, the measured gate's price table: interpolation between the step sizes seen,
// extrapolation past them, and medians that ignore outliers.
#include <gtest/gtest.h>

#include <limits>

#include "speculative/step_cost.h"

namespace sluice {
namespace {

TEST(MeasuredStepCost, InterpolatesExtrapolatesAndIgnoresOutliers) {
  MeasuredStepCost c;
  EXPECT_FALSE(c.seconds(1));
  c.record(1, 7.0);  // a size's first steps run cold: no price before kMinSteps of them
  c.record(1, 1.0);
  EXPECT_FALSE(c.seconds(1));
  c.record(1, 1.0);
  EXPECT_DOUBLE_EQ(*c.seconds(1), 1.0);
  EXPECT_FALSE(c.seconds(4)) << "one size seen: nothing past it";
  for (int i = 0; i < 5; ++i) c.record(5, 3.0);
  EXPECT_DOUBLE_EQ(*c.seconds(3), 2.0);   // between (1, 1) and (5, 3)
  EXPECT_DOUBLE_EQ(*c.seconds(9), 5.0);   // along that line past 5
  EXPECT_DOUBLE_EQ(*c.seconds(17), 9.0);  //
  // A few slow steps (a page fault, another process) do not move the median.
  c.record(5, 100.0);
  c.record(5, 50.0);
  EXPECT_DOUBLE_EQ(*c.seconds(5), 3.0);
  // Below the smallest size seen: along the line, never below a proportional share.
  MeasuredStepCost d;
  for (int i = 0; i < 3; ++i) {
    d.record(4, 4.0);
    d.record(8, 4.5);
  }
  EXPECT_NEAR(*d.seconds(2), 3.75, 1e-12);
  // Nonsense is ignored.
  d.record(0, 1.0);
  d.record(16, -1.0);
  d.record(16, std::numeric_limits<double>::quiet_NaN());
  EXPECT_NEAR(*d.seconds(16), 5.5, 1e-12);  // along (4, 4) .. (8, 4.5)
}

}  // namespace
}  // namespace sluice
