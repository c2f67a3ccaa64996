// POST /v1/embeddings, /v1/rerank and /rerank over real HTTP against `--embedding` servers of
// tiny random bert models (synth's tiny-bert with the bge WPM vocabulary, mean pooling;
// tiny-bert-rank with a classifier head), and the refusals between embedding and generation
// models.
#include <cmath>
#include <cstdio>
#include <thread>
#include <tuple>
#include <utility>

#include "executor/embedding_test_util.h"
#include "server/embeddings_api.h"
#include "server_test_util.h"

namespace sluice::test {
namespace {

struct LoadedEmbedder {
  Model model;
  Tokenizer tokenizer;
  std::unique_ptr<CpuExecutor> executor;
  std::unique_ptr<Engine> engine;
};

server::ModelLoader embedding_loader(const std::string& path) {
  return [path]() -> Result<server::ServedModel> {
    SLUICE_ASSIGN_OR_RETURN(Model model, Model::load(path));
    SLUICE_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(model.file()));
    auto s = std::make_shared<LoadedEmbedder>(
        LoadedEmbedder{std::move(model), std::move(tok), nullptr, nullptr});
    SLUICE_ASSIGN_OR_RETURN(s->executor,
                            CpuExecutor::create(s->model, {.n_threads = 1, .n_blocks = 256}));
    SLUICE_ASSIGN_OR_RETURN(s->engine, Engine::create(s->tokenizer, *s->executor, {}));
    server::ServedModel m;
    m.engine = s->engine.get();
    m.tokenizer = &s->tokenizer;
    m.n_vocab = int32_t(s->model.config().n_vocab);
    m.name = "tiny-bert";
    const ModelConfig& c = s->model.config();
    m.pooling = c.pooling;
    m.embedding_width = c.pooling == Pooling::kRank ? c.n_cls_out : c.n_embd;
    m.owner = s;
    return m;
  };
}

// A --embedding server of `preset` (tiny-bert or tiny-bert-rank), its model in `dir`.
std::unique_ptr<server::Server> start_embedder(const TempDir& dir, const std::string& preset,
                                               const std::string& vocab, int& port) {
  const std::string path = dir.path(preset + ".gguf");
  write_embedding_model(preset, vocab, path);
  server::ServerConfig cfg;
  cfg.port = 0;
  cfg.embedding = true;
  auto srv = std::make_unique<server::Server>(cfg);
  Result<int> p = srv->start(embedding_loader(path));
  EXPECT_TRUE(p.ok()) << p.message();
  if (!p.ok()) return nullptr;
  port = *p;
  const Status st = srv->wait_ready();
  EXPECT_TRUE(st.ok()) << st.message();
  return st.ok() ? std::move(srv) : nullptr;
}

std::vector<float> floats(const json& a) {
  return a.get<std::vector<float>>();
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i];
  return ab / (norm(a) * norm(b));
}

class EmbeddingServer : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = shared_path("testdata/tokenizer/ggml-vocab-bert-bge.gguf");
    if (vocab_.empty()) {
      SLUICE_SHARED_MISSING("../shared/testdata/tokenizer/ggml-vocab-bert-bge.gguf");
      return;
    }
    srv_ = start_embedder(dir_, "tiny-bert", vocab_, port_);
    ASSERT_NE(srv_, nullptr);
  }
  std::vector<float> embed_one(const json& input) {
    const HttpResult r = post(port_, "/v1/embeddings", {{"input", input}});
    EXPECT_EQ(r.status, 200) << r.body;
    return floats(r.j()["data"][0]["embedding"]);
  }
  TempDir dir_;
  std::string vocab_;
  std::unique_ptr<server::Server> srv_;
  int port_ = 0;
};

TEST_F(EmbeddingServer, StringArrayAndTokenInputs) {
  const HttpResult r =
      post(port_, "/v1/embeddings", {{"input", "hello world"}, {"model", "tiny-bert"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& j = r.j();
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "tiny-bert");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["object"], "embedding");
  EXPECT_EQ(j["data"][0]["index"], 0);
  const std::vector<float> hello = floats(j["data"][0]["embedding"]);
  ASSERT_EQ(hello.size(), 128u);
  EXPECT_NEAR(norm(hello), 1.0, 1e-5);
  // [CLS] hello world [SEP]
  const HttpResult tok = post(port_, "/tokenize", {{"content", "hello world"}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  const std::vector<int32_t> ids = tok.j()["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 4);

  // A list of strings: in order, each as when alone (usage sums them).
  const std::vector<std::string> texts = {"the quick brown fox", "hello world", "a"};
  const HttpResult many = post(port_, "/v1/embeddings", {{"input", texts}});
  ASSERT_EQ(many.status, 200) << many.body;
  ASSERT_EQ(many.j()["data"].size(), 3u);
  int64_t total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(many.j()["data"][i]["index"], i);
    const std::vector<float> alone = embed_one(texts[i]);
    EXPECT_GE(cosine(floats(many.j()["data"][i]["embedding"]), alone), 0.99999) << texts[i];
    total += post(port_, "/tokenize", {{"content", texts[i]}}).j()["count"].get<int64_t>();
  }
  EXPECT_EQ(many.j()["usage"]["prompt_tokens"], total);

  // Token ids, and a list of token-id lists.
  EXPECT_GE(cosine(embed_one(ids), hello), 0.99999);
  const HttpResult lists = post(port_, "/v1/embeddings", {{"input", {ids, ids}}});
  ASSERT_EQ(lists.status, 200) << lists.body;
  ASSERT_EQ(lists.j()["data"].size(), 2u);
  EXPECT_GE(cosine(floats(lists.j()["data"][1]["embedding"]), hello), 0.99999);
}

TEST_F(EmbeddingServer, Base64AndDimensions) {
  const std::vector<float> full = embed_one("hello world");
  const HttpResult b =
      post(port_, "/v1/embeddings", {{"input", "hello world"}, {"encoding_format", "base64"}});
  ASSERT_EQ(b.status, 200) << b.body;
  ASSERT_TRUE(b.j()["data"][0]["embedding"].is_string());
  const std::vector<float> decoded =
      server::floats_from_base64(b.j()["data"][0]["embedding"].get<std::string>());
  ASSERT_EQ(decoded.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_FLOAT_EQ(decoded[i], full[i]) << i;

  // Matryoshka: the first 32 components, normalized again.
  const HttpResult d =
      post(port_, "/v1/embeddings", {{"input", "hello world"}, {"dimensions", 32}});
  ASSERT_EQ(d.status, 200) << d.body;
  const std::vector<float> cut = floats(d.j()["data"][0]["embedding"]);
  ASSERT_EQ(cut.size(), 32u);
  EXPECT_NEAR(norm(cut), 1.0, 1e-5);
  const std::vector<float> want(full.begin(), full.begin() + 32);
  EXPECT_GE(cosine(cut, want), 0.99999);

  const HttpResult big = post(port_, "/v1/embeddings", {{"input", "x"}, {"dimensions", 129}});
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_EQ(big.j()["error"]["param"], "dimensions");
  for (const json& bad : {json{{"input", "x"}, {"encoding_format", "f16"}}, json{{"input", ""}},
                          json{{"input", json::array()}}, json{{"input", {1.5}}},
                          json{{"input", {{"a"}}}}, json{{"dimensions", 3}},
                          json{{"input", "x"}, {"dimensions", 0}}, json{{"input", {999999}}}}) {
    const HttpResult e = post(port_, "/v1/embeddings", bad);
    EXPECT_EQ(e.status, 400) << bad.dump() << " -> " << e.body;
  }
}

TEST_F(EmbeddingServer, ConcurrentRequestsEqualOneBatchedRequest) {
  const std::vector<std::string> texts = {
      "one", "two words", "three little words", "and now four words", "hello world", "the end"};
  const HttpResult all = post(port_, "/v1/embeddings", {{"input", texts}});
  ASSERT_EQ(all.status, 200) << all.body;
  std::vector<std::vector<float>> alone(texts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back([&, i] {
      const HttpResult r = post(port_, "/v1/embeddings", {{"input", texts[i]}});
      if (r.status == 200) alone[i] = floats(r.j()["data"][0]["embedding"]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(alone[i].size(), 128u) << texts[i];
    // Bit for bit: the kernels are batch-invariant (executor_embedding_test).
    EXPECT_EQ(floats(all.j()["data"][i]["embedding"]), alone[i]) << texts[i];
  }
}

TEST_F(EmbeddingServer, RefusesGenerationAndRerank) {
  const HttpResult chat =
      post(port_, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(chat.status, 400) << chat.body;
  EXPECT_NE(chat.body.find("embedding model"), std::string::npos) << chat.body;
  EXPECT_EQ(post(port_, "/v1/completions", {{"prompt", "hi"}}).status, 400);
  EXPECT_EQ(post(port_, "/v1/responses", {{"input", "hi"}}).status, 400);
  // A mean-pooling model has no scores to rank with.
  const HttpResult rr = post(port_, "/v1/rerank", {{"query", "a"}, {"documents", {"b"}}});
  EXPECT_EQ(rr.status, 400) << rr.body;
  EXPECT_NE(rr.body.find("rank pooling"), std::string::npos) << rr.body;
}

TEST(RerankServer, OrdersByScoreWithTopN) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/tokenizer/ggml-vocab-bert-bge.gguf");
  TempDir dir;
  int port = 0;
  auto srv = start_embedder(dir, "tiny-bert-rank", vocab, port);
  ASSERT_NE(srv, nullptr);
  const std::vector<std::string> docs = {"a panda is a bear", "paris is in france", "hi",
                                         "pandas eat bamboo all day long"};
  const HttpResult all =
      post(port, "/v1/rerank", {{"query", "what is a panda?"}, {"documents", docs}});
  ASSERT_EQ(all.status, 200) << all.body;
  const json& res = all.j()["results"];
  ASSERT_EQ(res.size(), docs.size());
  EXPECT_EQ(all.j()["object"], "list");
  EXPECT_EQ(all.j()["model"], "tiny-bert");
  std::vector<bool> seen(docs.size(), false);
  for (size_t i = 0; i < res.size(); ++i) {
    seen[res[i]["index"].get<size_t>()] = true;
    if (i > 0) {
      EXPECT_GE(res[i - 1]["relevance_score"].get<double>(),
                res[i]["relevance_score"].get<double>());
    }
  }
  for (bool s : seen) EXPECT_TRUE(s);
  // usage: [CLS] query [SEP] doc [SEP] per document.
  int64_t q = post(port, "/tokenize", {{"content", "what is a panda?"}}).j()["count"];
  int64_t want = 0;
  for (const std::string& d : docs) {
    want += q + post(port, "/tokenize", {{"content", d}}).j()["count"].get<int64_t>() - 1;
  }
  EXPECT_EQ(all.j()["usage"]["prompt_tokens"], want);

  // top_n, on both paths: the same first results.
  for (const char* path : {"/v1/rerank", "/rerank"}) {
    const HttpResult top =
        post(port, path, {{"query", "what is a panda?"}, {"documents", docs}, {"top_n", 2}});
    ASSERT_EQ(top.status, 200) << top.body;
    ASSERT_EQ(top.j()["results"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(top.j()["results"][i]["index"], res[i]["index"]);
      EXPECT_NEAR(top.j()["results"][i]["relevance_score"].get<double>(),
                  res[i]["relevance_score"].get<double>(), 1e-6);
    }
  }
  EXPECT_EQ(post(port, "/v1/rerank", {{"query", "q"}, {"documents", json::array()}}).status, 400);
  EXPECT_EQ(post(port, "/v1/rerank", {{"documents", {"d"}}}).status, 400);
  EXPECT_EQ(post(port, "/v1/rerank", {{"query", "q"}, {"documents", {"d"}}, {"top_n", 0}}).status,
            400);
  // A reranker has no embeddings to give.
  EXPECT_EQ(post(port, "/v1/embeddings", {{"input", "x"}}).status, 400);
}

TEST(GenerationServer, RefusesEmbeddingsAndRerank) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto t = TestServer::start(model);
  ASSERT_NE(t, nullptr);
  for (const char* path : {"/v1/embeddings", "/v1/rerank", "/rerank"}) {
    const HttpResult r =
        post(t->port, path, {{"input", "x"}, {"query", "q"}, {"documents", {"d"}}});
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_EQ(r.j()["error"]["message"],
              "the served model is a generation model; start sluice serve with --embedding")
        << path;
  }
}

// `sluice serve ARGS` that must fail to load: its exit status and output.
std::pair<int, std::string> serve_fails(const std::string& args) {
  const std::string cmd = "timeout 120 " + sluice_path() + " serve " + args + " --port 0 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return {-1, ""};
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  return {::pclose(f), out};
}

TEST(ServeProcessEmbedding, FlagsAndRefusals) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/tokenizer/ggml-vocab-bert-bge.gguf");
  SLUICE_REQUIRE_SHARED(stories, kStoriesModel);
  TempDir dir;
  const std::string bert = dir.path("tiny-bert.gguf");
  write_embedding_model("tiny-bert", vocab, bert);
  auto [code, out] = serve_fails(stories + " --embedding -t 1");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("does not pool"), std::string::npos) << out;
  std::tie(code, out) = serve_fails(bert + " -t 1");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("start sluice serve with --embedding"), std::string::npos) << out;
  std::tie(code, out) = serve_fails(bert + " --embedding --pooling max -t 1");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("--pooling"), std::string::npos) << out;

  // --pooling cls overrides the file's mean: a different vector for the same text.
  auto mean = ServeProcess::start({bert, "--embedding", "-t", "1", "--kv-cache-gb", "0.01"});
  auto cls = ServeProcess::start(
      {bert, "--embedding", "--pooling", "cls", "-t", "1", "--kv-cache-gb", "0.01"});
  ASSERT_NE(mean, nullptr);
  ASSERT_NE(cls, nullptr);
  const HttpResult a = post(mean->port, "/v1/embeddings", {{"input", "hello world"}});
  const HttpResult b = post(cls->port, "/v1/embeddings", {{"input", "hello world"}});
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_LT(cosine(floats(a.j()["data"][0]["embedding"]), floats(b.j()["data"][0]["embedding"])),
            0.9999);
}

TEST(EmbeddingsApi, Base64RoundTripsLittleEndianFloats) {
  const std::vector<float> v = {1.0f, -2.5f, 3.25e-7f, 0.0f, 1e30f};
  EXPECT_EQ(server::base64_floats(std::vector<float>{1.0f}), "AACAPw==");  // 00 00 80 3f
  EXPECT_EQ(server::floats_from_base64(server::base64_floats(v)), v);
  const std::vector<float> n = server::normalize_embedding(std::vector<float>{3, 4, 12}, 2);
  ASSERT_EQ(n.size(), 2u);
  EXPECT_FLOAT_EQ(n[0], 0.6f);
  EXPECT_FLOAT_EQ(n[1], 0.8f);
}

}  // namespace
}  // namespace sluice::test
