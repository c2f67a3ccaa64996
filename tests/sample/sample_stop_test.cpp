// StopMatcher: stops across piece boundaries, hold-back and release, earliest stop wins,
// UTF-8, flush; and a randomized check that the outcome never depends on how text is split.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sample/rng.h"
#include "sample/stop.h"

namespace sluice {
namespace {

struct Fed {
  std::vector<std::string> emitted;  // text returned by each push
  std::string all;                   // everything emitted, flush included
  int32_t stop_index = -1;
};

Fed feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  Fed r;
  for (const std::string& p : pieces) {
    StopMatcher::Output o = m.push(p);
    r.emitted.push_back(o.text);
    r.all += o.text;
    if (o.stopped()) r.stop_index = o.stop_index;
  }
  r.all += m.flush();
  return r;
}

TEST(SampleStop, StopSplitAcrossPieces) {
  StopMatcher m({"lo W"});
  Fed r = feed(m, {"Hel", "lo W", "orld"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"He", "l", ""}));  // "l" held, then released
  EXPECT_EQ(r.all, "Hel");
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_TRUE(m.stopped());
}

TEST(SampleStop, PartialPrefixHeldThenReleased) {
  StopMatcher m({"</answer>"});
  StopMatcher::Output a = m.push("x </ans");
  EXPECT_EQ(a.text, "x ");
  EXPECT_EQ(m.n_held(), 5u);
  StopMatcher::Output b = m.push("wer");
  EXPECT_EQ(b.text, "");
  StopMatcher::Output c = m.push("s!");  // "</answers!" can no longer match
  EXPECT_EQ(c.text, "</answers!");
  EXPECT_FALSE(c.stopped());
  EXPECT_EQ(m.n_held(), 0u);
  EXPECT_EQ(m.flush(), "");
}

TEST(SampleStop, HeldSuffixRestartsInsideAFailedPrefix) {
  // "aab" with stop "aaab": after "aa" + "a" then "a", the held part shifts by one.
  StopMatcher m({"aaab"});
  Fed r = feed(m, {"aa", "a", "a", "b", "tail"});
  EXPECT_EQ(r.all, "a");
  EXPECT_EQ(r.stop_index, 0);
}

TEST(SampleStop, MultipleStopsEarliestWins) {
  StopMatcher m({"World", "o W", "\n\n"});
  Fed r = feed(m, {"Hello World"});
  EXPECT_EQ(r.all, "Hell");  // "o W" ends before "World" does
  EXPECT_EQ(r.stop_index, 1);

  // Same end: the earlier start (longer stop) wins.
  StopMatcher m2({"d", "World"});
  Fed r2 = feed(m2, {"Hello Wor", "ld!"});
  EXPECT_EQ(r2.all, "Hello ");
  EXPECT_EQ(r2.stop_index, 1);

  // List order does not matter.
  StopMatcher m3({"\n\n", "o W", "World"});
  Fed r3 = feed(m3, {"Hel", "lo", " ", "Wor", "ld"});
  EXPECT_EQ(r3.all, "Hell");
  EXPECT_EQ(r3.stop_index, 1);
}

TEST(SampleStop, StopAtVeryStart) {
  StopMatcher m({"STOP"});
  Fed r = feed(m, {"STOP and more", "ignored"});
  EXPECT_EQ(r.all, "");
  EXPECT_EQ(r.stop_index, 0);
  // After the stop, pushes return nothing and keep reporting it.
  StopMatcher::Output o = m.push("more");
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(o.stop_index, 0);
}

TEST(SampleStop, EmptyStopListPassesEverything) {
  StopMatcher m({});
  Fed r = feed(m, {"a", "", "bc", "\xE2\x82\xAC"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"a", "", "bc", "\xE2\x82\xAC"}));
  EXPECT_EQ(r.stop_index, -1);
  StopMatcher e({"", ""});  // empty strings never match
  EXPECT_EQ(feed(e, {"xyz"}).all, "xyz");
}

TEST(SampleStop, FlushReturnsHeldText) {
  StopMatcher m({"###"});
  StopMatcher::Output o = m.push("answer ##");
  EXPECT_EQ(o.text, "answer ");
  EXPECT_EQ(m.flush(), "##");
  EXPECT_EQ(m.flush(), "");
}

TEST(SampleStop, Utf8MultibyteStops) {
  // "。" is E3 80 82; "🛑" is F0 9F 9B 91.
  StopMatcher m({"\xE3\x80\x82", "\xF0\x9F\x9B\x91"});
  Fed r = feed(m, {"你好", "\xE3\x80\x82", "再见"});
  EXPECT_EQ(r.all, "你好");
  EXPECT_EQ(r.stop_index, 0);

  // A stop whose bytes arrive split (byte-level pieces): held, then matched.
  StopMatcher m2({"\xF0\x9F\x9B\x91"});
  Fed r2 = feed(m2, {"ok ", "\xF0\x9F", "\x9B", "\x91", " more"});
  EXPECT_EQ(r2.emitted, (std::vector<std::string>{"ok ", "", "", "", ""}));
  EXPECT_EQ(r2.all, "ok ");
  EXPECT_EQ(r2.stop_index, 0);

  // A different character sharing the lead bytes is released whole.
  StopMatcher m3({"\xF0\x9F\x9B\x91"});
  Fed r3 = feed(m3, {"\xF0\x9F", "\x98\x80", "!"});  // 😀
  EXPECT_EQ(r3.emitted, (std::vector<std::string>{"", "\xF0\x9F\x98\x80", "!"}));
  EXPECT_EQ(r3.stop_index, -1);

  // Multi-character stop "。\n" split between characters.
  StopMatcher m4({"\xE3\x80\x82\n"});
  Fed r4 = feed(m4, {"终", "\xE3\x80\x82", "\n", "x"});
  EXPECT_EQ(r4.emitted, (std::vector<std::string>{"终", "", "", ""}));
  EXPECT_EQ(r4.all, "终");
}

TEST(SampleStop, IncludeStop) {
  StopMatcher m({"lo W"}, /*include_stop=*/true);
  Fed r = feed(m, {"Hel", "lo W", "orld"});
  EXPECT_EQ(r.all, "Hello W");
  EXPECT_EQ(r.stop_index, 0);
}

// Whatever the split, the emitted text is the prefix before the earliest-ending stop (or all
// of it), and nothing is lost.
TEST(SampleStop, OutcomeIndependentOfSplit) {
  const std::vector<std::string> stops = {"abab", "bba", "ca", "abc"};
  Xoshiro256 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng.next() % 24);
    for (int i = 0; i < len; ++i) text += static_cast<char>('a' + rng.next() % 3);

    // Reference: scan end positions; the first end at which some stop ends wins; among
    // stops ending there, the longest.
    std::string want = text;
    int32_t want_index = -1;
    for (size_t end = 1; end <= text.size() && want_index < 0; ++end) {
      size_t best_len = 0;
      for (size_t i = 0; i < stops.size(); ++i) {
        const std::string& s = stops[i];
        if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 &&
            s.size() > best_len) {
          best_len = s.size();
          want_index = static_cast<int32_t>(i);
        }
      }
      if (want_index >= 0) want = text.substr(0, end - best_len);
    }

    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng.next() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m(stops);
    Fed r = feed(m, pieces);
    ASSERT_EQ(r.all, want) << "text '" << text << "'";
    ASSERT_EQ(r.stop_index, want_index) << "text '" << text << "'";
  }
}

}  // namespace
}  // namespace sluice
