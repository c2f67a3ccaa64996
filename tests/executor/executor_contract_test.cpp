// The Executor contract (executor/executor.h, checks in executor_contract.h) over the
// implementations that run in one process: the CPU executor on a tiny synthetic model, the fake
// executor of tests/support and the simulated executor (on a virtual clock). The sharded
// executor is held to the same checks over real MPI ranks in parallel_test.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>

#include "executor/cpu_executor.h"
#include "executor/executor_contract.h"
#include "executor/sim_executor.h"
#include "model/model_test_util.h"
#include "perf/hardware.h"
#include "perf/planner.h"
#include "support/fake_executor.h"
#include "test_util.h"

namespace sluice {
namespace {

struct Impl {
  std::string name;
  std::function<std::unique_ptr<Executor>()> make;
};

// Keeps the synthetic model alive for the CPU executor.
struct CpuHolder {
  test::TempDir dir;
  std::unique_ptr<Model> model;
};

// A CPU executor on a tiny synthetic model of `variant` (kept alive for the run).
std::unique_ptr<Executor> make_cpu_of(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<CpuHolder>> held;
  std::unique_ptr<CpuHolder>& h = held[variant];
  if (!h) {
    h = std::make_unique<CpuHolder>();
    const std::string path = h->dir.path(variant + ".gguf");
    test::write_synthetic_model(variant, FileType::MOSTLY_Q8_0, path);
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << m.message();
    if (!m.ok()) return nullptr;
    h->model = std::make_unique<Model>(std::move(*m));
  }
  CpuExecutorOptions o;
  o.block_size = 4;
  o.n_blocks = 16;
  o.n_threads = 1;
  auto e = CpuExecutor::create(*h->model, o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

std::unique_ptr<Executor> make_cpu() {
  return make_cpu_of("tiny");
}

std::unique_ptr<Executor> make_fake() {
  return std::make_unique<test::FakeExecutor>(16, 4, 64, 256);
}

// A simulated executor of a 7B-shaped model on an ideal machine (the numbers do not matter
// here: only the seam's contract), its clock kept alive for the run.
std::unique_ptr<Executor> make_sim() {
  static VirtualClock clock;
  SimExecutorConfig c;
  c.capacity = {16, 4, 64, 256};
  const ModelShape* shape = find_planner_model("llama-3-8b");
  EXPECT_NE(shape, nullptr);
  if (!shape) return nullptr;
  c.cost.model = model_cost(*shape);
  c.cost.precision = {16, 16, 16};
  c.cost.hw = *find_hardware("H100");
  return std::make_unique<SimulatedExecutor>(c, clock);
}

class ExecutorContract : public ::testing::TestWithParam<Impl> {};

TEST_P(ExecutorContract, RefusedBatchesWriteNothingAndGoodOnesAreBatchInvariant) {
  auto ex = GetParam().make();
  ASSERT_TRUE(ex);
  test::check_refused_batches_write_nothing_and_good_ones_are_batch_invariant(*ex, GetParam().name);
}

TEST_P(ExecutorContract, CopyExportImportMoveExactlyTheNamedBlocks) {
  auto ex = GetParam().make();
  ASSERT_TRUE(ex);
  test::check_copy_export_import_move_exactly_the_named_blocks(*ex, GetParam().name);
}

// Recurrent state slots move like blocks (export_states / import_states): an executor without
// state refuses both; a hybrid's exported slot imported into another slot continues the
// sequence there with the same logits, and a mismatched layout or count is refused.
TEST_P(ExecutorContract, StatesMoveExactlyTheNamedSlotsOrAreRefused) {
  auto ex = GetParam().make();
  EXPECT_FALSE(ex->export_states(std::vector<int32_t>{0}).ok()) << GetParam().name;
  EXPECT_FALSE(ex->import_states(std::vector<int32_t>{0}, KvBlockData{}).ok());
}

TEST(ExecutorContractHybrid, StatesMoveExactlyTheNamedSlots) {
  const std::unique_ptr<Executor> e = make_cpu_of("tiny-qwen35");
  ASSERT_TRUE(e);
  Executor& ex = *e;
  const std::vector<int32_t> prompt = {5, 17, 9, 3, 42, 7};
  const std::vector<int32_t> t = {3, 7};
  Logits out;
  Batch b;
  b.block_size = 4;
  b.add_sequence(prompt, 0, t, LogitsMode::kLast, /*state_slot=*/0);
  ASSERT_TRUE(ex.execute(b, out).ok());
  auto state = ex.export_states(std::vector<int32_t>{0});
  ASSERT_TRUE(state.ok()) << state.message();
  EXPECT_EQ(state->n_blocks, 1);
  EXPECT_EQ(state->bytes_per_block, ex.capacity().state_bytes_per_slot);
  EXPECT_EQ(state->layout.rfind("state f32 layers 0-4 R3 ", 0), 0u) << state->layout;
  // The next token from slot 0, then from slot 2 after the import: the same logits.
  const std::vector<int32_t> next = {11};
  b.clear();
  b.add_sequence(next, 6, t, LogitsMode::kLast, 0);
  ASSERT_TRUE(ex.execute(b, out).ok());
  const std::vector<float> want = out.values;
  ASSERT_TRUE(ex.import_states(std::vector<int32_t>{2}, *state).ok());
  b.clear();
  b.add_sequence(next, 6, t, LogitsMode::kLast, 2);
  ASSERT_TRUE(ex.execute(b, out).ok());
  EXPECT_EQ(out.values, want);
  // Slot 1 was never written: its export differs; bad imports write nothing.
  EXPECT_NE(ex.export_states(std::vector<int32_t>{1})->bytes, state->bytes);
  KvBlockData other = *state;
  other.layout += "x";
  EXPECT_FALSE(ex.import_states(std::vector<int32_t>{1}, other).ok());
  EXPECT_FALSE(ex.import_states(std::vector<int32_t>{1, 3}, *state).ok());
  EXPECT_FALSE(ex.import_states(std::vector<int32_t>{99}, *state).ok());
  EXPECT_FALSE(ex.export_states(std::vector<int32_t>{-1}).ok());
  EXPECT_EQ(ex.export_states(std::vector<int32_t>{1})->bytes,
            std::vector<uint8_t>(state->bytes.size(), 0));
}

INSTANTIATE_TEST_SUITE_P(Impls, ExecutorContract,
                         ::testing::Values(Impl{"cpu", make_cpu}, Impl{"fake", make_fake},
                                           Impl{"sim", make_sim}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice
