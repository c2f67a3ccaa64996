// Tensor parallelism (model/shard.h) in one process: N shards of a model, each with its own CPU
// executor, run every batch on N threads joined by in-process collectives
// (support/thread_collective.h). Rank 0's logits must match one unsharded executor's within
// 1e-4 relative L2 and give the same greedy tokens, on every golden model and on synthetic
// GQA / MQA / MHA models where N exceeds the KV heads. (The same shards over MPI ranks:
// tests/parallel.)
#include <gtest/gtest.h>

#include <thread>

#include "executor/cpu_executor.h"
#include "executor/executor_test_util.h"
#include "executor/kv_sizing.h"
#include "model/golden_util.h"
#include "model/model_test_util.h"
#include "support/thread_collective.h"
#include "test_util.h"

namespace sluice {
namespace {

// N executors over the N shards of one model file, run together.
class ShardGroup {
 public:
  static std::unique_ptr<ShardGroup> create(const std::string& path, int n, CpuExecutorOptions opts,
                                            std::string* error) {
    auto g = std::unique_ptr<ShardGroup>(new ShardGroup(n));
    for (int r = 0; r < n; ++r) {
      ModelOptions mo;
      mo.tp_rank = r;
      mo.tp_size = n;
      auto m = Model::load(path, mo);
      if (!m.ok()) {
        *error = m.message();
        return nullptr;
      }
      g->models_.push_back(std::make_unique<Model>(std::move(m).value()));
      opts.collective = &g->group_.rank(r);
      auto e = CpuExecutor::create(*g->models_.back(), opts);
      if (!e.ok()) {
        *error = e.message();
        return nullptr;
      }
      g->execs_.push_back(std::move(e).value());
    }
    return g;
  }

  CpuExecutor& rank0() { return *execs_[0]; }
  const Model& model(int r) const { return *models_[size_t(r)]; }

  // Every rank runs `batch`; rank 0's logits go to `out`.
  Status execute(const Batch& batch, Logits& out) {
    std::vector<Status> st(execs_.size());
    std::vector<Logits> outs(execs_.size());
    std::vector<std::thread> threads;
    for (size_t r = 1; r < execs_.size(); ++r) {
      threads.emplace_back([&, r] { st[r] = execs_[r]->execute(batch, outs[r]); });
    }
    st[0] = execs_[0]->execute(batch, out);
    for (std::thread& t : threads) t.join();
    for (const Status& s : st) SLUICE_RETURN_IF_ERROR(s);
    return {};
  }

 private:
  explicit ShardGroup(int n) : group_(n) {}
  test::ThreadGroup group_;
  std::vector<std::unique_ptr<Model>> models_;
  std::vector<std::unique_ptr<CpuExecutor>> execs_;
};

void check_tp(const std::string& path, int n, const std::vector<int32_t>& prompt,
              const std::string& what, bool exact) {
  SCOPED_TRACE(what + " --tp " + std::to_string(n) + (exact ? " exact" : " fast"));
  CpuExecutorOptions opts;
  opts.n_threads = 1;
  opts.n_blocks = 64;
  if (exact) {
    opts.kv_type = KvType::kF32;
    opts.matmul_isa = MatmulIsa::kScalar;
  }
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  auto single = CpuExecutor::create(*model, opts);
  ASSERT_TRUE(single.ok()) << single.message();
  std::string err;
  auto group = ShardGroup::create(path, n, opts, &err);
  ASSERT_TRUE(group) << err;
  EXPECT_EQ(group->rank0().capacity().n_vocab, (*single)->capacity().n_vocab);
  const int bs = (*single)->block_size();
  const int n_groups = (*single)->capacity().n_kv_groups();
  const test::Rows want =
      test::run_script([&](const Batch& b, Logits& o) { return (*single)->execute(b, o); }, bs, 64,
                       prompt, 12, nullptr, n_groups);
  // Fast kernels: teacher-forced with the reference's tokens (test::expect_rows_match).
  const test::Rows got =
      test::run_script([&](const Batch& b, Logits& o) { return group->execute(b, o); }, bs, 64,
                       prompt, 12, exact ? nullptr : &want.greedy, n_groups);
  const double worst = test::expect_rows_match(got, want, !exact);
  EXPECT_LT(worst, exact ? 1e-4 : 1e-2);
  std::printf("[ tp ] %-24s --tp %d %s: %zu logits rows, worst rel-L2 %.2e\n", what.c_str(), n,
              exact ? "exact" : "fast ", want.logits.size(), worst);
}

// Both arithmetic modes: f32 activations and K/V, where a shard's only difference is the order
// of the partial sums (logits within 1e-4); and the fast kernels (8-bit activation blocks, f16
// K/V), where a last-bit difference in a sum can round one 8-bit activation or f16 value the
// other way: a row then moves by ~1e-3, never a greedy token.
void check_tp(const std::string& path, int n, const std::vector<int32_t>& prompt,
              const std::string& what) {
  check_tp(path, n, prompt, what, true);
  check_tp(path, n, prompt, what, false);
}

const std::vector<int32_t> kPrompt = {1, 45, 12, 300, 7, 99, 23, 210, 5, 64, 17, 400, 3};

TEST(TensorParallel, GoldenModels) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  const std::pair<const char*, std::vector<int>> models[] = {
      {"stories260K.gguf", {2, 4, 8}},  // GQA 8/4: N = 8 replicates each KV head
      {"aidreams260K.gguf", {2, 4}},    // MHA 4/4
      {"arch/gemma.gguf", {2, 4}},      // MQA 4/1
      {"arch/gemma2.gguf", {2, 4}},     // windows, soft-caps, post-norms
      {"arch/phi3.gguf", {2}},          // fused QKV and gate/up
      {"arch/mixtral.gguf", {2}},       // experts
      {"arch/qwen2moe.gguf", {2}},      // experts and a gated shared expert
  };
  for (const auto& [file, sizes] : models) {
    for (int n : sizes) check_tp(dir + "/" + file, n, kPrompt, file);
  }
}

TEST(TensorParallel, QuantizedSyntheticModels) {
  test::TempDir dir;
  const std::pair<const char*, FileType> models[] = {
      {"tiny", FileType::MOSTLY_Q8_0},          {"tiny-mqa", FileType::MOSTLY_Q4_0},
      {"tiny-mha", FileType::MOSTLY_F16},       {"tiny-qwen2", FileType::MOSTLY_Q8_0},
      {"tiny-qwen3moe", FileType::MOSTLY_Q8_0},
  };
  for (const auto& [variant, ftype] : models) {
    const std::string path = dir.path(std::string(variant) + ".gguf");
    test::write_synthetic_model(variant, ftype, path);
    // The tiny experts are 64 wide: two Q8_0 blocks, so at most two ranks.
    for (int n : {2, 4}) {
      if (n <= 2 || std::string(variant) != "tiny-qwen3moe") check_tp(path, n, kPrompt, variant);
    }
  }
}

TEST(TensorParallel, RefusesShapesThatDoNotSplit) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  ModelOptions mo;
  mo.tp_size = 3;  // 8 heads
  auto m = Model::load(dir + "/stories260K.gguf", mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("does not divide the model's 8 attention heads"), std::string::npos)
      << m.message();
  mo.tp_size = 2;
  mo.tp_rank = 2;
  m = Model::load(dir + "/stories260K.gguf", mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("rank 2 not in [0, 2)"), std::string::npos) << m.message();
  // A shard without its collectives cannot run.
  mo.tp_rank = 1;
  m = Model::load(dir + "/stories260K.gguf", mo);
  ASSERT_TRUE(m.ok()) << m.message();
  auto e = CpuExecutor::create(*m);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("needs the collectives"), std::string::npos) << e.message();
}

TEST(TensorParallel, ShardHoldsOnlyItsPart) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  ModelOptions mo;
  mo.tp_size = 2;
  mo.tp_rank = 1;
  auto m = Model::load(dir + "/stories260K.gguf", mo);
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.n_ff, 86);
  EXPECT_EQ(c.n_vocab, 256);
  EXPECT_EQ(m->shard().n_vocab, 512);
  EXPECT_EQ(m->shard().vocab_begin, 256);
  const LayerWeights& l = m->weights().layers[0];
  EXPECT_EQ(l.wq.n_rows, 32);
  EXPECT_EQ(l.wk.n_rows, 16);
  EXPECT_EQ(l.wo.n_cols, 32);
  EXPECT_TRUE(l.wo.partial);
  EXPECT_FALSE(l.wq.partial);
  EXPECT_EQ(l.w_down.n_cols, 86);
  EXPECT_TRUE(l.w_down.partial);
  EXPECT_EQ(m->weights().token_embd.n_rows, 256);
}

// Pipeline stages (model/shard.h) in threads: each stage's executor holds only its layers and
// KV cache; the last stage's logits equal one executor's bit for bit (same arithmetic per row,
// only the residual stream crosses stages), with chunked prefill and ragged decode batches.
TEST(PipelineParallel, StagesInThreadsMatchOneExecutor) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  for (const char* file : {"stories260K.gguf", "arch/gemma2.gguf", "arch/qwen2moe.gguf"}) {
    const std::string path = dir + "/" + file;
    auto whole = Model::load(path);
    ASSERT_TRUE(whole.ok()) << whole.message();
    for (int n : {2, 3}) {
      SCOPED_TRACE(std::string(file) + " --pp " + std::to_string(n));
      CpuExecutorOptions opts;
      opts.n_threads = 1;
      opts.n_blocks = 64;
      auto single = CpuExecutor::create(*whole, opts);
      ASSERT_TRUE(single.ok()) << single.message();
      test::ThreadPipe pipe(n);
      std::vector<std::unique_ptr<Model>> stages;
      std::vector<std::unique_ptr<CpuExecutor>> execs;
      for (int s = 0; s < n; ++s) {
        ModelOptions mo;
        mo.pp_rank = s;
        mo.pp_size = n;
        auto m = Model::load(path, mo);
        ASSERT_TRUE(m.ok()) << m.message();
        stages.push_back(std::make_unique<Model>(std::move(m).value()));
        opts.stage_link = &pipe.stage(s);
        auto e = CpuExecutor::create(*stages.back(), opts);
        ASSERT_TRUE(e.ok()) << e.message();
        // The KV cache holds this stage's layer slots only: its layers for a model of one K/V
        // group (gemma2's two groups: the slots its windowed and global layers use).
        const ModelConfig& sc = stages.back()->config();
        EXPECT_EQ(e.value()->kv_cache().shape().n_layer, kv_stage_slots(sc).n);
        if (sc.kv_cache_layout().single_group()) {
          EXPECT_EQ(e.value()->kv_cache().shape().n_layer, sc.n_stage_layers());
        }
        execs.push_back(std::move(e).value());
      }
      const auto run_stages = [&](const Batch& b, Logits& out) -> Status {
        std::vector<Status> st(static_cast<size_t>(n));
        std::vector<Logits> outs(static_cast<size_t>(n));
        std::vector<std::thread> threads;
        for (int s = 0; s < n - 1; ++s) {
          threads.emplace_back(
              [&, s] { st[size_t(s)] = execs[size_t(s)]->execute(b, outs[size_t(s)]); });
        }
        st[size_t(n - 1)] = execs[size_t(n - 1)]->execute(b, out);
        for (std::thread& t : threads) t.join();
        for (int s = 0; s < n - 1; ++s) {
          EXPECT_EQ(outs[size_t(s)].n_rows(), 0) << "stage " << s << " returned logits";
        }
        for (const Status& x : st) SLUICE_RETURN_IF_ERROR(x);
        return Status{};
      };
      const int n_groups = (*single)->capacity().n_kv_groups();
      const test::Rows want =
          test::run_script([&](const Batch& b, Logits& o) { return (*single)->execute(b, o); }, 16,
                           64, kPrompt, 8, nullptr, n_groups);
      const test::Rows got = test::run_script(run_stages, 16, 64, kPrompt, 8, nullptr, n_groups);
      EXPECT_EQ(got.greedy, want.greedy);
      EXPECT_EQ(got.logits, want.logits);
    }
  }
}

// Stages balanced by weight bytes: the last one also holds the output projection.
TEST(PipelineParallel, StagesAreBalancedByWeightBytes) {
  const auto split = [](std::vector<double> cost, double extra, int n_stages) {
    std::vector<int64_t> out;
    for (int s = 0; s < n_stages; ++s) {
      const Range r = stage_layers(cost, extra, s, n_stages);
      if (s == 0) out.push_back(r.begin);
      out.push_back(r.end);
    }
    return out;
  };
  // Equal layers, no extra: the even split (earlier stages one more).
  EXPECT_EQ(split(std::vector<double>(5, 1.0), 0, 2), (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(split(std::vector<double>(8, 1.0), 0, 4), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  for (int n = 1; n <= 12; ++n) {
    for (int st = 1; st <= n; ++st) {
      for (int s = 0; s < st; ++s) {
        const int base = n / st, extra = n % st;  // the first n % st stages one more
        const Range even{s * base + std::min(s, extra), (s + 1) * base + std::min(s + 1, extra)};
        const Range bal = stage_layers(std::vector<double>(size_t(n), 1.0), 0, s, st);
        EXPECT_EQ(bal.begin, even.begin) << n << " layers, stage " << s << " of " << st;
        EXPECT_EQ(bal.end, even.end) << n << " layers, stage " << s << " of " << st;
      }
    }
  }
  // Llama-3.2-1B: 16 layers of 60.8M weights, the output 262.7M: 10 + 6 (608M and 627M), not
  // 8 + 8 (486M and 749M).
  EXPECT_EQ(split(std::vector<double>(16, 60.8), 262.7, 2), (std::vector<int64_t>{0, 10, 16}));
  EXPECT_EQ(split(std::vector<double>(16, 60.8), 262.7, 4),
            (std::vector<int64_t>{0, 5, 10, 15, 16}));  // the last: 323.5M
  // Every stage keeps a layer, however large the extra.
  EXPECT_EQ(split(std::vector<double>(3, 1.0), 1e9, 3), (std::vector<int64_t>{0, 1, 2, 3}));
  // Uneven layers.
  EXPECT_EQ(split({5, 1, 1, 1, 1, 1}, 0, 2), (std::vector<int64_t>{0, 1, 6}));
}

TEST(PipelineParallel, StagesHoldOnlyTheirLayersAndRefuseBadSizes) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  const std::string path = dir + "/stories260K.gguf";
  for (int s = 0; s < 2; ++s) {
    ModelOptions mo;
    mo.pp_rank = s;
    mo.pp_size = 2;
    auto m = Model::load(path, mo);
    ASSERT_TRUE(m.ok()) << m.message();
    const ModelConfig& c = m->config();
    const ModelWeights& w = m->weights();
    EXPECT_EQ(c.layer_begin, s == 0 ? 0 : 3);  // 5 layers: 3 + 2
    EXPECT_EQ(c.stage_layer_end(), s == 0 ? 3 : 5);
    for (int il = 0; il < c.n_layer; ++il) {
      const bool mine = il >= c.layer_begin && il < c.stage_layer_end();
      EXPECT_EQ(w.layers[size_t(il)].wq.data != nullptr, mine) << "layer " << il;
    }
    EXPECT_EQ(w.token_embd.data != nullptr, s == 0);
    EXPECT_EQ(w.output.data != nullptr, s == 1);
    EXPECT_EQ(w.output_norm.empty(), s == 0);
    // A stage cannot run without its link.
    auto e = CpuExecutor::create(*m);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.message().find("needs the link to its neighbouring stages"), std::string::npos)
        << e.message();
  }
  ModelOptions mo;
  mo.pp_size = 6;
  auto m = Model::load(path, mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("pipeline parallel size 6 must be in 1..5"), std::string::npos)
      << m.message();
  mo.pp_size = 2;
  mo.pp_rank = 2;
  m = Model::load(path, mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("pipeline stage 2 not in [0, 2)"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace sluice
