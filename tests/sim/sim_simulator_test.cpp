// The simulated executor's step times against hand arithmetic, and the simulated service against
// the real engine: same decisions for the same arrivals (the engine's steps timed by hand),
// seeded reports that repeat exactly, the router's policies on virtual replicas.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "executor/sim_executor.h"
#include "loadgen/dataset.h"
#include "loadgen/runner.h"
#include "perf/hardware.h"
#include "perf/planner.h"
#include "sim/calibration.h"
#include "sim/simulator.h"
#include "support/fake_executor.h"
#include "tokenizer/synthetic.h"

namespace sluice {
namespace {

constexpr int32_t kVocab = 64;

StepCostModel llama70b_on(const char* hw_name, int tp = 1, int pp = 1, int micro = 1) {
  StepCostModel c;
  const ModelShape* shape = find_planner_model("llama-3-70b");
  EXPECT_NE(shape, nullptr);
  c.model = model_cost(*shape);
  c.precision = {16, 16, 16};
  c.hw = *find_hardware(hw_name);
  c.comm.tp = tp;
  c.comm.pp = pp;
  c.comm.n_micro = micro;
  c.comm.n_layer = shape->n_layer;
  c.comm.n_embd = shape->n_embd;
  c.comm.n_vocab = shape->n_vocab;
  if (tp > 1 || pp > 1) {
    c.comm.link_bytes_per_s = 9e11;
    c.comm.link_latency_s = 5e-6;
  }
  return c;
}

SimExecutorConfig config_for(StepCostModel cost, int32_t n_blocks = 4096) {
  SimExecutorConfig c;
  c.cost = std::move(cost);
  c.capacity = {n_blocks, 16, kVocab, 1 << 16};
  return c;
}

// `n` sequences, each with `n_new` new tokens ending at context `ctx`, blocks laid out in order.
Batch uniform_batch(int n, int n_new, int ctx) {
  Batch b;
  b.block_size = 16;
  int32_t next_block = 0;
  for (int s = 0; s < n; ++s) {
    const int32_t blocks = (ctx + 15) / 16;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int32_t& t : table) t = next_block++;
    std::vector<int32_t> toks(static_cast<size_t>(n_new), 5);
    b.add_sequence(toks, ctx - n_new, table, LogitsMode::kLast);
  }
  return b;
}

TEST(SimExecutorTest, DecodeStepIsWeightsPlusKvOverBandwidth) {
  VirtualClock clock;
  SimulatedExecutor ex(config_for(llama70b_on("H100")), clock);
  const Batch b = uniform_batch(8, 1, 1024);
  // By hand: bf16 weights read once, every attended token's K and V (80 layers x 8 KV heads x
  // 128 x 2 (K, V) x 2 bytes) read, over 3.35 TB/s; FLOPs far below the 989 TFLOP/s floor.
  const ModelCost m = model_cost(*find_planner_model("llama-3-70b"));
  const double kv_per_token = 2.0 * 80 * 8 * 128 * 2;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, {16, 16, 16}), kv_per_token);
  const double want = (2.0 * m.n_params + 8 * 1024 * kv_per_token) / 3.35e12;
  const SimStepCost c = ex.step_cost(b);
  EXPECT_NEAR(c.seconds(), want, want * 1e-12);
  EXPECT_FALSE(c.compute_bound);
  EXPECT_EQ(c.comm_s, 0);

  Logits out;
  ASSERT_TRUE(ex.execute(b, out).ok());
  EXPECT_NEAR(clock.now(), want, want * 1e-12);
  ASSERT_EQ(out.n_rows(), 8);
  for (int r = 0; r < out.n_rows(); ++r) {
    for (int t = 0; t < kVocab; ++t) {
      EXPECT_EQ(out.row(r)[t], t == SimulatedExecutor::kOutputToken ? 1.0f : 0.0f);
    }
  }
}

TEST(SimExecutorTest, PrefillIsFlopsOverPeak) {
  VirtualClock clock;
  SimulatedExecutor ex(config_for(llama70b_on("H100")), clock);
  const Batch b = uniform_batch(1, 2048, 2048);
  const ModelCost m = model_cost(*find_planner_model("llama-3-70b"));
  // 2 FLOPs per parameter per token, plus attention: 4 x L x N x H per causal pair.
  const double pairs = 2048.0 * 2049.0 / 2;
  const double flops = 2.0 * m.n_params * 2048 + 4.0 * 80 * 64 * 128 * pairs;
  const SimStepCost c = ex.step_cost(b);
  EXPECT_TRUE(c.compute_bound);
  EXPECT_NEAR(c.seconds(), flops / 9.89e14, flops / 9.89e14 * 1e-12);
}

TEST(SimExecutorTest, TensorParallelAggregatesChipsAndAddsAllReduces) {
  VirtualClock clock;
  SimulatedExecutor ex(config_for(llama70b_on("H100", 4)), clock);
  const Batch b = uniform_batch(4, 1, 512);
  const ModelCost m = model_cost(*find_planner_model("llama-3-70b"));
  const double kv_per_token = 2.0 * 80 * 8 * 128 * 2;
  const double compute = (2.0 * m.n_params + 4 * 512 * kv_per_token) / (4 * 3.35e12);
  // Per layer 2 all-reduces of [4 tokens, 8192] f32 plus the embedding's, each sending to the
  // 3 other ranks; then the logits rows' gather (3/4 of 128256 columns of 4 rows).
  const double stream = 3.0 * 4 * 8192 * 4;
  const double comm =
      (2.0 * 80 + 1) * (5e-6 + stream / 9e11) + 5e-6 + 3.0 * 4 * 128256 / 4 * 4 / 9e11;
  const SimStepCost c = ex.step_cost(b);
  EXPECT_NEAR(c.compute_s, compute, compute * 1e-12);
  EXPECT_NEAR(c.comm_s, comm, comm * 1e-12);
  Logits out;
  ASSERT_TRUE(ex.execute(b, out).ok());
  EXPECT_NEAR(ex.last_step_comm().seconds, comm, comm * 1e-12);
}

TEST(SimExecutorTest, PipelineMicroBatchesFillThePipeline) {
  VirtualClock clock;
  StepCostModel cost = llama70b_on("H100", 1, 4, 2);
  SimulatedExecutor ex(config_for(cost), clock);
  // Two sequences: micro-batches of one each, times t1 and t2 through the whole model; over 4
  // stages (t1 + t2 + 3 max) / 4.
  Batch b = uniform_batch(2, 1, 256);
  const ModelCost m = model_cost(*find_planner_model("llama-3-70b"));
  const double kv_per_token = 2.0 * 80 * 8 * 128 * 2;
  const double t1 = (2.0 * m.n_params + 256 * kv_per_token) / 3.35e12;
  const double want = (t1 + t1 + 3 * t1) / 4;
  const SimStepCost c = ex.step_cost(b);
  EXPECT_NEAR(c.compute_s, want, want * 1e-12);
  EXPECT_GT(c.comm_s, 0);
}

// Steps in flight over 2 stages: each stage runs half a step's compute, stage 1 on step 1 while
// stage 0 runs step 2, so two steps end at C and 1.5 C (plus messages), not C and 2 C.
TEST(SimExecutorTest, PipelinedStepsOverlapTheStages) {
  VirtualClock clock;
  SimExecutorConfig cfg = config_for(llama70b_on("H100", 1, 2, 1));
  cfg.pipeline_depth = 2;
  SimulatedExecutor ex(cfg, clock);
  ASSERT_EQ(ex.pipeline_depth(), 2);
  const Batch b = uniform_batch(8, 1, 1024);
  const SimStepCost c = ex.step_cost(b);
  ASSERT_GT(c.compute_s, 0);
  ASSERT_TRUE(ex.submit(b).ok());
  ASSERT_TRUE(ex.submit(b).ok());
  EXPECT_FALSE(ex.submit(b).ok());  // the pipeline is full
  EXPECT_EQ(clock.now(), 0);
  Logits out;
  ASSERT_TRUE(ex.collect(out).ok());
  EXPECT_NEAR(clock.now(), c.compute_s + c.comm_s, 1e-12);
  EXPECT_EQ(out.n_rows(), 8);
  ASSERT_TRUE(ex.collect(out).ok());
  EXPECT_NEAR(clock.now(), 1.5 * c.compute_s + c.comm_s, 1e-12);
  EXPECT_NEAR(ex.busy_seconds(), clock.now(), 1e-12);
  EXPECT_FALSE(ex.collect(out).ok());
  // A new step after a gap starts when it is submitted.
  clock.advance(10);
  ASSERT_TRUE(ex.submit(b).ok());
  ASSERT_TRUE(ex.collect(out).ok());
  EXPECT_NEAR(clock.now(), 10 + 2.5 * c.compute_s + 2 * c.comm_s, 1e-9);
  // One stage: execute() only.
  SimulatedExecutor one(config_for(llama70b_on("H100")), clock);
  EXPECT_EQ(one.pipeline_depth(), 1);
  EXPECT_FALSE(one.submit(b).ok());
}

TEST(SimExecutorTest, CalibrationScalesFloorsAndAddsOverheads) {
  VirtualClock clock;
  SimExecutorConfig cfg = config_for(llama70b_on("H100"));
  cfg.calibration.mem_efficiency = 0.8;
  cfg.calibration.step_overhead_s = 1e-3;
  cfg.calibration.per_seq_s = 1e-5;
  cfg.calibration.per_row_s = 2e-6;
  SimulatedExecutor ex(cfg, clock);
  const Batch b = uniform_batch(8, 1, 1024);
  const ModelCost m = model_cost(*find_planner_model("llama-3-70b"));
  const double floor = (2.0 * m.n_params + 8 * 1024 * 2.0 * 80 * 8 * 128 * 2) / 3.35e12;
  const double want = floor / 0.8 + 1e-3 + 8 * 1e-5 + 8 * 2e-6;
  EXPECT_NEAR(ex.step_cost(b).seconds(), want, want * 1e-12);
}

TEST(SimExecutorTest, BadBatchIsRefusedAndTimeStandsStill) {
  VirtualClock clock;
  SimulatedExecutor ex(config_for(llama70b_on("H100"), 8), clock);
  Batch b = uniform_batch(1, 1, 1024);  // 64 blocks, executor has 8
  Logits out;
  EXPECT_FALSE(ex.execute(b, out).ok());
  EXPECT_EQ(clock.now(), 0);
  EXPECT_EQ(ex.steps(), 0u);
}

// ---- the service ----

// A step of llama-3-70b, bf16, on one H100 with small_service's 0.1 ms step overhead, by hand
// from the cost formula in executor/sim_executor.h and independently of
// SimulatedExecutor::step_cost: overhead + max(bytes / bandwidth, FLOPs / peak), where the bytes
// are the weights plus every context token's K and V, and the FLOPs 2 per parameter per new
// token plus 4 x layers x heads x head_dim per causal (query, attended token) pair.
struct HandFloors {
  double bytes_s = 0, flops_s = 0;
};

HandFloors hand_step_floors(const Batch& b) {
  const double n_params = model_cost(*find_planner_model("llama-3-70b")).n_params;
  const double kv_per_token = 2.0 * 80 * 8 * 128 * 2;  // K and V, 80 layers x 8 heads x 128, bf16
  double bytes = 2.0 * n_params, flops = 0;
  for (const BatchSequence& s : b.seqs) {
    const double n = s.n_new_tokens, cached = double(s.context_len) - n;
    bytes += double(s.context_len) * kv_per_token;
    flops += 2.0 * n_params * n + 4.0 * 80 * 64 * 128 * (n * cached + n * (n + 1) / 2);
  }
  return {bytes / 3.35e12, flops / 9.89e14};
}

double hand_step_seconds(const Batch& b) {
  const HandFloors f = hand_step_floors(b);
  return 1e-4 + std::max(f.bytes_s, f.flops_s);
}

// The "real" side of the equivalence test: the fake executor (K/V kept per slot, read back
// through the block tables) with every logits row replaced by the simulated one, timed on a
// virtual clock by hand_step_seconds.
class TimedFake final : public Executor {
 public:
  TimedFake(const SimExecutorConfig& cfg, VirtualClock& clock)
      : fake_(cfg.capacity.n_blocks, cfg.capacity.block_size, cfg.capacity.n_vocab,
              cfg.capacity.n_ctx),
        clock_(clock) {}
  ExecutorCapacity capacity() const override { return fake_.capacity(); }
  Status execute(const Batch& batch, Logits& out) override {
    batches.push_back(batch);
    starts.push_back(clock_.now());
    SLUICE_RETURN_IF_ERROR(fake_.execute(batch, out));
    std::fill(out.values.begin(), out.values.end(), 0.0f);
    for (int r = 0; r < out.n_rows(); ++r) {
      out.values[size_t(r) * size_t(out.n_vocab) + SimulatedExecutor::kOutputToken] = 1.0f;
    }
    clock_.advance(hand_step_seconds(batch));
    return {};
  }
  Status copy_blocks(std::span<const BlockCopy> c) override { return fake_.copy_blocks(c); }
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override {
    return fake_.export_blocks(ids);
  }
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& d) override {
    return fake_.import_blocks(ids, d);
  }
  std::vector<Batch> batches;
  std::vector<double> starts;

 private:
  test::FakeExecutor fake_;
  VirtualClock& clock_;
};

// Requests sharing prefixes, arriving over time, more than the KV cache holds at once.
std::vector<sim::WorkItem> prefix_workload(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> word(kSyntheticFirstWord, kVocab - 1);
  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes) {
    p.resize(40);
    for (int32_t& t : p) t = word(rng);
  }
  std::vector<sim::WorkItem> out;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    sim::WorkItem w;
    w.prompt = prefixes[rng() % 3];
    const int extra = 5 + int(rng() % 60);
    for (int k = 0; k < extra; ++k) w.prompt.push_back(word(rng));
    w.output_tokens = 1 + int32_t(rng() % 40);
    t += double(rng() % 1000) * 1e-5;
    w.arrival_s = t;
    out.push_back(std::move(w));
  }
  return out;
}

sim::ServiceConfig small_service(int replicas, int32_t n_blocks) {
  sim::ServiceConfig c;
  c.replicas = replicas;
  c.executor = config_for(llama70b_on("H100"), n_blocks);
  c.executor.capacity.n_ctx = 512;
  c.executor.calibration.step_overhead_s = 1e-4;
  c.engine.n_ctx = 512;
  c.engine.scheduler.max_batch_tokens = 64;  // chunked prefill
  c.engine.scheduler.prefill_chunk = 32;
  c.engine.scheduler.max_seqs = 8;
  return c;
}

TEST(SimServiceTest, SameDecisionsAsTheRealEngineForTheSameArrivals) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  // 24 blocks of 16 tokens: a handful of requests fit, so admission waits and preemption occur.
  // Up to 256 tokens a step: wide prefill steps are compute-bound, decode steps memory-bound.
  sim::ServiceConfig cfg = small_service(1, 32);
  cfg.engine.scheduler.max_batch_tokens = 512;
  cfg.engine.scheduler.prefill_chunk = 256;
  const std::vector<sim::WorkItem> work = prefix_workload(40, 3);

  std::vector<Batch> sim_batches;
  std::vector<double> sim_starts;
  sim::ServiceConfig traced = cfg;
  traced.on_step = [&](int replica, const Batch& b, double t) {
    EXPECT_EQ(replica, 0);
    sim_batches.push_back(b);
    sim_starts.push_back(t);
  };
  auto picker = sim::make_router_picker({}, 1);
  Result<sim::ServiceReport> rep = sim::simulate_service(traced, tok, work, *picker);
  ASSERT_TRUE(rep.ok()) << rep.message();
  EXPECT_GT(rep->replicas[0].preemptions, 0u) << "the workload should force preemption";
  EXPECT_GT(rep->prefix.hit_blocks, 0u);

  // The reference: the real engine over the fake executor, arrivals delivered before the first
  // step that starts at or after them.
  VirtualClock clock;
  TimedFake fake(cfg.executor, clock);
  EngineConfig ec = cfg.engine;
  ec.clock = &clock;
  auto engine = Engine::create(tok, fake, ec);
  ASSERT_TRUE(engine.ok()) << engine.message();
  size_t next = 0;
  std::map<RequestId, size_t> item_of;
  std::vector<RequestTimes> times(work.size());
  while (next < work.size() || (*engine)->has_work()) {
    if (next < work.size() && (work[next].arrival_s <= clock.now() || !(*engine)->has_work())) {
      const double resume = std::max(clock.now(), work[next].arrival_s);
      clock.set(work[next].arrival_s);
      GenerationParams gp;
      gp.sampling.temperature = 0;
      gp.max_tokens = work[next].output_tokens;
      gp.ignore_eos = true;
      auto id = (*engine)->add_request(work[next].prompt, gp);
      ASSERT_TRUE(id.ok());
      item_of[*id] = next;
      clock.set(resume);
      ++next;
      continue;
    }
    auto ev = (*engine)->step();
    ASSERT_TRUE(ev.ok()) << ev.message();
    for (const EngineEvent& e : *ev) {
      if (e.finished()) times[item_of[e.id]] = *(*engine)->times(e.id);
    }
  }
  ASSERT_EQ(fake.batches.size(), sim_batches.size());
  // Both sides of the max() in hand_step_seconds are exercised.
  int compute_bound = 0;
  for (const Batch& b : fake.batches) {
    const HandFloors f = hand_step_floors(b);
    compute_bound += f.flops_s > f.bytes_s;
  }
  EXPECT_GT(compute_bound, 0);
  EXPECT_LT(compute_bound, int(fake.batches.size()));
  for (size_t i = 0; i < sim_batches.size(); ++i) {
    std::vector<uint8_t> a, b;
    serialize_batch(fake.batches[i], a);
    serialize_batch(sim_batches[i], b);
    ASSERT_EQ(a, b) << "step " << i << " differs";
    // The two clocks sum the same steps computed two ways: equal up to rounding.
    EXPECT_NEAR(fake.starts[i], sim_starts[i], 1e-9 * std::max(1.0, sim_starts[i])) << "step " << i;
  }
  for (size_t w = 0; w < work.size(); ++w) {
    const loadgen::RequestRecord& r = rep->records[w];
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_DOUBLE_EQ(r.start_s, times[w].arrival);
    EXPECT_NEAR(r.ttft_s, times[w].first_token - times[w].arrival, 1e-9);
    EXPECT_NEAR(r.e2el_s, times[w].finished - times[w].arrival, 1e-9);
    EXPECT_EQ(r.output_tokens, work[w].output_tokens);
  }
}

TEST(SimServiceTest, LoneRequestTimesAreItsStepCosts) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  sim::ServiceConfig cfg = small_service(1, 256);
  cfg.engine.scheduler.max_batch_tokens = 512;
  cfg.engine.scheduler.prefill_chunk = 512;
  std::vector<sim::WorkItem> work(1);
  work[0].arrival_s = 2.0;
  work[0].prompt.assign(100, 7);
  work[0].output_tokens = 3;
  auto picker = sim::make_router_picker({}, 1);
  auto rep = sim::simulate_service(cfg, tok, work, *picker);
  ASSERT_TRUE(rep.ok()) << rep.message();
  VirtualClock c;
  SimulatedExecutor model(cfg.executor, c);
  const double prefill = model.step_cost(uniform_batch(1, 100, 100)).seconds();
  const double decode1 = model.step_cost(uniform_batch(1, 1, 101)).seconds();
  const double decode2 = model.step_cost(uniform_batch(1, 1, 102)).seconds();
  const loadgen::RequestRecord& r = rep->records[0];
  EXPECT_DOUBLE_EQ(r.start_s, 2.0);
  EXPECT_NEAR(r.ttft_s, prefill, 1e-12);
  ASSERT_EQ(r.itl_s.size(), 2u);
  EXPECT_NEAR(r.itl_s[0], decode1, 1e-12);
  EXPECT_NEAR(r.itl_s[1], decode2, 1e-12);
  EXPECT_NEAR(rep->virtual_s, 2.0 + prefill + decode1 + decode2, 1e-12);
}

bool same_records(const sim::ServiceReport& a, const sim::ServiceReport& b) {
  if (a.records.size() != b.records.size()) return false;
  for (size_t i = 0; i < a.records.size(); ++i) {
    const auto &x = a.records[i], &y = b.records[i];
    if (x.ok != y.ok || x.ttft_s != y.ttft_s || x.e2el_s != y.e2el_s || x.itl_s != y.itl_s ||
        x.output_tokens != y.output_tokens)
      return false;
  }
  return a.steps == b.steps && a.prefix.hit_blocks == b.prefix.hit_blocks;
}

// A workload drawn from `seed` as `sluice sim` draws one: prompts and lengths, and bursty
// gamma-distributed arrivals (loadgen::arrival_schedule, 40 requests/s).
std::vector<sim::WorkItem> seeded_workload(uint64_t seed) {
  std::vector<sim::WorkItem> work = prefix_workload(60, seed);
  const std::vector<double> t = loadgen::arrival_schedule(work.size(), 40, 0.5, seed);
  for (size_t i = 0; i < work.size(); ++i) work[i].arrival_s = t[i];
  return work;
}

// The same seed gives the same report, also after another run in the same process (no state
// carried between runs); another seed gives another report, so the comparison can tell them
// apart. (cli_sim_test compares reports of separate `sluice sim` processes.)
TEST(SimServiceTest, SeededRunsRepeatExactlyAndOtherSeedsDiffer) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  const sim::ServiceConfig cfg = small_service(3, 64);
  for (const char* policy : {"cache_aware", "least_load", "round_robin"}) {
    router::PolicyConfig pc;
    pc.policy = *router::parse_policy(policy);
    auto run = [&](uint64_t seed) {
      auto picker = sim::make_router_picker(pc, 3);
      Result<sim::ServiceReport> r =
          sim::simulate_service(cfg, tok, seeded_workload(seed), *picker);
      EXPECT_TRUE(r.ok()) << r.message();
      return r.ok() ? *r : sim::ServiceReport{};
    };
    const sim::ServiceReport first = run(9), other = run(10), again = run(9);
    ASSERT_EQ(first.records.size(), 60u) << policy;
    EXPECT_TRUE(same_records(first, again)) << policy;
    EXPECT_FALSE(same_records(first, other)) << policy;
  }
}

TEST(SimServiceTest, CacheAwareRoutingKeepsConversationsTogether) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  sim::ServiceConfig cfg = small_service(4, 512);
  cfg.engine.scheduler.max_batch_tokens = 512;
  cfg.engine.scheduler.prefill_chunk = 512;
  loadgen::MultiturnParams mp;
  mp.n_conversations = 15;  // not a multiple of the replicas: round robin moves each turn
  mp.n_turns = 4;
  mp.system_len = 20;
  mp.user_len = 30;
  mp.output_len = 8;
  mp.rate = 50;
  mp.vocab_size = kVocab;
  auto ds = loadgen::make_multiturn(mp, nullptr);
  ASSERT_TRUE(ds.ok()) << ds.message();
  std::vector<sim::WorkItem> work;
  for (const auto& r : ds->requests) {
    work.push_back({r.arrival_s, r.prompt_ids, int32_t(r.output_tokens)});
  }
  std::map<std::string, double> hit;
  std::map<std::string, std::vector<int64_t>> per_replica;
  for (const char* policy : {"cache_aware", "round_robin"}) {
    router::PolicyConfig pc;
    pc.policy = *router::parse_policy(policy);
    auto picker = sim::make_router_picker(pc, 4);
    auto rep = sim::simulate_service(cfg, tok, work, *picker);
    ASSERT_TRUE(rep.ok()) << rep.message();
    hit[policy] = double(rep->prefix.hit_tokens);
    for (const auto& r : rep->replicas) per_replica[policy].push_back(r.requests);
  }
  // Round robin spreads the 60 requests evenly (and each conversation's turns over replicas).
  EXPECT_EQ(per_replica["round_robin"], (std::vector<int64_t>{15, 15, 15, 15}));
  EXPECT_GT(hit["cache_aware"], 1.5 * hit["round_robin"]);
}

TEST(SimServiceTest, RequestThatCanNeverFitIsAnError) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  sim::ServiceConfig cfg = small_service(1, 4);  // 64 tokens of KV
  std::vector<sim::WorkItem> work(1);
  work[0].prompt.assign(200, 5);
  work[0].output_tokens = 2;
  auto picker = sim::make_router_picker({}, 1);
  auto rep = sim::simulate_service(cfg, tok, work, *picker);
  if (rep.ok()) {
    // The engine may refuse it at admission instead: then the record says so.
    ASSERT_FALSE(rep->records[0].ok);
    EXPECT_FALSE(rep->records[0].error.empty());
  } else {
    EXPECT_NE(rep.message().find("cannot be scheduled"), std::string::npos) << rep.message();
  }
}

// ---- calibration ----

TEST(SimCalibrationTest, FitRecoversKnownCoefficients) {
  std::vector<sim::StepSample> s;
  const double e_mem = 0.7, e_comp = 0.45, over = 2e-3, per_seq = 3e-4;
  // Decode steps at two context lengths (KV bytes are not a function of the batch alone, as in
  // measure_engine_steps), so overhead, per-sequence cost and bandwidth separate.
  for (int b = 1; b <= 32; b *= 2) {
    for (double ctx : {1.0, 8.0}) {
      sim::StepSample x;
      x.n_seqs = b;
      x.n_rows = b;
      x.bytes_s = 0.02 + 1e-4 * b * ctx;
      x.flops_s = 1e-4 * b;
      x.measured_s = over + per_seq * b + x.bytes_s / e_mem;
      s.push_back(x);
    }
  }
  for (int n = 128; n <= 2048; n *= 2) {
    sim::StepSample x;
    x.n_seqs = 1;
    x.n_rows = 1;
    x.bytes_s = 0.021;
    x.flops_s = 2e-4 * n;
    x.measured_s = over + per_seq + x.flops_s / e_comp;
    s.push_back(x);
  }
  auto c = sim::fit_calibration(s);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_NEAR(c->mem_efficiency, e_mem, 1e-6);
  EXPECT_NEAR(c->compute_efficiency, e_comp, 1e-6);
  EXPECT_NEAR(c->step_overhead_s, over, 1e-9);
  EXPECT_NEAR(c->per_seq_s, per_seq, 1e-9);
  // Too few compute-bound steps: refused with the reason.
  s.resize(12);
  EXPECT_FALSE(sim::fit_calibration(s).ok());
}

TEST(SimCalibrationTest, SaveLoadRoundTripAndBadFiles) {
  const std::string path = testing::TempDir() + "/sim_cal.json";
  SimCalibration c;
  c.mem_efficiency = 0.81;
  c.compute_efficiency = 0.33;
  c.step_overhead_s = 1.5e-3;
  c.per_seq_s = 2e-5;
  c.source = "test";
  ASSERT_TRUE(sim::save_calibration(c, path).ok());
  auto l = sim::load_calibration(path);
  ASSERT_TRUE(l.ok()) << l.message();
  EXPECT_DOUBLE_EQ(l->mem_efficiency, 0.81);
  EXPECT_DOUBLE_EQ(l->compute_efficiency, 0.33);
  EXPECT_NEAR(l->step_overhead_s, 1.5e-3, 1e-15);
  EXPECT_NEAR(l->per_seq_s, 2e-5, 1e-15);
  EXPECT_EQ(l->source, "test");
  {
    std::ofstream f(path);
    f << R"({"mem_efficiency": 2.5})";
  }
  auto bad = sim::load_calibration(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("mem_efficiency"), std::string::npos);
  {
    std::ofstream f(path);
    f << R"({"mem_efficiency": 0.5, "source": 7})";
  }
  bad = sim::load_calibration(path);  // used to throw nlohmann::json::type_error
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'source' must be a string"), std::string::npos) << bad.message();
  {
    std::ofstream f(path);
    f << "not json";
  }
  EXPECT_FALSE(sim::load_calibration(path).ok());
  EXPECT_FALSE(sim::load_calibration(path + ".missing").ok());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(SimServiceTest, DisaggregatedPrefillHandsTheKvToADecodeReplica) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  sim::ServiceConfig cfg = small_service(0, 256);
  cfg.prefill_replicas = 1;
  cfg.decode_replicas = 1;
  cfg.kv_link_bytes_per_s = 1e9;
  cfg.kv_link_latency_s = 1e-3;
  cfg.kv_bytes_per_token = 1e5;
  cfg.engine.scheduler.max_batch_tokens = 512;
  cfg.engine.scheduler.prefill_chunk = 512;
  std::vector<sim::WorkItem> work(1);
  work[0].arrival_s = 1.0;
  work[0].prompt.assign(100, 7);  // 6 full blocks of 16 + 4 tokens
  work[0].output_tokens = 4;
  auto prefill = sim::make_router_picker({}, 1);
  auto decode = sim::make_router_picker({}, 1);
  auto rep = sim::simulate_service(cfg, tok, work, *prefill, decode.get());
  ASSERT_TRUE(rep.ok()) << rep.message();
  const loadgen::RequestRecord& r = rep->records[0];
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 4);
  ASSERT_EQ(rep->replicas.size(), 2u);
  EXPECT_EQ(rep->replicas[0].role, "prefill");
  EXPECT_EQ(rep->replicas[1].role, "decode");
  EXPECT_EQ(rep->kv_transfers, 1u);
  EXPECT_DOUBLE_EQ(rep->kv_transfer_bytes, 100 * 1e5);

  VirtualClock c;
  SimulatedExecutor model(cfg.executor, c);
  // Prefill replica: the whole prompt and the first token.
  EXPECT_NEAR(r.ttft_s, model.step_cost(uniform_batch(1, 100, 100)).seconds(), 1e-12);
  EXPECT_EQ(rep->replicas[0].prompt_tokens_computed, 100u);
  // Decode replica: 96 tokens imported; the 4-token tail and the first token computed in its
  // first step, which yields token 2 after the transfer.
  EXPECT_EQ(rep->replicas[1].prompt_tokens_computed, 5u);
  const double transfer = 1e-3 + 100 * 1e5 / 1e9;
  ASSERT_EQ(r.itl_s.size(), 3u);
  EXPECT_NEAR(r.itl_s[0], transfer + model.step_cost(uniform_batch(1, 5, 101)).seconds(), 1e-12);
  EXPECT_NEAR(r.itl_s[1], model.step_cost(uniform_batch(1, 1, 102)).seconds(), 1e-12);
  // Decode-side imports are not counted as prefix-cache reuse.
  EXPECT_EQ(rep->prefix.hit_blocks, 0u);
}

TEST(SimServiceTest, DisaggregatedNeedsBothPoolsAndALink) {
  Tokenizer tok = test::fake_tokenizer(kVocab);
  sim::ServiceConfig cfg = small_service(0, 64);
  cfg.prefill_replicas = 1;
  auto p = sim::make_router_picker({}, 1);
  auto d = sim::make_router_picker({}, 1);
  EXPECT_FALSE(sim::simulate_service(cfg, tok, prefix_workload(4, 1), *p, d.get()).ok());
  cfg.decode_replicas = 1;
  EXPECT_FALSE(sim::simulate_service(cfg, tok, prefix_workload(4, 1), *p, d.get()).ok());  // link
  cfg.kv_link_bytes_per_s = 1e10;
  cfg.kv_bytes_per_token = 1e3;
  auto ok = sim::simulate_service(cfg, tok, prefix_workload(20, 1), *p, d.get());
  ASSERT_TRUE(ok.ok()) << ok.message();
  for (const auto& r : ok->records) EXPECT_TRUE(r.ok) << r.error;
}

}  // namespace
}  // namespace sluice
