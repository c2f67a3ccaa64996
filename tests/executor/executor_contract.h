// The Executor contract (executor/executor.h) as checks over any implementation:
// executor_contract_test runs them on the CPU, fake and simulated executors, parallel_test on a
// ShardedExecutor over real MPI ranks in every layout of its world. Whatever an engine may rely
// on holds for each: a refused batch writes nothing, block copies and export/import move exactly
// the K/V of the named blocks, logits rows come in batch order, and the same step gives the same
// logits whatever else shares the batch.
//
// The executor must have blocks of 4 tokens, at least 16 blocks and a vocabulary of at least 64
// tokens; the checks may run one after the other on one executor (blocks 10 and 14 stay
// unwritten until the copy check reads them). An executor that keeps no K/V contents (the simulated
// one: exported blocks of 0 bytes) is held to everything but the contents.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "executor/executor.h"

namespace sluice::test {

// A sequence alone, then a refused batch that would overwrite its blocks, then the same
// sequence again in other blocks beside another sequence: nothing of the refused batch is
// written and the sequence's logits rows are the same (within 1e-4 relative), in batch order.
inline void check_refused_batches_write_nothing_and_good_ones_are_batch_invariant(
    Executor& ex, const std::string& name) {
  SCOPED_TRACE(name);
  const ExecutorCapacity cap = ex.capacity();
  ASSERT_EQ(cap.block_size, 4);
  ASSERT_GE(cap.n_blocks, 16);
  ASSERT_GE(cap.n_vocab, 64);
  Logits out;
  // Sequence A alone: a prompt of 6 in blocks {3, 7}.
  const std::vector<int32_t> a = {5, 17, 9, 3, 42, 7};
  const std::vector<int32_t> ta = {3, 7};
  Batch b;
  b.block_size = 4;
  b.add_sequence(a, 0, ta, LogitsMode::kAll);
  ASSERT_TRUE(ex.execute(b, out).ok());
  ASSERT_EQ(out.n_rows(), 6);
  ASSERT_EQ(out.values.size(), size_t(6) * size_t(cap.n_vocab));
  const std::vector<float> alone = out.values;
  const auto before = ex.export_blocks(ta);
  ASSERT_TRUE(before.ok()) << before.message();
  // A bad batch (a token outside the vocabulary) that would overwrite A's blocks: refused,
  // nothing written; so is one whose block copy names a block twice.
  Batch bad;
  bad.block_size = 4;
  bad.add_sequence(std::vector<int32_t>{1, cap.n_vocab}, 0, ta, LogitsMode::kLast);
  EXPECT_FALSE(ex.execute(bad, out).ok());
  bad.clear();
  bad.add_sequence(std::vector<int32_t>{1, 2}, 0, ta, LogitsMode::kLast);
  bad.block_copies.push_back({3, 3});
  EXPECT_FALSE(ex.execute(bad, out).ok());
  const auto after = ex.export_blocks(ta);
  ASSERT_TRUE(after.ok()) << after.message();
  EXPECT_EQ(after->bytes, before->bytes);
  // A again, recomputed in blocks {1, 2} after another sequence: the same logits rows.
  Batch both;
  both.block_size = 4;
  const std::vector<int32_t> tb = {9};
  both.add_sequence(std::vector<int32_t>{8, 8, 8}, 0, tb, LogitsMode::kLast);
  const std::vector<int32_t> ta2 = {1, 2};
  both.add_sequence(a, 0, ta2, LogitsMode::kAll);
  ASSERT_TRUE(ex.execute(both, out).ok());
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
    ASSERT_NEAR(mixed[i], alone[i], 1e-4f * (1.0f + std::fabs(alone[i]))) << "logit " << i;
  }
}

// Copy-on-write, export and import move exactly the named blocks; bad ids, counts and layouts
// are refused.
inline void check_copy_export_import_move_exactly_the_named_blocks(Executor& ex,
                                                                   const std::string& name) {
  SCOPED_TRACE(name);
  Logits out;
  Batch b;
  b.block_size = 4;
  const std::vector<int32_t> t = {2, 5};
  b.add_sequence(std::vector<int32_t>{5, 17, 9, 3, 42, 7, 11, 12}, 0, t, LogitsMode::kLast);
  ASSERT_TRUE(ex.execute(b, out).ok());
  auto src = ex.export_blocks(t);
  ASSERT_TRUE(src.ok()) << src.message();
  ASSERT_EQ(src->n_blocks, 2);
  ASSERT_EQ(src->bytes.size(), 2 * src->bytes_per_block);
  const bool contents = src->bytes_per_block > 0;
  ASSERT_TRUE(ex.copy_blocks(std::vector<BlockCopy>{{2, 8}, {5, 9}}).ok());
  auto copied = ex.export_blocks(std::vector<int32_t>{8, 9});
  ASSERT_TRUE(copied.ok()) << copied.message();
  EXPECT_EQ(copied->layout, src->layout);
  EXPECT_EQ(copied->bytes, src->bytes);
  ASSERT_TRUE(ex.import_blocks(std::vector<int32_t>{12, 13}, *src).ok());
  auto imported = ex.export_blocks(std::vector<int32_t>{12, 13});
  ASSERT_TRUE(imported.ok()) << imported.message();
  EXPECT_EQ(imported->bytes, src->bytes);
  // Blocks in any order and repeated: each as its id holds it.
  auto swapped = ex.export_blocks(std::vector<int32_t>{13, 12, 13});
  ASSERT_TRUE(swapped.ok()) << swapped.message();
  ASSERT_EQ(swapped->n_blocks, 3);
  const auto block = [&](const KvBlockData& d, size_t i) {
    return std::vector<uint8_t>(d.bytes.begin() + long(i * d.bytes_per_block),
                                d.bytes.begin() + long((i + 1) * d.bytes_per_block));
  };
  EXPECT_EQ(block(*swapped, 0), block(*src, 1));
  EXPECT_EQ(block(*swapped, 1), block(*src, 0));
  EXPECT_EQ(block(*swapped, 2), block(*src, 1));
  if (contents) {
    // A block nothing wrote is not a copy of one that was.
    EXPECT_NE(ex.export_blocks(std::vector<int32_t>{14})->bytes, block(*src, 0));
  }
  const int32_t n = ex.capacity().n_blocks;
  EXPECT_FALSE(ex.copy_blocks(std::vector<BlockCopy>{{2, n}}).ok());
  EXPECT_FALSE(ex.copy_blocks(std::vector<BlockCopy>{{2, 2}}).ok());
  EXPECT_FALSE(ex.import_blocks(std::vector<int32_t>{12}, *src).ok());
  EXPECT_FALSE(ex.import_blocks(std::vector<int32_t>{10, n}, *src).ok());
  KvBlockData other = *src;
  other.layout += "x";
  EXPECT_FALSE(ex.import_blocks(std::vector<int32_t>{12, 13}, other).ok());
  EXPECT_FALSE(ex.export_blocks(std::vector<int32_t>{-1}).ok());
  EXPECT_FALSE(ex.export_blocks(std::vector<int32_t>{n}).ok());
  // The refused imports wrote nothing.
  if (contents) {
    EXPECT_NE(ex.export_blocks(std::vector<int32_t>{10})->bytes, block(*src, 0));
  }
  EXPECT_EQ(ex.export_blocks(std::vector<int32_t>{12, 13})->bytes, src->bytes);
}

}  // namespace sluice::test
