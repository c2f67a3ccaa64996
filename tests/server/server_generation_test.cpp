// Generation over real HTTP: temperature-0 output equals the golden continuation whether
// streamed or not, over both endpoints and every prompt form; n, stop, seeds, logprobs, usage.
#include "server_test_util.h"

namespace sluice::test {
namespace {

using server::ServerConfig;

ServerConfig with_template() {
  ServerConfig c;
  c.chat_template = kPlainTemplate;
  return c;
}

json completion_body(const Golden& g, bool stream) {
  return {{"model", "stories260K"},
          {"prompt", g.prompt},
          {"max_tokens", g.greedy_tokens.size()},
          {"temperature", 0},
          {"stream", stream}};
}

json chat_body(const Golden& g, bool stream) {
  return {{"model", "stories260K"},
          {"messages", {{{"role", "user"}, {"content", g.prompt}}}},
          {"max_tokens", g.greedy_tokens.size()},
          {"temperature", 0},
          {"stream", stream}};
}

TEST(ServerGeneration, CompletionStreamedEqualsWholeEqualsGolden) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);

  HttpResult whole = post(s->port, "/v1/completions", completion_body(g, false));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json j = whole.j();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], g.greedy_text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], g.prompt_tokens.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], g.greedy_tokens.size());
  EXPECT_EQ(j["usage"]["total_tokens"], g.prompt_tokens.size() + g.greedy_tokens.size());

  SseResult st = stream(s->port, "/v1/completions", completion_body(g, true));
  ASSERT_EQ(st.status, 200);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(streamed_text(st), g.greedy_text);
  EXPECT_EQ(streamed_finish(st), "length");
  for (const json& e : st.events) {
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_FALSE(e.contains("usage"));  // only with stream_options.include_usage
  }
}

TEST(ServerGeneration, ChatStreamedEqualsWholeEqualsGolden) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s, with_template());
  const Golden g = load_golden(golden_path);

  HttpResult whole = post(s->port, "/v1/chat/completions", chat_body(g, false));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json j = whole.j();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], g.greedy_text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  // The template writes "<s>" itself: BOS once, then the prompt as the golden tokenization.
  EXPECT_EQ(j["usage"]["prompt_tokens"], g.prompt_tokens.size());

  json body = chat_body(g, true);
  body["stream_options"] = {{"include_usage", true}};
  SseResult st = stream(s->port, "/v1/chat/completions", body);
  ASSERT_EQ(st.status, 200);
  ASSERT_TRUE(st.done);
  EXPECT_EQ(streamed_text(st), g.greedy_text);
  EXPECT_EQ(streamed_finish(st), "length");
  ASSERT_GE(st.events.size(), 3u);
  EXPECT_EQ(st.events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(st.events[0]["object"], "chat.completion.chunk");
  // include_usage: "usage": null on every chunk, then a last chunk with no choices and the totals.
  for (size_t i = 0; i + 1 < st.events.size(); ++i) EXPECT_TRUE(st.events[i]["usage"].is_null());
  const json& last = st.events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["prompt_tokens"], g.prompt_tokens.size());
  EXPECT_EQ(last["usage"]["completion_tokens"], g.greedy_tokens.size());
}

TEST(ServerGeneration, ChatContentPartsAndModelTemplateOverride) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s, with_template());
  const Golden g = load_golden(golden_path);
  json body = chat_body(g, false);
  body["max_completion_tokens"] = 20;
  body.erase("max_tokens");
  body["messages"] = {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", g.prompt}}}}}};
  HttpResult r = post(s->port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = r.j()["choices"][0]["message"]["content"];
  EXPECT_EQ(text, g.greedy_text.substr(0, text.size()));
  EXPECT_EQ(r.j()["usage"]["completion_tokens"], 20);
}

TEST(ServerGeneration, EveryPromptFormGivesTheSameContinuation) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);
  const int n_tok = 24;
  auto text_of = [&](const json& prompt, size_t expect_choices) {
    json body = {{"prompt", prompt}, {"max_tokens", n_tok}, {"temperature", 0}};
    HttpResult r = post(s->port, "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> out;
    for (const json& c : r.j()["choices"]) out.push_back(c["text"]);
    EXPECT_EQ(out.size(), expect_choices);
    return out;
  };
  const std::string want = text_of(g.prompt, 1).at(0);
  EXPECT_EQ(want, g.greedy_text.substr(0, want.size()));
  EXPECT_EQ(text_of(g.prompt_tokens, 1).at(0), want);  // token ids (BOS included by the caller)
  auto two = text_of(json::array({g.prompt, g.prompt}), 2);
  EXPECT_EQ(two[0], want);
  EXPECT_EQ(two[1], want);
  auto lists = text_of(json::array({g.prompt_tokens, g.prompt_tokens}), 2);
  EXPECT_EQ(lists[0], want);
  EXPECT_EQ(lists[1], want);
}

TEST(ServerGeneration, SeveralChoicesShareThePromptAndCountUsage) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);
  json body = {{"prompt", g.prompt}, {"max_tokens", 16}, {"temperature", 0}, {"n", 3}};
  HttpResult r = post(s->port, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.j();
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], j["choices"][0]["text"]);
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], g.prompt_tokens.size());  // counted once
  EXPECT_EQ(j["usage"]["completion_tokens"], 48);

  // Two prompts x n=2: indices prompt * n + i, streamed.
  body["prompt"] = json::array({g.prompt, "Lily and Ben"});
  body["n"] = 2;
  body["stream"] = true;
  SseResult st = stream(s->port, "/v1/completions", body);
  ASSERT_TRUE(st.done);
  EXPECT_EQ(streamed_text(st, 0), streamed_text(st, 1));
  EXPECT_EQ(streamed_text(st, 2), streamed_text(st, 3));
  EXPECT_NE(streamed_text(st, 0), streamed_text(st, 2));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(streamed_finish(st, i), "length");

  // Sampled choices with a seed differ from each other but repeat across requests.
  json sampled = {
      {"prompt", g.prompt}, {"max_tokens", 24}, {"temperature", 1.0}, {"seed", 1234}, {"n", 2}};
  const json a = post(s->port, "/v1/completions", sampled).j();
  const json b = post(s->port, "/v1/completions", sampled).j();
  EXPECT_EQ(a["choices"], b["choices"]);
  EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]);
  sampled["stream"] = true;
  SseResult sst = stream(s->port, "/v1/completions", sampled);
  EXPECT_EQ(streamed_text(sst, 0), a["choices"][0]["text"]);
  EXPECT_EQ(streamed_text(sst, 1), a["choices"][1]["text"]);
}

TEST(ServerGeneration, StopStringsEndTheTextBeforeTheStop) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);
  const size_t at = g.greedy_text.find("Lily");
  ASSERT_NE(at, std::string::npos);
  for (const json& stop : {json("Lily"), json::array({"zzz", "Lily"})}) {
    for (bool streamed : {false, true}) {
      json body = {{"prompt", g.prompt},
                   {"max_tokens", 100},
                   {"temperature", 0},
                   {"stop", stop},
                   {"stream", streamed}};
      if (streamed) {
        SseResult st = stream(s->port, "/v1/completions", body);
        EXPECT_EQ(streamed_text(st), g.greedy_text.substr(0, at));
        EXPECT_EQ(streamed_finish(st), "stop");
      } else {
        const json j = post(s->port, "/v1/completions", body).j();
        EXPECT_EQ(j["choices"][0]["text"], g.greedy_text.substr(0, at));
        EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
      }
    }
  }
}

TEST(ServerGeneration, SamplingFieldsAreAcceptedAndSteer) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);
  json base = {{"prompt", g.prompt}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string greedy = post(s->port, "/v1/completions", base).j()["choices"][0]["text"];

  // logit_bias -100 bans the greedy first token.
  json banned = base;
  banned["logit_bias"] = {{std::to_string(g.greedy_tokens[0]), -100}};
  const std::string other = post(s->port, "/v1/completions", banned).j()["choices"][0]["text"];
  EXPECT_NE(other.substr(0, 1), greedy.substr(0, 1));

  json all = base;
  all.update({{"temperature", 0.7},
              {"top_p", 0.9},
              {"top_k", 40},
              {"min_p", 0.05},
              {"seed", 7},
              {"presence_penalty", 0.5},
              {"frequency_penalty", 0.5},
              {"repetition_penalty", 1.1},
              {"ignore_eos", true},
              {"user", "someone"},
              {"unknown_field", {{"x", 1}}},
              {"echo", false}});
  HttpResult r = post(s->port, "/v1/completions", all);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["usage"]["completion_tokens"], 12);  // ignore_eos: no early stop
  EXPECT_EQ(post(s->port, "/v1/completions", all).j()["choices"], r.j()["choices"]);  // seeded
}

TEST(ServerGeneration, LogprobsInBothShapes) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  ServerConfig cfg = with_template();
  SLUICE_REQUIRE_SERVER(s, cfg);
  const Golden g = load_golden(golden_path);

  json chat = {{"messages", {{{"role", "user"}, {"content", g.prompt}}}},
               {"max_tokens", 6},
               {"temperature", 0},
               {"logprobs", true},
               {"top_logprobs", 3}};
  HttpResult r = post(s->port, "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& content = r.j()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);
  std::string joined;
  for (const json& e : content) {
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);  // greedy: the chosen token is the best
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
    joined += e["token"].get<std::string>();
  }
  EXPECT_EQ(joined, r.j()["choices"][0]["message"]["content"]);
  chat["stream"] = true;
  SseResult st = stream(s->port, "/v1/chat/completions", chat);
  size_t streamed_entries = 0;
  for (const json& e : st.events) {
    const json& lp = e["choices"][0]["logprobs"];
    if (lp.is_object()) streamed_entries += lp["content"].size();
  }
  EXPECT_EQ(streamed_entries, 6u);

  json comp = {{"prompt", g.prompt}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2}};
  r = post(s->port, "/v1/completions", comp);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& lp = r.j()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 5u);
  EXPECT_EQ(lp["token_logprobs"].size(), 5u);
  EXPECT_EQ(lp["top_logprobs"].size(), 5u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  comp["logprobs"] = 0;  // the chosen token's logprob only
  const json lp0 = post(s->port, "/v1/completions", comp).j()["choices"][0]["logprobs"];
  EXPECT_EQ(lp0["token_logprobs"].size(), 5u);
  EXPECT_TRUE(lp0["top_logprobs"][0].empty());
}

TEST(ServerGeneration, ConcurrentStreamsAllMatchTheGolden) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);
  constexpr int kClients = 48;
  std::vector<std::string> texts(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      json body = {
          {"prompt", g.prompt}, {"max_tokens", 40}, {"temperature", 0}, {"stream", i % 2 == 0}};
      if (i % 2 == 0) {
        texts[size_t(i)] = streamed_text(stream(s->port, "/v1/completions", body));
      } else {
        HttpResult r = post(s->port, "/v1/completions", body);
        if (r.status == 200) texts[size_t(i)] = r.j()["choices"][0]["text"];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(texts[size_t(i)], texts[0]) << i;
  EXPECT_EQ(texts[0], g.greedy_text.substr(0, texts[0].size()));
}

// n choices of a long prompt: the first computes it, the others adopt its full blocks.
// The n choices of one prompt are one engine group: the prompt is computed once, its 5 blocks
// are shared and the partial last one (70 = 4 x 16 + 6) is copied once per extra choice.
TEST(ServerGeneration, ChoicesShareTheirPromptBlocks) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s);
  const Golden g = load_golden(golden_path);
  json tok = post(s->port, "/tokenize", {{"prompt", g.greedy_text}}).j();
  std::vector<int32_t> prompt = tok["tokens"];
  prompt.resize(70);  // 4 full blocks of 16 + 6 tokens
  const int n = 4;
  json body = {{"prompt", prompt}, {"max_tokens", 3}, {"temperature", 0}, {"n", n}};
  HttpResult r = post(s->port, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  for (int i = 1; i < n; ++i) EXPECT_EQ(r.j()["choices"][i]["text"], r.j()["choices"][0]["text"]);
  const std::string m = metrics_text(s->port);
  EXPECT_EQ(metric(m, "sluice_prompt_tokens_total"), n * 70);
  EXPECT_EQ(metric(m, "sluice_prompt_tokens_computed_total"), 70) << m;
  EXPECT_EQ(metric(m, "sluice_prefix_cache_hits_total"), 0);
  EXPECT_EQ(metric(m, "sluice_kv_forked_blocks_total"), (n - 1) * 5);
  EXPECT_EQ(metric(m, "sluice_kv_cow_copies_total"), n - 1);
  EXPECT_EQ(metric(m, "sluice_kv_blocks_used"), 0);
}

}  // namespace
}  // namespace sluice::test
