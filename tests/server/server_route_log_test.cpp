// server::parse_route_ids, the ids of GET /v1/cache/routes?ids=... (the request is tested
// black-box in tests/router/router_serve_test.cpp; fuzz/router_request_fuzz.cpp fuzzes this).
#include <gtest/gtest.h>

#include "server/route_log.h"

namespace sluice::server {
namespace {

TEST(RouteIds, CommaSeparatedIntegers) {
  using Ids = std::vector<uint64_t>;
  EXPECT_EQ(parse_route_ids(""), Ids{});
  EXPECT_EQ(parse_route_ids("7"), Ids{7});
  EXPECT_EQ(parse_route_ids("1,0,18446744073709551615,"), (Ids{1, 0, 18446744073709551615u}));
  for (const char* bad : {",", "1,,2", "-1", "+1", "1 ", "x", "18446744073709551616", "0x10"}) {
    EXPECT_FALSE(parse_route_ids(bad)) << bad;
  }
  EXPECT_EQ(parse_route_ids("1,2,3,x", 2), (Ids{1, 2}));  // past max_ids: not read
}

}  // namespace
}  // namespace sluice::server
