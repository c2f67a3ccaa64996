// Replays: the Mooncake trace (real file: prefix sharing from equal hash ids, exact and scaled
// lengths, arrival times, errors with line numbers), the multi-turn chat dataset (prefix growth,
// arrival times), the drawable token ids, token-id and chat request bodies, and run_load
// sending at dataset-given times.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <set>

#include "loadgen/client.h"
#include "loadgen/dataset.h"
#include "loadgen/runner.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice::loadgen {
namespace {

constexpr const char* kConversationTrace = "testdata/traces/mooncake_conversation_trace.jsonl";

// The first lines of mooncake_conversation_trace.jsonl (checked against the file below).
struct TraceLine {
  int64_t timestamp_ms, input_length, output_length;
  std::vector<int64_t> hash_ids;
};

std::vector<TraceLine> read_trace(const std::string& path, size_t n) {
  std::ifstream f(path);
  std::vector<TraceLine> out;
  for (std::string line; out.size() < n && std::getline(f, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back({j["timestamp"], j["input_length"], j["output_length"], j["hash_ids"]});
  }
  return out;
}

bool same_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t n) {
  return a.size() >= n && b.size() >= n && std::equal(a.begin(), a.begin() + long(n), b.begin());
}

TEST(LoadgenMooncake, RealTraceLengthsBlocksAndArrivals) {
  SLUICE_REQUIRE_SHARED(path, kConversationTrace);
  const std::vector<TraceLine> lines = read_trace(path, 40);
  ASSERT_EQ(lines.size(), 40u);
  MooncakeParams p;
  p.path = path;
  p.n_prompts = 40;
  p.vocab_size = 32000;
  auto d = load_mooncake(p, nullptr);
  ASSERT_TRUE(d.ok()) << d.message();
  ASSERT_EQ(d->requests.size(), 40u);
  EXPECT_TRUE(d->exact_token_counts);
  // The file's timestamps are sorted, so requests keep file order.
  for (size_t i = 0; i < lines.size(); ++i) {
    const RequestSpec& r = d->requests[i];
    EXPECT_EQ(r.send_as, SendAs::kTokenIds);
    EXPECT_EQ(int64_t(r.prompt_ids.size()), lines[i].input_length) << i;
    EXPECT_EQ(r.input_tokens, lines[i].input_length);
    EXPECT_EQ(r.output_tokens, lines[i].output_length);
    EXPECT_DOUBLE_EQ(r.arrival_s, double(lines[i].timestamp_ms - lines[0].timestamp_ms) / 1000);
    for (int32_t id : r.prompt_ids) {
      ASSERT_GE(id, 32000 / 16);
      ASSERT_LT(id, 32000 - 32000 / 16);
    }
  }
  // Block k of request i equals block k' of request j exactly when their hash ids are equal.
  size_t equal_pairs = 0, different_pairs = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    for (size_t j = i + 1; j < lines.size(); ++j) {
      const size_t n = std::min(lines[i].hash_ids.size(), lines[j].hash_ids.size());
      for (size_t k = 0; k + 1 < n; ++k) {  // full blocks only (the last may be cut)
        const auto a = d->requests[i].prompt_ids.begin() + long(k * 512);
        const auto b = d->requests[j].prompt_ids.begin() + long(k * 512);
        const bool eq = std::equal(a, a + 512, b);
        EXPECT_EQ(eq, lines[i].hash_ids[k] == lines[j].hash_ids[k]) << i << " " << j << " " << k;
        (eq ? equal_pairs : different_pairs)++;
      }
    }
  }
  EXPECT_GT(equal_pairs, 0u);  // the trace's first lines share their first block (hash id 0)
  EXPECT_GT(different_pairs, 0u);
  // Block ids are a pure function of (hash id, seed): the last block is a cut of the full one.
  const TraceLine& l0 = lines[0];
  const std::vector<int32_t> last =
      mooncake_block(l0.hash_ids.back(), 0, 512, *make_token_id_space(32000, nullptr));
  const size_t tail = size_t(l0.input_length) - (l0.hash_ids.size() - 1) * 512;
  EXPECT_TRUE(std::equal(last.begin(), last.begin() + long(tail),
                         d->requests[0].prompt_ids.end() - long(tail)));
  // Another seed: other ids, the same structure.
  p.seed = 5;
  auto other = load_mooncake(p, nullptr);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->requests[0].prompt_ids, d->requests[0].prompt_ids);
  EXPECT_TRUE(same_prefix(other->requests[0].prompt_ids, other->requests[1].prompt_ids, 512));
}

TEST(LoadgenMooncake, ScalingKeepsThePrefixStructure) {
  SLUICE_REQUIRE_SHARED(path, kConversationTrace);
  const std::vector<TraceLine> lines = read_trace(path, 20);
  MooncakeParams p;
  p.path = path;
  p.n_prompts = 20;
  p.vocab_size = 512;
  p.scale_tokens = 0.01;  // block 5 tokens (512 * 0.01 = 5.12)
  p.scale_time = 10;
  auto d = load_mooncake(p, nullptr);
  ASSERT_TRUE(d.ok()) << d.message();
  ASSERT_EQ(d->requests.size(), 20u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const RequestSpec& r = d->requests[i];
    const int64_t want =
        std::min<int64_t>(std::max<int64_t>(1, std::llround(double(lines[i].input_length) * 0.01)),
                          int64_t(lines[i].hash_ids.size()) * 5);
    EXPECT_EQ(int64_t(r.prompt_ids.size()), want) << i;
    EXPECT_EQ(r.output_tokens,
              std::max<int64_t>(1, std::llround(double(lines[i].output_length) * 0.01)));
    EXPECT_DOUBLE_EQ(r.arrival_s, double(lines[i].timestamp_ms - lines[0].timestamp_ms) / 100);
  }
  // Lines 0 and 1 share hash id 0 only: 5 equal ids, then different ones.
  ASSERT_EQ(lines[0].hash_ids[0], lines[1].hash_ids[0]);
  ASSERT_NE(lines[0].hash_ids[1], lines[1].hash_ids[1]);
  EXPECT_TRUE(same_prefix(d->requests[0].prompt_ids, d->requests[1].prompt_ids, 5));
  EXPECT_FALSE(same_prefix(d->requests[0].prompt_ids, d->requests[1].prompt_ids, 10));
  EXPECT_NE(d->description.find("block 5"), std::string::npos) << d->description;

  // A window: arrivals count from its first line.
  p.start = 10;
  p.n_prompts = 3;
  auto w = load_mooncake(p, nullptr);
  ASSERT_TRUE(w.ok()) << w.message();
  ASSERT_EQ(w->requests.size(), 3u);
  EXPECT_EQ(w->requests[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(w->requests[2].arrival_s,
                   double(lines[12].timestamp_ms - lines[10].timestamp_ms) / 100);
}

TEST(LoadgenMooncake, TokenizerSkipsControlTokens) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto tok = Tokenizer::load(model);
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto space = make_token_id_space(0, &*tok);
  ASSERT_TRUE(space.ok()) << space.message();
  EXPECT_EQ(space->vocab_size, tok->vocab().n_tokens());
  ASSERT_FALSE(space->ids.empty());
  for (int32_t id : space->ids) {
    EXPECT_FALSE(tok->vocab().has_attr(id, kAttrControl | kAttrUnknown | kAttrUnused)) << id;
  }
  EXPECT_FALSE(make_token_id_space(0, nullptr).ok());
  EXPECT_NE(make_token_id_space(0, nullptr).message().find("--vocab-size"), std::string::npos);
  EXPECT_FALSE(make_token_id_space(tok->vocab().n_tokens() + 1, &*tok).ok());
}

TEST(LoadgenMooncake, ParseOneLine) {
  const TokenIdSpace space = *make_token_id_space(1000, nullptr);
  MooncakeParams p;
  p.scale_tokens = 0.5;
  auto r = parse_mooncake_line(
      R"({"timestamp": 12.5, "input_length": 600, "output_length": 9, "hash_ids": [3, 4]})", p,
      space, "t:1: ");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->timestamp_ms, 12.5);
  EXPECT_EQ(r->request.input_tokens, 300);
  EXPECT_EQ(r->request.output_tokens, 5);
  ASSERT_EQ(r->request.prompt_ids.size(), 300u);
  const std::vector<int32_t> b3 = mooncake_block(3, 0, 256, space);
  EXPECT_TRUE(std::equal(b3.begin(), b3.end(), r->request.prompt_ids.begin()));
  EXPECT_EQ(parse_mooncake_line("[]", p, space, "t:1: ").message(), "t:1: not a JSON object");
}

TEST(LoadgenMooncake, BadLinesNameTheLine) {
  test::TempDir dir;
  const std::string good =
      R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})";
  struct Case {
    std::string line, want;
  };
  const std::vector<Case> cases = {
      {"not json", "not a JSON object"},
      {R"({"input_length": 600, "output_length": 5, "hash_ids": [1, 2]})", "missing 'timestamp'"},
      {R"({"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})",
       "'timestamp' must be a number >= 0"},
      {R"({"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []})",
       "'input_length' must be an integer >= 1"},
      {R"({"timestamp": 0, "input_length": 600, "output_length": 5})", "missing 'hash_ids'"},
      {R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]})",
       "'hash_ids' has 1 ids, input_length 600 needs 2"},
      {R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]})",
       "'hash_ids' must hold integers >= 0"},
      {R"({"timestamp": 0, "input_length": 600, "output_length": 1.5, "hash_ids": [1, 2]})",
       "'output_length' must be an integer >= 1"},
      // Found by fuzz/loadgen_parse_fuzz: ceil(input_length / 512) overflowed (undefined
      // behaviour) for lengths near INT64_MAX.
      {R"({"timestamp": 0, "input_length": 9223372036854775807, "output_length": 5,)"
       R"( "hash_ids": [1, 2]})",
       "'hash_ids' has 2 ids, input_length 9223372036854775807 needs 18014398509481984"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.path("t.jsonl");
    std::ofstream(path) << good << "\n\n" << c.line << "\n";
    MooncakeParams p;
    p.path = path;
    p.vocab_size = 1000;
    auto d = load_mooncake(p, nullptr);
    ASSERT_FALSE(d.ok()) << c.line;
    EXPECT_NE(d.message().find(path + ":3: "), std::string::npos) << d.message();
    EXPECT_NE(d.message().find(c.want), std::string::npos) << d.message();
  }
  MooncakeParams p;
  p.path = dir.path("missing.jsonl");
  p.vocab_size = 1000;
  EXPECT_NE(load_mooncake(p, nullptr).message().find("cannot open trace"), std::string::npos);
  p.path = dir.path("t.jsonl");
  p.scale_tokens = 0;
  EXPECT_NE(load_mooncake(p, nullptr).message().find("--scale-tokens"), std::string::npos);
}

TEST(LoadgenMultiturn, ConversationsGrowTurnByTurn) {
  MultiturnParams p;
  p.n_conversations = 3;
  p.n_turns = 4;
  p.system_len = 20;
  p.user_len = 7;
  p.output_len = 5;
  p.think_time_s = 2;
  p.turn_time_s = 0.5;
  p.vocab_size = 1000;
  auto d = make_multiturn(p, nullptr);
  ASSERT_TRUE(d.ok()) << d.message();
  ASSERT_EQ(d->requests.size(), 12u);
  // All conversations start at 0: turn t of every conversation at t * 2.5 s, sorted by time.
  for (size_t i = 0; i < d->requests.size(); ++i) {
    EXPECT_DOUBLE_EQ(d->requests[i].arrival_s, double(i / 3) * 2.5) << i;
    EXPECT_EQ(d->requests[i].send_as, SendAs::kChat);
  }
  const std::string system = d->requests[0].messages[0]["content"];
  for (size_t c = 0; c < 3; ++c) {
    for (size_t t = 0; t < 4; ++t) {
      const RequestSpec& r = d->requests[t * 3 + c];
      ASSERT_EQ(r.messages.size(), 2 + 2 * t);
      EXPECT_EQ(r.messages[0]["role"], "system");
      EXPECT_EQ(r.messages[0]["content"], system);  // shared by every conversation
      EXPECT_EQ(r.messages.back()["role"], "user");
      EXPECT_EQ(r.input_tokens, int64_t(20 + 7 * (t + 1) + 5 * t));
      EXPECT_EQ(int64_t(r.prompt_ids.size()), r.input_tokens);
      EXPECT_EQ(r.output_tokens, 5);
      if (t == 0) continue;
      const RequestSpec& prev = d->requests[(t - 1) * 3 + c];
      // Turn t = turn t-1's messages + a reply + a new user message; the ids extend likewise.
      for (size_t m = 0; m < prev.messages.size(); ++m) EXPECT_EQ(r.messages[m], prev.messages[m]);
      EXPECT_EQ(r.messages[prev.messages.size()]["role"], "assistant");
      EXPECT_TRUE(same_prefix(r.prompt_ids, prev.prompt_ids, prev.prompt_ids.size()));
    }
  }
  // Conversations differ after the system prompt.
  EXPECT_NE(d->requests[0].messages[1], d->requests[1].messages[1]);
  EXPECT_TRUE(same_prefix(d->requests[0].prompt_ids, d->requests[1].prompt_ids, 20));

  // Poisson starts at 4 conversations/s: seeded, sorted, turns still 2.5 s apart.
  p.rate = 4;
  p.n_conversations = 50;
  auto a = make_multiturn(p, nullptr);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->requests.size(), 200u);
  for (size_t i = 1; i < a->requests.size(); ++i)
    EXPECT_GE(a->requests[i].arrival_s, a->requests[i - 1].arrival_s);
  EXPECT_GT(a->requests.back().arrival_s, 7.5);  // the last conversation starts after 0
  auto b = make_multiturn(p, nullptr);
  for (size_t i = 0; i < a->requests.size(); ++i) {
    EXPECT_EQ(a->requests[i].arrival_s, b->requests[i].arrival_s);
    EXPECT_EQ(a->requests[i].messages, b->requests[i].messages);
  }
  // Without a vocabulary: no stand-in ids, still sendable.
  p.vocab_size = 0;
  auto no_ids = make_multiturn(p, nullptr);
  ASSERT_TRUE(no_ids.ok());
  EXPECT_TRUE(no_ids->requests[0].prompt_ids.empty());
  p.n_turns = 0;
  EXPECT_FALSE(make_multiturn(p, nullptr).ok());
}

TEST(LoadgenReplayClient, TokenIdsGoToCompletionsAndChatToChat) {
  ClientConfig c;
  c.endpoint = ApiKind::kChat;
  RequestSpec r;
  r.prompt_ids = {5, 6, 7};
  r.send_as = SendAs::kTokenIds;
  r.output_tokens = 3;
  EXPECT_EQ(api_kind(c, r), ApiKind::kCompletions);
  const nlohmann::json body = request_body(c, r);
  EXPECT_EQ(body["prompt"], nlohmann::json::array({5, 6, 7}));
  EXPECT_FALSE(body.contains("messages"));
  r.send_as = SendAs::kChat;
  r.messages = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  c.endpoint = ApiKind::kCompletions;
  EXPECT_EQ(api_kind(c, r), ApiKind::kChat);
  EXPECT_EQ(request_body(c, r)["messages"], r.messages);
  r.send_as = SendAs::kEndpoint;
  EXPECT_EQ(api_kind(c, r), ApiKind::kCompletions);
}

TEST(LoadgenRunner, DatasetArrivalsReplaceTheRate) {
  // Out of order on purpose: dispatched by time, records returned in request order.
  std::vector<RequestSpec> reqs(4);
  const double due[] = {0.30, 0.0, 0.15, 0.15};
  for (size_t i = 0; i < 4; ++i) {
    reqs[i].input_tokens = int64_t(i);
    reqs[i].arrival_s = due[i];
  }
  LoadParams p;
  p.rate = 1000;  // ignored
  EXPECT_TRUE(has_dataset_arrivals(reqs));
  EXPECT_EQ(send_schedule(reqs, p), std::vector<double>(std::begin(due), std::end(due)));
  std::mutex mu;
  std::vector<int64_t> sent_order;
  const std::vector<RequestRecord> recs = run_load(reqs, p, [&](const RequestSpec& s, auto t0) {
    RequestRecord r;
    r.ok = true;
    r.input_tokens = s.input_tokens;
    r.start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> g(mu);
    sent_order.push_back(s.input_tokens);
    return r;
  });
  ASSERT_EQ(recs.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(recs[i].input_tokens, int64_t(i));
    EXPECT_GE(recs[i].start_s, due[i]) << i;
    EXPECT_LT(recs[i].start_s, due[i] + 0.25) << i;  // generous: a loaded 2-core machine
  }
  EXPECT_EQ(sent_order.front(), 1);
  EXPECT_EQ(sent_order.back(), 0);

  // Without arrival_s: the rate's schedule.
  for (RequestSpec& r : reqs) r.arrival_s = -1;
  EXPECT_FALSE(has_dataset_arrivals(reqs));
  EXPECT_EQ(send_schedule(reqs, p), arrival_schedule(4, 1000, 1.0, 0));
}

TEST(LoadgenRunner, DatasetArrivalsKeepTheConcurrencyCap) {
  std::vector<RequestSpec> reqs(12);
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].arrival_s = 0.001 * double(i);
  LoadParams p;
  p.max_concurrency = 2;
  std::mutex mu;
  int now = 0, max = 0;
  run_load(reqs, p, [&](const RequestSpec&, auto) {
    {
      std::lock_guard<std::mutex> g(mu);
      max = std::max(max, ++now);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> g(mu);
    --now;
    return RequestRecord{};
  });
  EXPECT_LE(max, 2);
}

}  // namespace
}  // namespace sluice::loadgen
