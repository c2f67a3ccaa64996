// The routing policies and the prefix tree as pure logic: decisions, thresholds, memory bounds,
// LRU eviction and trimming.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "router/policy.h"
#include "router/prefix_tree.h"

namespace sluice::router {
namespace {

// --- PrefixTree ---------------------------------------------------------------------------------

TEST(PrefixTree, MatchesTheLongestStoredPrefix) {
  PrefixTree t;
  EXPECT_EQ(t.match("anything"), 0u);
  t.insert("You are a bot.\nuser: hi");
  t.insert("You are a bot.\nuser: bye");
  EXPECT_EQ(t.match("You are a bot.\nuser: hi"), 23u);
  EXPECT_EQ(t.match("You are a bot.\nuser: hi there"), 23u);
  EXPECT_EQ(t.match("You are a bot.\nuser: bonjour"), 22u);  // "...user: b"
  EXPECT_EQ(t.match("You are a cat"), 10u);
  EXPECT_EQ(t.match("x"), 0u);
  EXPECT_EQ(t.match(""), 0u);
  // Shared bytes are stored once: "You are a bot.\nuser: " + "hi" + "bye".
  EXPECT_EQ(t.n_chars(), 21u + 2u + 3u);
  EXPECT_EQ(t.n_nodes(), 3u);
}

TEST(PrefixTree, InsertingAgainOrAPrefixAddsNothing) {
  PrefixTree t;
  t.insert("abcdef");
  t.insert("abcdef");
  t.insert("abc");
  EXPECT_EQ(t.n_chars(), 6u);
  EXPECT_EQ(t.match("abcdefg"), 6u);
  EXPECT_EQ(t.match("abd"), 2u);
}

TEST(PrefixTree, StaysWithinItsCapEvictingLeastRecentlyUsedLeaves) {
  PrefixTree t(100);
  // Four 40-byte keys with distinct first bytes: the tree holds at most 100 bytes.
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c'), d(40, 'd');
  t.insert(a);
  t.insert(b);
  EXPECT_EQ(t.n_chars(), 80u);
  t.insert(a);  // a is now more recent than b
  t.insert(c);  // 120 > 100: evict down to 7/8 * 100 = 87 -> b goes (oldest)
  EXPECT_LE(t.n_chars(), 100u);
  EXPECT_EQ(t.match(b), 0u);
  EXPECT_EQ(t.match(a), 40u);
  EXPECT_EQ(t.match(c), 40u);
  t.insert(d);  // evicts a (older than c)
  EXPECT_EQ(t.match(a), 0u);
  EXPECT_EQ(t.match(c), 40u);
  EXPECT_EQ(t.match(d), 40u);
  EXPECT_EQ(t.n_evicted_chars(), 80u);
}

TEST(PrefixTree, EvictsLeavesBeforeTheSharedPrefixTheyHangFrom) {
  PrefixTree t(60);
  const std::string system(30, 's');
  t.insert(system + "1111111111");  // 40
  t.insert(system + "2222222222");  // 50
  t.insert(system + "3333333333");  // 60
  t.insert(system + "4444444444");  // 70 > 60: evict down to 53 -> leaves 1 and 2 go
  EXPECT_LE(t.n_chars(), 60u);
  EXPECT_EQ(t.match(system + "1111111111"), 30u);  // the system prompt stays
  EXPECT_EQ(t.match(system + "2222222222"), 30u);
  EXPECT_EQ(t.match(system + "4444444444"), 40u);
}

TEST(PrefixTree, RandomKeysNeverExceedTheCapAndCountsStayExact) {
  std::mt19937 rng(7);
  PrefixTree t(5000);
  std::vector<std::string> keys;
  for (int i = 0; i < 2000; ++i) {
    std::string k;
    if (!keys.empty() && rng() % 2) k = keys[rng() % keys.size()].substr(0, rng() % 50);
    const size_t extra = 1 + rng() % 80;
    for (size_t j = 0; j < extra; ++j) k.push_back(char('a' + rng() % 3));
    keys.push_back(k);
    t.insert(k);
    ASSERT_LE(t.n_chars(), 5000u);
    ASSERT_EQ(t.match(k), k.size()) << i;  // the newest key is never evicted (it fits)
  }
  // n_chars agrees with a rebuild of what is stored: clear and compare nothing leaks.
  t.clear();
  EXPECT_EQ(t.n_chars(), 0u);
  EXPECT_EQ(t.n_nodes(), 0u);
}

TEST(PrefixTree, TrimForgetsThePathPastTheKeptBytesAndEverythingBelow) {
  PrefixTree t;
  t.insert("system prompt. turn 1. turn 2.");
  t.insert("system prompt. turn 1. other");
  t.insert("system prompt. elsewhere");
  // The backend kept only "system prompt. turn" of the first key: everything longer through
  // that point is gone, including the second key's tail, but not the third key.
  t.trim("system prompt. turn 1. turn 2.", 19);
  EXPECT_EQ(t.match("system prompt. turn 1. turn 2."), 19u);
  EXPECT_EQ(t.match("system prompt. turn 1. other"), 19u);
  EXPECT_EQ(t.match("system prompt. elsewhere"), 24u);
  EXPECT_EQ(t.n_chars(),
            std::string("system prompt. turn").size() + std::string("elsewhere").size());
  // Cut at an edge boundary and at 0.
  t.trim("system prompt. elsewhere", 15);
  EXPECT_EQ(t.match("system prompt. elsewhere"), 15u);
  t.trim("system", 0);
  EXPECT_EQ(t.match("system prompt. turn"), 0u);
  EXPECT_EQ(t.n_chars(), 0u);
  EXPECT_EQ(t.n_nodes(), 0u);
}

TEST(PrefixTree, TrimKeepingEverythingOrOffTheTreeChangesNothing) {
  PrefixTree t;
  t.insert("abcdef");
  t.trim("abcdef", 6);
  t.trim("abcdef", 100);
  t.trim("abxyz", 2);  // leaves the tree at byte 2: nothing stored past it along this key
  t.trim("zzz", 0);
  EXPECT_EQ(t.match("abcdef"), 6u);
  EXPECT_EQ(t.n_chars(), 6u);
}

// --- Router
// ---------------------------------------------------------------------------------------

std::vector<BackendLoad> loads(std::vector<int64_t> in_flight) {
  std::vector<BackendLoad> out;
  for (int64_t f : in_flight) out.push_back(BackendLoad{true, f, -1, -1});
  return out;
}

TEST(Router, ParsesPolicyNames) {
  EXPECT_EQ(*parse_policy("cache_aware"), Policy::kCacheAware);
  EXPECT_EQ(*parse_policy("least_load"), Policy::kLeastLoad);
  EXPECT_EQ(*parse_policy("round_robin"), Policy::kRoundRobin);
  EXPECT_FALSE(parse_policy("random").ok());
  EXPECT_NE(parse_policy("random").message().find("cache_aware"), std::string::npos);
  EXPECT_STREQ(policy_name(Policy::kLeastLoad), "least_load");
}

TEST(Router, LoadIsTheLargerOfOwnInFlightAndTheReport) {
  EXPECT_EQ((BackendLoad{true, 3, -1, -1}).load(), 3);
  EXPECT_EQ((BackendLoad{true, 3, 5, 2}).load(), 7);
  EXPECT_EQ((BackendLoad{true, 9, 5, 2}).load(), 9);
  EXPECT_EQ((BackendLoad{true, 0, 1, -1}).load(), 1);
}

TEST(Router, RoundRobinSkipsIneligibleBackends) {
  Router r({.policy = Policy::kRoundRobin}, 3);
  auto l = loads({0, 0, 0});
  std::vector<int> got;
  for (int i = 0; i < 4; ++i) got.push_back(r.choose("k", l).backend);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0}));
  l[1].eligible = false;
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(r.choose("k", l).backend);
  EXPECT_EQ(got, (std::vector<int>{2, 0, 2, 0}));
  for (auto& b : l) b.eligible = false;
  EXPECT_EQ(r.choose("k", l).backend, -1);
}

TEST(Router, LeastLoadPicksTheLeastLoadedAndRotatesAmongTies) {
  Router r({.policy = Policy::kLeastLoad}, 3);
  EXPECT_EQ(r.choose("k", loads({4, 1, 2})).backend, 1);
  auto l = loads({4, 1, 2});
  l[1].running = 5;  // the report says backend 1 is busy after all
  EXPECT_EQ(r.choose("k", l).backend, 2);
  std::vector<int> got;
  for (int i = 0; i < 3; ++i) got.push_back(r.choose("k", loads({0, 0, 0})).backend);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
}

TEST(Router, CacheAwareFollowsTheLongestMatchAboveTheThreshold) {
  Router r({.policy = Policy::kCacheAware, .cache_threshold = 0.5}, 3);
  const std::string convo = "system: be brief\nuser: tell me about rivers\n";
  r.insert(2, convo);
  r.insert(1, "system: be brief\n");
  // Turn 2 extends turn 1: backend 2 has most of it, though it is busier.
  const std::string turn2 = convo + "assistant: they flow\nuser: and lakes?\n";
  RouteDecision d = r.choose(turn2, loads({0, 0, 3}));
  EXPECT_EQ(d.backend, 2);
  EXPECT_TRUE(d.by_affinity);
  EXPECT_EQ(d.match_chars, convo.size());
  // Below the threshold: least loaded (ties: smaller tree, then lower index).
  Router strict({.policy = Policy::kCacheAware, .cache_threshold = 0.9}, 3);
  strict.insert(2, convo);
  strict.insert(1, "x");
  d = strict.choose(turn2, loads({1, 1, 0}));
  EXPECT_EQ(d.backend, 2);  // least loaded; it happens to hold the prefix
  EXPECT_FALSE(d.by_affinity);
  EXPECT_EQ(d.match_chars, convo.size());
  d = strict.choose(turn2, loads({1, 1, 1}));
  EXPECT_EQ(d.backend, 0);  // all equal: the empty tree
  EXPECT_EQ(d.match_chars, 0u);
}

TEST(Router, CacheAwareBalancesOnceTheImbalancePassesBothThresholds) {
  PolicyConfig c;
  c.policy = Policy::kCacheAware;
  c.balance_abs_threshold = 4;
  c.balance_rel_threshold = 1.5;
  Router r(c, 2);
  const std::string key = "a long shared conversation prefix";
  r.insert(0, key);
  // Within the absolute threshold: affinity.
  EXPECT_EQ(r.choose(key, loads({4, 0})).backend, 0);
  // Past both: least loaded.
  RouteDecision d = r.choose(key, loads({5, 0}));
  EXPECT_EQ(d.backend, 1);
  EXPECT_FALSE(d.by_affinity);
  EXPECT_EQ(d.match_chars, 0u);
  // Past the absolute one but not the relative one (15 <= 1.5 * 10): affinity.
  EXPECT_EQ(r.choose(key, loads({15, 10})).backend, 0);
  EXPECT_EQ(r.choose(key, loads({16, 10})).backend, 1);
  // Ineligible backends do not count toward the imbalance.
  auto l = loads({5, 0});
  l[1].eligible = false;
  EXPECT_EQ(r.choose(key, l).backend, 0);
}

TEST(Router, TrimAndClearChangeWhereRequestsGo) {
  Router r({.policy = Policy::kCacheAware, .cache_threshold = 0.5}, 2);
  const std::string key(100, 'k');
  r.insert(1, key);
  EXPECT_EQ(r.choose(key, loads({0, 0})).backend, 1);
  r.trim(1, key, 40);  // backend 1 evicted most of it: below the threshold now
  RouteDecision d = r.choose(key, loads({0, 0}));
  EXPECT_FALSE(d.by_affinity);
  EXPECT_EQ(d.backend, 0);  // smaller tree
  r.insert(0, key);
  r.clear(0);
  EXPECT_EQ(r.tree(0).n_chars(), 0u);
  EXPECT_EQ(r.tree(1).n_chars(), 40u);
}

TEST(Router, MultiTurnConversationsStickToOneBackendEach) {
  Router r({.policy = Policy::kCacheAware}, 4);
  std::vector<std::string> convos(8);
  std::vector<int> home(8, -1);
  std::vector<int64_t> in_flight(4, 0);
  for (int turn = 0; turn < 5; ++turn) {
    for (size_t c = 0; c < convos.size(); ++c) {
      convos[c] += "user " + std::to_string(c) + " turn " + std::to_string(turn) + ": hello\n";
      auto l = loads(in_flight);
      RouteDecision d = r.choose(convos[c], l);
      ASSERT_GE(d.backend, 0);
      if (turn == 0) {
        home[c] = d.backend;
        ++in_flight[size_t(d.backend)];  // conversations spread by load
      } else {
        EXPECT_EQ(d.backend, home[c]) << "conversation " << c << " turn " << turn;
      }
      r.insert(d.backend, convos[c]);
    }
  }
  for (int64_t f : in_flight) EXPECT_EQ(f, 2);
}

}  // namespace
}  // namespace sluice::router
