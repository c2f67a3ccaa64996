// Step times against the roofline: the cost model of a loaded model, the prediction for a batch
// (bytes / bandwidth or FLOPs / peak, whichever is larger), and the engine's per-bound counters.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "executor/step_roofline.h"
#include "kernels/matmul_isa.h"
#include "model/model_test_util.h"
#include "test_util.h"

namespace sluice {
namespace {

double matmul_params(const Model& m) {
  auto n = [](const WeightMatrix& w) { return double(w.n_cols) * double(w.n_rows); };
  double total = n(m.weights().output);
  for (const LayerWeights& l : m.weights().layers) {
    total += n(l.wq) + n(l.wk) + n(l.wv) + n(l.wo) + n(l.w_gate) + n(l.w_up) + n(l.w_down);
  }
  return total;
}

MachineRoofline fake_machine() {
  MachineRoofline r;
  r.cpu = "test";
  r.threads = 2;
  r.read_gbps_1t = 5;
  r.read_gbps = 10;
  r.peak_gflops_f32 = 100;
  r.peak_gflops_bf16 = 200;
  r.peak_gops_int8 = 400;
  return r;
}

TEST(StepRoofline, CostModelAndPredictions) {
  test::TempDir dir;
  const std::string path = dir.path("tiny.gguf");
  test::write_synthetic_model("tiny", FileType::MOSTLY_Q8_0, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  const StepCostModel cost = make_step_cost_model(*model, fake_machine(), KvType::kF16);
  EXPECT_DOUBLE_EQ(cost.model.n_params, matmul_params(*model));
  EXPECT_DOUBLE_EQ(cost.model.kv_elems_per_token, 2.0 * c.n_layer * c.kv_dim());
  EXPECT_EQ(cost.precision.kv_bits, 16);
  EXPECT_EQ(cost.precision.act_bits, matmul_isa_best() == MatmulIsa::kScalar ? 16 : 8);
  EXPECT_DOUBLE_EQ(cost.hw.hbm_bytes_per_s, 10e9);
  EXPECT_DOUBLE_EQ(cost.hw.flops_bf16, 100e9);  // Q8_0 is not BF16: the f32 peak
  // Q8_0 stores 34 bytes per 32 weights.
  EXPECT_NEAR(cost.model.stored_weight_bytes, cost.model.n_params * 34.0 / 32.0, 1.0);

  StepRoofline roof(cost);
  // One decode token at context 10: memory-bound, weights + 10 tokens of KV over the bandwidth.
  Batch decode;
  std::vector<int32_t> table = {0};
  const std::vector<int32_t> one = {1};
  decode.add_sequence(one, 9, table, LogitsMode::kLast);
  bool compute = true;
  const double kv_bytes = 10 * cost.model.kv_elems_per_token * 2;
  EXPECT_NEAR(roof.predict(decode, &compute), (cost.model.stored_weight_bytes + kv_bytes) / 10e9,
              1e-15);
  EXPECT_FALSE(compute);

  // A long prefill on a machine with almost no FLOP/s: compute-bound, FLOPs / peak.
  StepCostModel slow = cost;
  slow.hw.ops_int8 = slow.hw.flops_bf16 = 1e6;
  StepRoofline slow_roof(slow);
  Batch prefill;
  std::vector<int32_t> ptable = {0, 1, 2, 3};
  const std::vector<int32_t> prompt(64, 1);
  prefill.add_sequence(prompt, 0, ptable, LogitsMode::kLast);
  const double pairs = 64.0 * 65.0 / 2.0;
  const double flops = 2 * cost.model.n_params * 64 + cost.model.attn_flops_per_pair * pairs;
  EXPECT_NEAR(slow_roof.predict(prefill, &compute), flops / 1e6, flops / 1e6 * 1e-12);
  EXPECT_TRUE(compute);

  slow_roof.record(prefill, 2.0);
  slow_roof.record(decode, 0.5);
  const RooflineStats& st = slow_roof.stats();
  EXPECT_EQ(st.compute_bound_steps, 2u);
  EXPECT_EQ(st.memory_bound_steps, 0u);  // the decode step is compute-bound on this machine too
  EXPECT_EQ(st.last_seconds, 0.5);
  EXPECT_NEAR(st.mfu(), (flops / 1e6 + slow_roof.predict(decode)) / 2.5, 1e-9);
  EXPECT_EQ(st.mbu(), 0.0);
}

// A step that streams faster than the cached bandwidth (a stale low probe) raises it, in memory
// and in the cache file, so MBU never passes 100%; a slower one leaves it.
TEST(StepRoofline, AStepThatStreamsFasterRaisesTheBandwidth) {
  test::TempDir dir;
  const std::string path = dir.path("tiny.gguf");
  test::write_synthetic_model("tiny", FileType::MOSTLY_Q8_0, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  MachineRoofline machine = fake_machine();
  machine.measured_at = machine.read_at = "2026-11-29T10:00:00Z";
  machine.probe_read_gbps = 10;
  const std::string cache = dir.path("roofline.json");
  ASSERT_TRUE(save_roofline(machine, cache).ok());
  StepCostModel cost = make_step_cost_model(*model, machine, KvType::kF16);
  EXPECT_EQ(cost.read_origin, "probe at 2026-11-29T10:00:00Z");
  cost.roofline_path = cache;
  cost.persist_min_bytes = 0;  // the tiny model counts as past the caches here

  Batch decode;
  std::vector<int32_t> table = {0};
  decode.add_sequence(std::vector<int32_t>{1}, 9, table, LogitsMode::kLast);
  StepRoofline roof(cost);
  const double bytes = roof.predict(decode) * 10e9;  // weights + K/V a step reads
  EXPECT_EQ(roof.stats().read_bytes_per_s, 10e9);
  roof.record(decode, bytes / 20e9);  // streamed at 20 GB/s: the cached 10 was low
  const RooflineStats& st = roof.stats();
  EXPECT_NEAR(st.read_bytes_per_s, 20e9, 1e3);
  EXPECT_EQ(st.read_raises, 1u);
  EXPECT_NE(st.read_origin.find("raised by an engine step"), std::string::npos) << st.read_origin;
  EXPECT_NE(st.read_origin.find("first: probe at 2026-11-29T10:00:00Z"), std::string::npos);
  EXPECT_NEAR(st.mbu(), 1.0, 1e-9);
  EXPECT_NEAR(st.last_predicted / st.last_seconds, 1.0, 1e-9);
  auto saved = load_roofline(cache);
  ASSERT_TRUE(saved.ok()) << saved.message();
  EXPECT_NEAR(saved->read_gbps, 20, 1e-6);
  EXPECT_EQ(saved->read_source, "step");
  EXPECT_EQ(saved->probe_read_gbps, 10);  // what the probe read stays on record
  EXPECT_NE(saved->read_origin().find("the probe at 2026-11-29T10:00:00Z read 10.0"),
            std::string::npos)
      << saved->read_origin();

  roof.record(decode, bytes / 5e9);  // slower: no raise; MBU over both steps at 20 GB/s
  EXPECT_EQ(roof.stats().read_raises, 1u);
  EXPECT_NEAR(roof.stats().mbu(), 2.0 / (1.0 + 4.0), 1e-9);
  EXPECT_LE(roof.stats().mbu(), 1.0);

  // A model that fits in the caches raises the bandwidth in memory only.
  cost.persist_min_bytes = 1e15;
  StepRoofline cached(cost);
  cached.record(decode, bytes / 40e9);
  EXPECT_NEAR(cached.stats().read_bytes_per_s, 40e9, 1e3);
  EXPECT_NE(cached.stats().read_origin.find("not saved"), std::string::npos);
  EXPECT_NEAR(load_roofline(cache)->read_gbps, 20, 1e-6);
}

// The communication term of tensor / pipeline parallel steps, by hand: a 3-token prefill
// chunk and a decode of another sequence (4 tokens, 2 logits rows), 4 layers, n_embd 64,
// vocabulary 1000, a link of 1 GB/s and 10 us a message.
TEST(StepRoofline, CommunicationTermOfParallelSteps) {
  StepCostModel cost;
  cost.comm.n_layer = 4;
  cost.comm.n_embd = 64;
  cost.comm.n_vocab = 1000;
  cost.comm.link_bytes_per_s = 1e9;
  cost.comm.link_latency_s = 1e-5;
  Batch b;
  std::vector<int32_t> t0 = {0}, t1 = {1};
  b.add_sequence(std::vector<int32_t>{5, 6, 7}, 0, t0, LogitsMode::kLast);
  b.add_sequence(std::vector<int32_t>{8}, 9, t1, LogitsMode::kLast);
  EXPECT_EQ(StepRoofline(cost).predict_comm(b), 0.0);  // one process
  // --tp 2: 9 all-reduces (2 a layer + the embedding) of 4 x 64 floats sent to 1 other rank,
  // and the logits gather: 2 rows x 500 columns from the other rank.
  cost.comm.tp = 2;
  const double ar = 1e-5 + 4 * 64 * 4 / 1e9;
  const double gather = 1e-5 + 2 * 500 * 4 / 1e9;
  EXPECT_NEAR(StepRoofline(cost).predict_comm(b), 9 * ar + gather, 1e-15);
  // --pp 3 with 4 micro-batches (2 sequences: 2 of them): 2 boundaries x (2 messages + the
  // whole stream), and the logits to rank 0 in 2 messages.
  cost.comm.tp = 1;
  cost.comm.pp = 3;
  cost.comm.n_micro = 4;
  const double stages = 2 * (2 * 1e-5 + 4 * 64 * 4 / 1e9);
  const double logits = 2 * 1e-5 + 2 * 1000 * 4 / 1e9;
  EXPECT_NEAR(StepRoofline(cost).predict_comm(b), stages + logits, 1e-15);
  // Recorded beside the measured seconds and bytes.
  StepRoofline roof(cost);
  roof.record(b, 0.01, -1, CommStats{6, 4096, 0.002});
  roof.record(b, 0.01, -1, CommStats{6, 4096, 0.001});
  EXPECT_DOUBLE_EQ(roof.stats().comm_seconds, 0.003);
  EXPECT_NEAR(roof.stats().comm_predicted, 2 * (stages + logits), 1e-15);
  EXPECT_DOUBLE_EQ(roof.stats().comm_bytes, 8192);
  EXPECT_DOUBLE_EQ(roof.stats().last_comm_seconds, 0.001);
}

TEST(StepRoofline, EngineTimesEveryForwardPass) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  auto tok = Tokenizer::from_gguf(model->file());
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto exec = CpuExecutor::create(*model, {.n_threads = 1, .n_blocks = 64});
  ASSERT_TRUE(exec.ok()) << exec.message();
  EngineConfig ec;
  ec.cost_model = make_step_cost_model(*model, fake_machine(), KvType::kF16);
  auto engine = Engine::create(*tok, **exec, ec);
  ASSERT_TRUE(engine.ok()) << engine.message();
  GenerationParams g;
  g.sampling.temperature = 0;
  g.max_tokens = 8;
  auto prompt = tok->encode("Once upon a time");
  ASSERT_TRUE(prompt.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*engine)->add_request(*prompt, g).ok());
  while ((*engine)->has_work()) ASSERT_TRUE((*engine)->step().ok());
  const StepRoofline* r = (*engine)->roofline();
  ASSERT_NE(r, nullptr);
  const RooflineStats& st = r->stats();
  EXPECT_EQ(st.memory_bound_steps + st.compute_bound_steps, (*engine)->stats().steps);
  EXPECT_GT(st.memory_bound_steps, 0u);
  EXPECT_GT(st.mbu(), 0.0);
  EXPECT_GT(st.memory_bound_seconds, 0.0);

  auto plain = Engine::create(*tok, **exec, EngineConfig{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->roofline(), nullptr);
}

}  // namespace
}  // namespace sluice
