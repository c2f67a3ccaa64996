#include "base/status.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return make_error("value ", x, " is not positive");
  return x;
}

Result<int> doubled(int x) {
  SLUICE_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check(int x) {
  SLUICE_RETURN_IF_ERROR(parse_positive(x));
  return {};
}

TEST(Status, ResultCarriesValueOrMessage) {
  EXPECT_TRUE(doubled(3).ok());
  EXPECT_EQ(*doubled(3), 6);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "value -1 is not positive");
  EXPECT_TRUE(check(1).ok());
  EXPECT_EQ(check(0).message(), "value 0 is not positive");
}

}  // namespace
}  // namespace sluice
