// Tensor parallelism over real MPI ranks (parallel/): run under `mpirun -np N` (ctest does, N = 2
// and 4), every rank runs every test in the same order. Rank 0 drives a ShardedExecutor and
// compares it with one unsharded executor of its own; the other ranks serve their shards with
// run_worker() until rank 0's executor is destroyed. Only rank 0's results are reported.
#include <gtest/gtest.h>

#include "executor/executor_contract.h"
#include "executor/executor_test_util.h"
#include "model/convert.h"
#include "model/golden_util.h"
#include "model/presets.h"
#include "parallel/mpi_comm.h"
#include "parallel/sharded_executor.h"
#include "test_util.h"

namespace sluice::parallel {
namespace {

MpiComm& comm() {
  static MpiComm* c = [] {
    auto r = MpiComm::init();
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.message().c_str());
      std::abort();
    }
    return *r;
  }();
  return *c;
}

TEST(Mpi, AllReduceAddsInRankOrderOnEveryRank) {
  MpiComm& c = comm();
  // Values whose float sum depends on the order: every rank must get (x0 + x1) + x2 ... bits.
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((c.rank() + 1) * 1e7 + double(i) * 0.37);
  std::vector<float> want(x.size(), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    float s = 0;
    for (int r = 0; r < c.size(); ++r) s += float((r + 1) * 1e7 + double(i) * 0.37);
    want[i] = s;
  }
  c.all_reduce_sum(x.data(), int64_t(x.size()));
  ASSERT_FALSE(c.failed()) << c.error();
  EXPECT_EQ(x, want);
}

TEST(Mpi, RanksThatDisagreeAreRefusedOnEveryRank) {
  MpiComm& c = comm();
  EXPECT_TRUE(check_ranks_agree(c, "model A").ok());
  const Status st = check_ranks_agree(c, c.rank() == c.size() - 1 ? "model B" : "model A");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank " + std::to_string(c.size() - 1) + " differs from rank 0"),
            std::string::npos)
      << st.message();
}

// This rank's shard of `path` as --tp tp --pp pp and its executor (options `eo`: one thread, 64
// blocks; `exact`: f32 K/V and the scalar kernels), once every rank agreed on them. Every rank
// calls it.
struct RankShard {
  std::unique_ptr<Model> shard;
  CpuExecutorOptions eo;
  std::unique_ptr<CpuExecutor> local;
};
void load_rank_shard(const std::string& path, int tp, int pp, bool exact, RankShard& out,
                     int block_size = 16, int n_blocks = 64) {
  MpiComm& c = comm();
  ASSERT_TRUE(c.set_layout(tp, pp).ok());
  ModelOptions mo;
  mo.tp_rank = c.rank();
  mo.tp_size = tp;
  mo.pp_rank = c.stage();
  mo.pp_size = pp;
  auto shard = Model::load(path, mo);
  ASSERT_TRUE(shard.ok()) << shard.message();
  out.shard = std::make_unique<Model>(std::move(shard).value());
  out.eo.n_threads = 1;
  out.eo.block_size = block_size;
  out.eo.n_blocks = n_blocks;
  if (exact) {
    out.eo.kv_type = KvType::kF32;
    out.eo.matmul_isa = MatmulIsa::kScalar;
  }
  out.eo.collective = &c;
  out.eo.stage_link = &c;
  auto local = CpuExecutor::create(*out.shard, out.eo);
  ASSERT_TRUE(local.ok()) << local.message();
  out.local = std::move(local).value();
  ASSERT_TRUE(check_ranks_agree(c, rank_fingerprint(*out.shard, describe_options(out.eo))).ok());
}

// Every rank loads its shard (tp ranks x pp stages); rank 0 compares the sharded run with one
// process of its own. `n_micro`: micro-batches a step with stages.
void check_model(const std::string& path, bool exact, int tp, int pp, int n_micro = 0) {
  MpiComm& c = comm();
  const std::string what = path + " --tp " + std::to_string(tp) + " --pp " + std::to_string(pp) +
                           (exact ? " exact" : " fast");
  SCOPED_TRACE(what);
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok()) << whole.message();
  if (pp > whole->config().n_layer) return;  // refused (model_shard_test); every rank agrees
  RankShard rs;
  load_rank_shard(path, tp, pp, exact, rs);
  if (::testing::Test::HasFatalFailure()) return;
  const CpuExecutorOptions& eo = rs.eo;
  if (c.world_rank() != 0) {
    const Status st = run_worker(c, *rs.local);
    ASSERT_TRUE(st.ok()) << st.message();
    return;
  }
  const std::vector<int32_t> prompt = {1, 45, 12, 300, 7, 99, 23, 210, 5, 64, 17, 400, 3};
  // The reference first (the workers wait for the first step meanwhile): the fast kernels'
  // sharded run is teacher-forced with its tokens (test::expect_rows_match).
  CpuExecutorOptions single_opts = eo;
  single_opts.collective = nullptr;
  single_opts.stage_link = nullptr;
  auto single = CpuExecutor::create(*whole, single_opts);
  ASSERT_TRUE(single.ok()) << single.message();
  const int n_groups = (*single)->capacity().n_kv_groups();
  const bool recurrent = (*single)->capacity().n_state_slots > 0;
  const test::Rows want =
      test::run_script([&](const Batch& b, Logits& o) { return (*single)->execute(b, o); }, 16, 64,
                       prompt, 12, nullptr, n_groups, recurrent);
  test::Rows got;
  {
    ShardedExecutor sharded(c, std::move(rs.local), n_micro);
    got = test::run_script([&](const Batch& b, Logits& o) { return sharded.execute(b, o); }, 16, 64,
                           prompt, 12, exact ? nullptr : &want.greedy, n_groups, recurrent);
    // A prefix shared by copy-on-write: block copies reach every rank.
    const BlockCopy copy{0, 63};
    ASSERT_TRUE(sharded.copy_blocks({&copy, 1}).ok());
    EXPECT_GT(sharded.last_step_comm().n_ops, 0);
    // KV blocks out of every rank and back into others: the same bytes, under a layout that
    // names the ranks' parts; another layout or a count mismatch is refused on every rank.
    const std::vector<int32_t> from = {0, 1, 2}, to = {60, 61, 62};
    auto out = sharded.export_blocks(from);
    ASSERT_TRUE(out.ok()) << out.message();
    EXPECT_EQ(out->layout.rfind("mpi " + std::to_string(tp) + "x" + std::to_string(pp) + " [", 0),
              0u)
        << out->layout;
    ASSERT_TRUE(sharded.import_blocks(to, *out).ok());
    auto back = sharded.export_blocks(to);
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->bytes, out->bytes);
    KvBlockData other = *out;
    other.layout = "f16 L5 H4 D8 B16 k-dim-major/v-row-major";
    EXPECT_FALSE(sharded.import_blocks(to, other).ok());
    EXPECT_FALSE(sharded.import_blocks({to.data(), 2}, *out).ok());
  }  // the workers stop here
  const double worst = test::expect_rows_match(got, want, !exact);
  EXPECT_LT(worst, exact ? 1e-4 : 1e-2);
  std::printf("[ mpi ] %s: worst rel-L2 %.2e\n", what.c_str(), worst);
}

// Every layout of this world's ranks: all tensor parallel, all pipeline, and the grids.
std::vector<std::pair<int, int>> layouts(int n) {
  std::vector<std::pair<int, int>> out;
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp == 0) out.push_back({tp, n / tp});
  }
  return out;
}

TEST(MpiParallel, GoldenModelsMatchOneProcess) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  // Heads: stories 8/4 (4 ranks: one K/V head each), gemma 4/1 (replicated), aidreams 4/4.
  const int n = comm().world_size();
  // The largest --tp each splits: phi3's fused QKV and the experts (64 wide: two Q8_0 blocks)
  // at most 2. Gated DeltaNet (model/shard.h: delta_net_split; each rank keeps its heads'
  // recurrent states): qwen35's 2 K / 4 V heads up to 4 (each K head on two ranks), qwen35moe's
  // 1 K / 2 V heads up to 2 (its experts and shared expert split as qwen2moe's).
  const std::pair<const char*, int> models[] = {
      {"stories260K.gguf", 8},   {"aidreams260K.gguf", 4}, {"arch/gemma.gguf", 4},
      {"arch/gemma2.gguf", 4},   {"arch/phi3.gguf", 2},    {"arch/mixtral.gguf", 2},
      {"arch/qwen2moe.gguf", 2}, {"arch/qwen35.gguf", 4},  {"arch/qwen35moe.gguf", 2}};
  for (const auto& [m, max_tp] : models) {
    for (const auto& [tp, pp] : layouts(n)) {
      if (tp > max_tp) continue;
      for (bool exact : {true, false}) check_model(dir + "/" + m, exact, tp, pp);
    }
  }
  ASSERT_TRUE(comm().set_layout(n, 1).ok());
}

// Quantized Gated DeltaNet shards: a synthetic qwen35 hybrid (2 K / 4 V heads of 64) in Q8_0,
// whose ssm_out splits in whole blocks per V head. Every rank writes its own copy (the same seed:
// the same bytes, which the ranks' fingerprints check). Exact mode only: with the fast kernels'
// 8-bit activations, a random-weight model this small has rows where the all-reduce's last-bit
// difference rounds an activation the other way (~7e-3 on a few rows, transient, near the bound);
// the golden models above run the fast kernels.
TEST(MpiParallel, QuantizedHybridMatchesOneProcess) {
  test::TempDir dir;
  const ModelPreset* preset = find_preset("tiny-qwen35");
  ASSERT_NE(preset, nullptr);
  SynthParams sp;
  sp.preset = preset;
  sp.ftype = FileType::MOSTLY_Q8_0;
  sp.seed = 35;
  sp.n_threads = 1;
  sp.out_path = dir.path("tiny-qwen35.gguf");
  const Status st = synthesize_model(sp);
  ASSERT_TRUE(st.ok()) << st.message();
  const int n = comm().world_size();
  for (const auto& [tp, pp] : layouts(n)) {
    if (tp > 1) check_model(sp.out_path, /*exact=*/true, tp, pp);
  }
  ASSERT_TRUE(comm().set_layout(n, 1).ok());
}

// The Executor contract (tests/executor/executor_contract.h), held by the sharded executor in
// every layout of this world's ranks as by the in-process implementations.
TEST(MpiParallel, ShardedExecutorKeepsTheExecutorContract) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  const std::string path = dir + "/stories260K.gguf";
  MpiComm& c = comm();
  const int n = c.world_size();
  for (const auto& [tp, pp] : layouts(n)) {
    const std::string what = "--tp " + std::to_string(tp) + " --pp " + std::to_string(pp);
    SCOPED_TRACE(what);
    RankShard rs;
    load_rank_shard(path, tp, pp, /*exact=*/false, rs, /*block_size=*/4, /*n_blocks=*/16);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    if (c.world_rank() != 0) {
      const Status st = run_worker(c, *rs.local);
      ASSERT_TRUE(st.ok()) << st.message();
      continue;
    }
    ShardedExecutor sharded(c, std::move(rs.local));
    test::check_refused_batches_write_nothing_and_good_ones_are_batch_invariant(sharded, what);
    test::check_copy_export_import_move_exactly_the_named_blocks(sharded, what);
  }  // the workers stop at each layout's end
  ASSERT_TRUE(c.set_layout(n, 1).ok());
}

// Pipeline stages over a ragged batch of two sequences: one micro-batch (no overlap) and one
// per sequence give the same logits.
TEST(MpiParallel, MicroBatchCountsAgree) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  const int n = comm().world_size();
  for (int n_micro : {1, 2, 5}) check_model(dir + "/stories260K.gguf", true, 1, n, n_micro);
  ASSERT_TRUE(comm().set_layout(n, 1).ok());
}

// Steps in flight (submit/collect): with --pp stages, `depth` steps of different sequences run
// at once, stage s on one while stage s - 1 runs the next. Each collected step's logits equal
// the one-process run of the same batches in the same order; an export while steps are in
// flight (every rank answers it) takes their logits first, and collect() still returns them.
TEST(MpiParallel, PipelinedStepsMatchOneProcess) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models");
  const std::string path = dir + "/stories260K.gguf";
  MpiComm& c = comm();
  const int n = c.world_size();
  for (const auto& [tp, pp] : layouts(n)) {
    if (pp == 1) continue;
    SCOPED_TRACE("--tp " + std::to_string(tp) + " --pp " + std::to_string(pp));
    auto whole = Model::load(path);
    ASSERT_TRUE(whole.ok()) << whole.message();
    RankShard rs;
    load_rank_shard(path, tp, pp, /*exact=*/true, rs);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const CpuExecutorOptions& eo = rs.eo;
    if (c.world_rank() != 0) {
      const Status st = run_worker(c, *rs.local);
      ASSERT_TRUE(st.ok()) << st.message();
      continue;
    }
    CpuExecutorOptions single_opts = eo;
    single_opts.collective = nullptr;
    single_opts.stage_link = nullptr;
    auto single = CpuExecutor::create(*whole, single_opts);
    ASSERT_TRUE(single.ok()) << single.message();
    // `pp` groups of two sequences each: prompts, then decode steps, group after group.
    std::vector<Batch> batches;
    {
      BlockFreeList blocks(64);
      std::vector<test::TestSequence> seqs(size_t(2 * pp));
      for (int step = 0; step < 6; ++step) {
        for (int g = 0; g < pp; ++g) {
          Batch b;
          b.block_size = 16;
          b.n_kv_groups = (*single)->capacity().n_kv_groups();
          for (int k = 0; k < 2; ++k) {
            test::TestSequence& sq = seqs[size_t(2 * g + k)];
            std::vector<int32_t> toks;
            for (int i = 0; i < (step == 0 ? 5 + 3 * k + g : 1); ++i) {
              toks.push_back(int32_t(1 + (97 * (g + 1) + 31 * k + 13 * step + 7 * i) % 500));
            }
            test::add_step(b, blocks, sq, toks, step == 0 ? LogitsMode::kAll : LogitsMode::kLast);
          }
          batches.push_back(std::move(b));
        }
      }
    }
    std::vector<Logits> want(batches.size());
    for (size_t i = 0; i < batches.size(); ++i) {
      ASSERT_TRUE((*single)->execute(batches[i], want[i]).ok());
    }
    ShardedExecutor sharded(c, std::move(rs.local));
    ASSERT_EQ(sharded.pipeline_depth(), pp);
    Batch too_many = batches[0];
    std::vector<Logits> got(batches.size());
    size_t next_collect = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      if (i - next_collect == size_t(pp)) {
        ASSERT_TRUE(sharded.collect(got[next_collect++]).ok());
      }
      ASSERT_TRUE(sharded.submit(batches[i]).ok());
      if (i + 1 == size_t(pp)) {
        // The pipeline is full: one more is refused, and so is execute().
        EXPECT_FALSE(sharded.submit(batches[i]).ok());
        Logits l;
        EXPECT_FALSE(sharded.execute(batches[i], l).ok());
        // Every rank answers an export: the steps in flight are taken first.
        auto ex = sharded.export_blocks(std::vector<int32_t>{0});
        EXPECT_TRUE(ex.ok()) << ex.message();
      }
    }
    while (next_collect < batches.size()) {
      ASSERT_TRUE(sharded.collect(got[next_collect++]).ok());
    }
    Logits none;
    EXPECT_FALSE(sharded.collect(none).ok());
    for (size_t i = 0; i < batches.size(); ++i) {
      ASSERT_EQ(got[i].n_rows(), want[i].n_rows()) << "step " << i;
      ASSERT_EQ(got[i].seq_index, want[i].seq_index) << "step " << i;
      for (int32_t r = 0; r < got[i].n_rows(); ++r) {
        EXPECT_LT(test::rel_l2(got[i].row(r), want[i].row(r), size_t(got[i].n_vocab)), 1e-4)
            << "step " << i << " row " << r;
      }
    }
  }  // the workers stop at each layout's end
  ASSERT_TRUE(c.set_layout(n, 1).ok());
}

}  // namespace
}  // namespace sluice::parallel

// Only rank 0 prints; every rank fails the run when its own tests fail.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = sluice::parallel::comm().rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  sluice::parallel::MpiComm::finalize();
  return rc;
}
