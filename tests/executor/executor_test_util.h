// Helpers for executor tests: a sequence's block table grown on demand, and single-sequence
// runs (prompt, then one token at a time) to compare batched runs against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "executor/cpu_executor.h"

namespace sluice::test {

// One sequence as the engine will track it: its tokens so far and its blocks.
struct TestSequence {
  std::vector<int32_t> tokens;  // all tokens fed so far (num_computed_tokens = size)
  std::vector<int32_t> table;   // its block table
};

// Adds `new_tokens` of `seq` to `batch`, growing its block table from `blocks`.
inline void add_step(Batch& batch, BlockFreeList& blocks, TestSequence& seq,
                     const std::vector<int32_t>& new_tokens, LogitsMode mode) {
  const int32_t n_computed = int32_t(seq.tokens.size());
  ASSERT_TRUE(
      blocks.allocate_for(n_computed + int32_t(new_tokens.size()), batch.block_size, seq.table))
      << "out of KV blocks";
  batch.add_sequence(new_tokens, n_computed, seq.table, mode);
  seq.tokens.insert(seq.tokens.end(), new_tokens.begin(), new_tokens.end());
}

// Runs `tokens` alone: the first `n_prompt` as one batch (logits for all), then the rest one
// per step. Returns one logits row per token. Frees its blocks afterwards.
inline std::vector<std::vector<float>> run_alone(CpuExecutor& exec, BlockFreeList& blocks,
                                                 const std::vector<int32_t>& tokens,
                                                 size_t n_prompt) {
  std::vector<std::vector<float>> rows;
  TestSequence seq;
  Batch batch;
  batch.block_size = exec.block_size();
  Logits out;
  size_t i = 0;
  while (i < tokens.size()) {
    const size_t n = i == 0 ? std::max<size_t>(1, n_prompt) : 1;
    const std::vector<int32_t> step(tokens.begin() + long(i), tokens.begin() + long(i + n));
    batch.clear();
    add_step(batch, blocks, seq, step, LogitsMode::kAll);
    const Status s = exec.execute(batch, out);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) break;
    for (int32_t r = 0; r < out.n_rows(); ++r) {
      rows.emplace_back(out.row(r), out.row(r) + out.n_vocab);
    }
    i += n;
  }
  blocks.free(seq.table);
  return rows;
}

inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace sluice::test
