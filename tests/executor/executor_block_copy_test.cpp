// Copy-on-write of KV blocks (n samples sharing a prompt): CpuExecutor::copy_blocks and
// Batch::block_copies copy K and V of every layer, for every KV type, before the forward pass.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "executor/cpu_executor.h"
#include "model/model_test_util.h"

namespace sluice {
namespace {

// Bytes of block `b` of layer `layer`'s K (or V) cache.
std::vector<uint8_t> block_bytes(const CpuExecutor& e, int layer, bool v, int32_t b) {
  const KvCacheShape& sh = e.kv_cache().shape();
  const size_t n = sh.elems_per_block() * size_t(kv_type_size(sh.type));
  const uint8_t* base =
      static_cast<const uint8_t*>(v ? e.kv_cache().v(layer) : e.kv_cache().k(layer));
  return std::vector<uint8_t>(base + size_t(b) * n, base + size_t(b + 1) * n);
}

bool blocks_equal(const CpuExecutor& e, int32_t a, int32_t b) {
  for (int l = 0; l < e.kv_cache().shape().n_layer; ++l) {
    for (bool v : {false, true}) {
      if (block_bytes(e, l, v, a) != block_bytes(e, l, v, b)) return false;
    }
  }
  return true;
}

TEST(BlockCopy, CopiesKAndVOfEveryLayerBeforeTheStepForEachKvType) {
  test::TempDir dir;
  const std::string path = dir.path("tiny.gguf");
  test::write_synthetic_model("tiny", FileType::MOSTLY_Q8_0, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  for (KvType kv : {KvType::kF16, KvType::kF32}) {
    CpuExecutorOptions opts;
    opts.block_size = 4;
    opts.n_blocks = 8;
    opts.kv_type = kv;
    opts.n_threads = 2;
    auto exec = CpuExecutor::create(*model, opts);
    ASSERT_TRUE(exec.ok()) << exec.message();
    CpuExecutor& e = **exec;
    Batch batch;
    batch.block_size = 4;
    Logits out;
    // A 6-token prompt in blocks {2, 5}: block 5 holds positions 4, 5 (partial).
    const std::vector<int32_t> prompt = {5, 17, 99, 3, 42, 7};
    const std::vector<int32_t> table_a = {2, 5}, table_b = {2, 6};
    batch.add_sequence(prompt, 0, table_a, LogitsMode::kLast);
    ASSERT_TRUE(e.execute(batch, out).ok());
    EXPECT_FALSE(blocks_equal(e, 5, 6));  // 6 is still zero

    // Two samples decode the same token at position 6: A in place, B in a copy of block 5.
    batch.clear();
    batch.add_sequence(std::vector<int32_t>{11}, 6, table_a, LogitsMode::kLast);
    batch.add_sequence(std::vector<int32_t>{11}, 6, table_b, LogitsMode::kLast);
    Batch without = batch;
    batch.block_copies.push_back({5, 6});
    ASSERT_TRUE(e.execute(batch, out).ok());
    ASSERT_EQ(out.n_rows(), 2);
    EXPECT_EQ(std::memcmp(out.row(0), out.row(1), sizeof(float) * size_t(out.n_vocab)), 0);
    EXPECT_TRUE(blocks_equal(e, 5, 6));  // same contents, position 6 written in both
    // Without the copy, B attends to an empty block and its logits differ.
    ASSERT_TRUE(e.copy_blocks(std::vector<BlockCopy>{{0, 6}}).ok());  // block 0: never written
    ASSERT_TRUE(e.execute(without, out).ok());
    EXPECT_NE(std::memcmp(out.row(0), out.row(1), sizeof(float) * size_t(out.n_vocab)), 0);

    // copy_blocks applies copies in order, every layer.
    ASSERT_TRUE(e.copy_blocks(std::vector<BlockCopy>{{2, 7}, {5, 2}}).ok());
    EXPECT_FALSE(blocks_equal(e, 7, 5));
    EXPECT_TRUE(blocks_equal(e, 2, 5));
    // Bad copies fail and copy nothing; a batch carrying one is rejected before any write.
    const std::vector<uint8_t> k1 = block_bytes(e, 0, false, 1);
    for (BlockCopy bad : {BlockCopy{3, 3}, BlockCopy{-1, 1}, BlockCopy{1, 8}}) {
      EXPECT_FALSE(e.copy_blocks(std::vector<BlockCopy>{{5, 1}, bad}).ok());
      batch.block_copies = {{5, 1}, bad};
      const Status s = e.execute(batch, out);
      EXPECT_FALSE(s.ok());
      EXPECT_NE(s.message().find("block copy 1"), std::string::npos) << s.message();
    }
    EXPECT_EQ(block_bytes(e, 0, false, 1), k1);
  }
}

// Export / import of blocks by id through the Executor interface (disaggregation, KV tiers):
// a round trip reproduces the K/V of every layer; a layout, count or id mismatch is refused and
// writes nothing.
TEST(BlockCopy, ExportImportRoundTripAndRefusals) {
  test::TempDir dir;
  const std::string path = dir.path("tiny.gguf");
  test::write_synthetic_model("tiny", FileType::MOSTLY_Q8_0, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  CpuExecutorOptions opts;
  opts.block_size = 4;
  opts.n_blocks = 8;
  opts.n_threads = 1;
  auto exec = CpuExecutor::create(*model, opts);
  ASSERT_TRUE(exec.ok()) << exec.message();
  CpuExecutor& e = **exec;
  Executor& ex = e;
  Batch batch;
  batch.block_size = 4;
  Logits out;
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 42, 7};
  const std::vector<int32_t> table = {2, 5};
  batch.add_sequence(prompt, 0, table, LogitsMode::kLast);
  ASSERT_TRUE(ex.execute(batch, out).ok());
  auto data = ex.export_blocks(table);
  ASSERT_TRUE(data.ok()) << data.message();
  EXPECT_EQ(data->n_blocks, 2);
  EXPECT_NE(data->layout.find("f16 L"), std::string::npos) << data->layout;
  const std::vector<int32_t> dst = {6, 1};
  ASSERT_TRUE(ex.import_blocks(dst, *data).ok());
  EXPECT_TRUE(blocks_equal(e, 2, 6));
  EXPECT_TRUE(blocks_equal(e, 5, 1));
  EXPECT_FALSE(blocks_equal(e, 2, 1));

  KvBlockData bad = *data;
  bad.layout = "f32 L1 H1 D1 B4 other";
  EXPECT_FALSE(ex.import_blocks(std::vector<int32_t>{3, 4}, bad).ok());
  EXPECT_FALSE(ex.import_blocks(std::vector<int32_t>{3}, *data).ok()) << "count mismatch";
  EXPECT_FALSE(ex.import_blocks(std::vector<int32_t>{3, 8}, *data).ok()) << "id out of range";
  EXPECT_FALSE(blocks_equal(e, 2, 3)) << "a refused import writes nothing";
  EXPECT_FALSE(ex.export_blocks(std::vector<int32_t>{-1}).ok());
  const ExecutorCapacity cap = ex.capacity();
  EXPECT_EQ(cap.n_blocks, 8);
  EXPECT_EQ(cap.block_size, 4);
}

// Executor::concurrent_export: exporting blocks no step writes while steps run on another thread
// gives the same bytes as at rest (and, under the TSan configuration, no race is reported).
TEST(BlockCopy, ExportOfUnwrittenBlocksRunsBesideSteps) {
  test::TempDir dir;
  const std::string path = dir.path("tiny.gguf");
  test::write_synthetic_model("tiny", FileType::MOSTLY_Q8_0, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  CpuExecutorOptions opts;
  opts.block_size = 4;
  opts.n_blocks = 16;
  opts.n_threads = 1;
  auto exec = CpuExecutor::create(*model, opts);
  ASSERT_TRUE(exec.ok()) << exec.message();
  Executor& ex = **exec;
  ASSERT_TRUE(ex.concurrent_export());
  Logits out;
  Batch pinned;
  pinned.block_size = 4;
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 42, 7, 8, 9};
  const std::vector<int32_t> table = {2, 5};
  pinned.add_sequence(prompt, 0, table, LogitsMode::kLast);
  ASSERT_TRUE(ex.execute(pinned, out).ok());
  auto at_rest = ex.export_blocks(std::vector<int32_t>{2, 5});
  ASSERT_TRUE(at_rest.ok());
  std::atomic<bool> stop{false};
  std::thread steps([&] {
    Logits o;
    for (int32_t i = 0; !stop.load(); ++i) {
      Batch b;
      b.block_size = 4;
      const std::vector<int32_t> tokens = {int32_t(i % 50), 1, 2, 3, 4, 5, 6};
      const std::vector<int32_t> blocks = {8, 9};
      b.add_sequence(tokens, 0, blocks, LogitsMode::kLast);
      ASSERT_TRUE(ex.execute(b, o).ok());
    }
  });
  for (int i = 0; i < 50; ++i) {
    auto now = ex.export_blocks(std::vector<int32_t>{2, 5});
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(now->bytes, at_rest->bytes);
  }
  stop = true;
  steps.join();
}

}  // namespace
}  // namespace sluice
