// `sluice bench serve` black-box: the binary against a real `sluice serve` child process on
// stories260K (skipped without ../shared), and against nothing at all.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "cli/cli_util.h"
#include "server/server_test_util.h"

namespace sluice::test {
namespace {

std::unique_ptr<ServeProcess> start_stories(const std::string& model,
                                            std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.05"};
  args.insert(args.end(), extra.begin(), extra.end());
  return ServeProcess::start(args);
}

std::string url(int port) {
  return "http://127.0.0.1:" + std::to_string(port);
}

// Percentiles in order; TTFT and E2EL positive. TPOT and ITL may be 0 on stories260K: the
// server can send several tokens in one write faster than the clock ticks between reads.
void expect_ordered(const json& d, const std::string& name) {
  const bool may_be_zero = name == "tpot_ms" || name == "itl_ms";
  EXPECT_GE(d["mean"].get<double>(), 0) << name;
  if (!may_be_zero) {
    EXPECT_GT(d["mean"].get<double>(), 0) << name;
    EXPECT_GT(d["median"].get<double>(), 0) << name;
  }
  EXPECT_LE(d["median"].get<double>(), d["p90"].get<double>()) << name;
  EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>()) << name;
}

TEST(BenchServe, CompletesEveryRequestAgainstSluiceServe) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = start_stories(model);
  ASSERT_TRUE(p);
  const CommandResult r =
      run_sluice("bench serve --url " + url(p->port) +
                 " --num-prompts 8 --rate inf --input-len 32 --output-len 16 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  const json& run = j["runs"][0];
  EXPECT_EQ(run["completed"], 8) << run["errors"].dump();
  EXPECT_EQ(run["failed"], 0);
  EXPECT_EQ(run["total_output_tokens"], 8 * 16);
  EXPECT_EQ(run["request_rate"], "inf");
  // Discovered from GET /v1/models: the file's path, or its stem where the server lists that.
  const std::string listed = run["model"];
  EXPECT_TRUE(listed == model || model.ends_with("/" + listed + ".gguf")) << listed;
  EXPECT_EQ(run["token_counts"], "approximate");
  EXPECT_NE(r.err.find("prompt lengths are approximate"), std::string::npos) << r.err;
  EXPECT_GT(run["total_input_tokens"].get<int64_t>(),
            8 * 32);  // the server's usage: words are >= 1 token
  EXPECT_GT(run["duration_s"].get<double>(), 0);
  for (const char* k :
       {"request_throughput", "input_throughput", "output_throughput", "total_token_throughput"}) {
    EXPECT_GT(run[k].get<double>(), 0) << k;
  }
  EXPECT_NEAR(run["output_throughput"].get<double>(), 128 / run["duration_s"].get<double>(), 1e-6);
  for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"}) expect_ordered(run[k], k);
  EXPECT_EQ(run["ttft_ms"]["n"], 8);
  EXPECT_EQ(run["tpot_ms"]["n"], 8);
  EXPECT_GT(run["itl_ms"]["n"].get<int>(), 0);
  EXPECT_LE(run["itl_ms"]["n"].get<int>(), 8 * 15);
  EXPECT_GE(run["e2el_ms"]["p99"].get<double>(), run["ttft_ms"]["p99"].get<double>() * 0.999);
  EXPECT_TRUE(run["errors"].empty());
}

TEST(BenchServe, ExactLengthsSloAndChatEndpoint) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  TempDir tmp;
  const std::string tmpl = tmp.path("plain.jinja");
  std::ofstream(tmpl) << kPlainTemplate;
  auto p = start_stories(model, {"--chat-template", tmpl});
  ASSERT_TRUE(p);
  CommandResult r = run_sluice("bench serve --url " + url(p->port) + " --tokenizer " + model +
                               " --num-prompts 4 --input-len 24 --output-len 8 --rate 50 --seed 3"
                               " --slo-ttft-ms 60000 --slo-tpot-ms 60000 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  json run = json::parse(r.out)["runs"][0];
  EXPECT_EQ(run["completed"], 4) << run["errors"].dump();
  EXPECT_EQ(run["token_counts"], "exact");
  EXPECT_EQ(run["total_input_tokens"], 4 * (24 + 1));  // exact prompts + the BOS the server adds
  EXPECT_EQ(run["total_output_tokens"], 4 * 8);
  EXPECT_EQ(run["request_rate"], 50.0);
  EXPECT_EQ(run["good_requests"], 4);  // a minute is within anyone's SLO
  EXPECT_NEAR(run["good_percent"].get<double>(), 100, 1e-9);

  r = run_sluice(
      "bench serve --url " + url(p->port) +
      " --endpoint chat --num-prompts 3 --output-len 8 --concurrency 2 --output-format md");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("/v1/chat/completions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Successful requests | 3 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Failed requests | 0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Total generated tokens | 24 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Max concurrency | 2 |"), std::string::npos) << r.out;
}

TEST(BenchServe, SweepWritesSvgAndJson) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = start_stories(model);
  ASSERT_TRUE(p);
  TempDir tmp;
  const std::string out = tmp.path("results.json"), svg = tmp.path("curve.svg");
  const CommandResult r =
      run_sluice("bench serve --url " + url(p->port) +
                 " --sweep 4,inf --num-prompts 4 --input-len 16 --output-len 8 --out " + out +
                 " --plot " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("| metric | rate 4 | rate inf |"), std::string::npos) << r.out;

  const json j = json::parse(read_file(out), nullptr, false);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["request_rate"], 4.0);
  EXPECT_EQ(j["runs"][1]["request_rate"], "inf");
  for (const json& run : j["runs"]) {
    EXPECT_EQ(run["completed"], 4) << run["errors"].dump();
    ASSERT_EQ(run["requests"].size(), 4u);
    for (const json& q : run["requests"]) {
      EXPECT_TRUE(q["ok"].get<bool>()) << q["error"];
      EXPECT_EQ(q["output_tokens"], 8);
      EXPECT_GT(q["ttft_ms"].get<double>(), 0);
      EXPECT_GE(q["e2el_ms"].get<double>(), q["ttft_ms"].get<double>());
      EXPECT_LE(q["itl_ms"].size(), 7u);
      EXPECT_EQ(q["error"], "");
    }
  }
  const std::string s = read_file(svg);
  EXPECT_EQ(s.rfind("<?xml", 0), 0u) << s.substr(0, 100);
  EXPECT_NE(s.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 7), "</svg>\n");
  size_t polylines = 0, circles = 0;
  for (size_t at = s.find("<polyline"); at != std::string::npos; at = s.find("<polyline", at + 1))
    ++polylines;
  for (size_t at = s.find("<circle"); at != std::string::npos; at = s.find("<circle", at + 1))
    ++circles;
  // 3 series (TPOT p50, TPOT p99, TTFT p99) x 2 rates; a latency of 0 has no place on the log
  // axis and is left out (stories260K is fast enough that all 8 tokens of a request can arrive
  // in one read, a TPOT of 0).
  size_t points = 0;
  std::set<std::string> series;
  for (const json& run : j["runs"]) {
    for (auto [metric, stat] :
         {std::pair{"tpot_ms", "median"}, {"tpot_ms", "p99"}, {"ttft_ms", "p99"}}) {
      if (run[metric][stat].get<double>() <= 0) continue;
      ++points;
      series.insert(std::string(metric) + stat);
    }
  }
  EXPECT_GE(points, 2u) << "TTFT p99 is positive at both rates";
  EXPECT_EQ(polylines, series.size());
  EXPECT_EQ(circles, points);
  EXPECT_NE(s.find("rate inf"), std::string::npos);
}

TEST(BenchServe, MooncakeReplayReportsPrefixHits) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  SLUICE_REQUIRE_SHARED(trace, "testdata/traces/mooncake_conversation_trace.jsonl");
  auto p = start_stories(model);
  ASSERT_TRUE(p);
  // The first 6 lines share hash id 0 only (block 0.04 x 512 = 20 ids): one at a time, each
  // request after the first finds one 16-token server block of it in the cache.
  const CommandResult r = run_sluice(
      "bench serve --url " + url(p->port) + " --dataset mooncake:" + trace +
      " --num-prompts 6 --scale-tokens 0.04 --scale-time 0.01 --concurrency 1 --tokenizer " +
      model + " --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json run = json::parse(r.out)["runs"][0];
  EXPECT_EQ(run["completed"], 6) << run["errors"].dump();
  EXPECT_EQ(run["arrivals"], "dataset");
  // Token ids are sent as they are (no BOS): round(0.04 x input_length) each.
  EXPECT_EQ(run["total_input_tokens"], 270 + 293 + 289 + 92 + 270 + 193);
  EXPECT_EQ(run["total_output_tokens"], 20 + 20 + 32 + 13 + 1 + 7);
  const json& pc = run["prefix_cache"];
  ASSERT_TRUE(pc.is_object()) << r.out;
  EXPECT_EQ(pc["hit_blocks"], 5.0);
  EXPECT_EQ(pc["hit_tokens"], 80.0);
  EXPECT_EQ(pc["prompt_tokens"], 1407.0);
  EXPECT_GT(pc["queried_blocks"].get<double>(), 5);
}

TEST(BenchServe, MultiturnReusesConversationsAndNaWithoutMetrics) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  TempDir tmp;
  const std::string tmpl = tmp.path("plain.jinja");
  std::ofstream(tmpl) << kPlainTemplate;
  auto p = start_stories(model, {"--chat-template", tmpl});
  ASSERT_TRUE(p);
  const std::string args = "bench serve --url " + url(p->port) +
                           " --dataset multiturn --mt-turns 3"
                           " --mt-system-len 40 --mt-user-len 10 --mt-output-len 8"
                           " --mt-think-time 0.2 --mt-turn-time 0.1 --rate 5";
  CommandResult r = run_sluice(args + " --mt-conversations 3 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  json run = json::parse(r.out)["runs"][0];
  EXPECT_EQ(run["completed"], 9) << run["errors"].dump();
  EXPECT_EQ(run["endpoint"], "chat");
  EXPECT_EQ(run["total_output_tokens"], 9 * 8);
  EXPECT_GE(run["duration_s"].get<double>(), 0.6);  // the last turns are sent at >= 0.6 s
  const json& pc = run["prefix_cache"];
  ASSERT_TRUE(pc.is_object()) << r.out;
  // The shared system prompt and each conversation's earlier turns come from the cache.
  EXPECT_GT(pc["block_hit_rate"].get<double>(), 0.3) << pc.dump();
  EXPECT_GT(pc["token_hit_rate"].get<double>(), 0.3) << pc.dump();

  r = run_sluice(args + " --mt-conversations 1 --metrics-url " + url(p->port) + "/nothing");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("| Prefix cache hit rate, blocks (%) | n/a |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Prefix cache: n/a (GET " + url(p->port) + "/nothing: HTTP 404)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("/v1/chat/completions"), std::string::npos) << r.out;
}

TEST(BenchServe, UnreachableServerCountsFailuresAndExitsNonZero) {
  // A port nobody listens on: bind one, then close it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  const CommandResult r = run_sluice("bench serve --url " + url(ntohs(a.sin_port)) +
                                     " --model m --num-prompts 3 --output-format json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("sluice bench serve: error: no request completed"), std::string::npos)
      << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["runs"][0]["failed"], 3);
  EXPECT_EQ(j["runs"][0]["completed"], 0);
  EXPECT_NE(j["runs"][0]["errors"][0]["message"].get<std::string>().find("Connection"),
            std::string::npos);

  const CommandResult bad = run_sluice("bench serve --url http://127.0.0.1:1 --rate fast");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("bad rate 'fast'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace sluice::test
