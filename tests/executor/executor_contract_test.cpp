// The Executor contract (executor/executor.h), run against every implementation: the CPU
// executor on a tiny synthetic model and the fake executor of tests/support. Whatever an
// engine may rely on holds for both: a refused batch writes nothing, block copies and
// export/import move exactly the K/V of the named blocks, logits rows come in batch order,
// and the same step gives the same logits whatever else shares the batch.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>

#include "executor/cpu_executor.h"
#include "model/model_test_util.h"
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

class ExecutorContract : public ::testing::TestWithParam<Impl> {};

std::vector<float> rows_of(const Logits& l) {
  return l.values;
}

TEST_P(ExecutorContract, RefusedBatchesWriteNothingAndGoodOnesAreBatchInvariant) {
  auto ex = GetParam().make();
  const ExecutorCapacity cap = ex->capacity();
  ASSERT_EQ(cap.block_size, 4);
  Logits out;
  // Sequence A alone: a prompt of 6 in blocks {3, 7}.
  const std::vector<int32_t> a = {5, 17, 9, 3, 42, 7};
  const std::vector<int32_t> ta = {3, 7};
  Batch b;
  b.block_size = 4;
  b.add_sequence(a, 0, ta, LogitsMode::kAll);
  ASSERT_TRUE(ex->execute(b, out).ok());
  ASSERT_EQ(out.n_rows(), 6);
  const std::vector<float> alone = rows_of(out);
  const auto before = ex->export_blocks(ta);
  ASSERT_TRUE(before.ok());
  // A bad batch (a token outside the vocabulary) that would overwrite A's blocks: refused,
  // nothing written.
  Batch bad;
  bad.block_size = 4;
  bad.add_sequence(std::vector<int32_t>{1, cap.n_vocab}, 0, ta, LogitsMode::kLast);
  EXPECT_FALSE(ex->execute(bad, out).ok());
  bad.clear();
  bad.add_sequence(std::vector<int32_t>{1, 2}, 0, ta, LogitsMode::kLast);
  bad.block_copies.push_back({3, 3});
  EXPECT_FALSE(ex->execute(bad, out).ok());
  const auto after = ex->export_blocks(ta);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->bytes, before->bytes) << GetParam().name;
  // A again, recomputed in blocks {1, 2} next to another sequence: the same logits rows.
  Batch both;
  both.block_size = 4;
  const std::vector<int32_t> tb = {9};
  both.add_sequence(std::vector<int32_t>{8, 8, 8}, 0, tb, LogitsMode::kLast);
  const std::vector<int32_t> ta2 = {1, 2};
  both.add_sequence(a, 0, ta2, LogitsMode::kAll);
  ASSERT_TRUE(ex->execute(both, out).ok());
  ASSERT_EQ(out.n_rows(), 7);
  EXPECT_EQ(out.seq_index[0], 0);
  EXPECT_EQ(out.token_index[0], 2);
  for (int32_t r = 1; r < 7; ++r) {
    EXPECT_EQ(out.seq_index[size_t(r)], 1);
    EXPECT_EQ(out.token_index[size_t(r)], 2 + r);
  }
  const std::vector<float> mixed(out.values.begin() + cap.n_vocab, out.values.end());
  ASSERT_EQ(mixed.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    ASSERT_NEAR(mixed[i], alone[i], 1e-4f * (1.0f + std::fabs(alone[i]))) << GetParam().name;
  }
}

TEST_P(ExecutorContract, CopyExportImportMoveExactlyTheNamedBlocks) {
  auto ex = GetParam().make();
  Logits out;
  Batch b;
  b.block_size = 4;
  const std::vector<int32_t> t = {2, 5};
  b.add_sequence(std::vector<int32_t>{5, 17, 9, 3, 42, 7, 11, 12}, 0, t, LogitsMode::kLast);
  ASSERT_TRUE(ex->execute(b, out).ok());
  auto src = ex->export_blocks(t);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(ex->copy_blocks(std::vector<BlockCopy>{{2, 8}, {5, 9}}).ok());
  auto copied = ex->export_blocks(std::vector<int32_t>{8, 9});
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(copied->bytes, src->bytes);
  ASSERT_TRUE(ex->import_blocks(std::vector<int32_t>{12, 13}, *src).ok());
  auto imported = ex->export_blocks(std::vector<int32_t>{12, 13});
  EXPECT_EQ(imported->bytes, src->bytes);
  EXPECT_NE(
      ex->export_blocks(std::vector<int32_t>{14})->bytes,
      std::vector<uint8_t>(src->bytes.begin(), src->bytes.begin() + long(src->bytes_per_block)));
  EXPECT_FALSE(ex->copy_blocks(std::vector<BlockCopy>{{2, 16}}).ok());
  EXPECT_FALSE(ex->import_blocks(std::vector<int32_t>{12}, *src).ok());
  KvBlockData other = *src;
  other.layout += "x";
  EXPECT_FALSE(ex->import_blocks(std::vector<int32_t>{12, 13}, other).ok());
  EXPECT_FALSE(ex->export_blocks(std::vector<int32_t>{-1}).ok());
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
                         ::testing::Values(Impl{"cpu", make_cpu}, Impl{"fake", make_fake}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice
