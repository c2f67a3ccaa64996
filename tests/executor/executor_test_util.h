// Helpers for executor tests: a sequence's block table grown on demand, and single-sequence
// runs (prompt, then one token at a time) to compare batched runs against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/golden_util.h"

#include "executor/cpu_executor.h"

namespace sluice::test {

// One sequence as the engine will track it: its tokens so far and its blocks.
struct TestSequence {
  std::vector<int32_t> tokens;               // all tokens fed so far (num_computed_tokens = size)
  std::vector<std::vector<int32_t>> tables;  // its block table per K/V group (every block kept)
  int32_t state_slot = -1;  // its recurrent state slot (models with recurrent layers: set it)
};

// A batch for `exec`: its block size and K/V groups.
inline Batch batch_for(const Executor& exec) {
  Batch b;
  b.block_size = exec.capacity().block_size;
  b.n_kv_groups = exec.capacity().n_kv_groups();
  return b;
}

// Adds `new_tokens` of `seq` to `batch`, growing its block tables (batch.n_kv_groups of them)
// from `blocks`.
inline void add_step(Batch& batch, BlockFreeList& blocks, TestSequence& seq,
                     const std::vector<int32_t>& new_tokens, LogitsMode mode) {
  const int32_t n_computed = int32_t(seq.tokens.size());
  seq.tables.resize(size_t(batch.n_kv_groups));
  for (std::vector<int32_t>& table : seq.tables) {
    ASSERT_TRUE(
        blocks.allocate_for(n_computed + int32_t(new_tokens.size()), batch.block_size, table))
        << "out of KV blocks";
  }
  batch.add_sequence(new_tokens, n_computed, seq.tables, mode, seq.state_slot);
  seq.tokens.insert(seq.tokens.end(), new_tokens.begin(), new_tokens.end());
}

// Returns a sequence's blocks.
inline void free_blocks(BlockFreeList& blocks, TestSequence& seq) {
  for (const std::vector<int32_t>& table : seq.tables) blocks.free(table);
  seq.tables.clear();
}

// Runs `tokens` alone: the first `n_prompt` as one batch (logits for all), then the rest one
// per step. Returns one logits row per token. Frees its blocks afterwards.
inline std::vector<std::vector<float>> run_alone(CpuExecutor& exec, BlockFreeList& blocks,
                                                 const std::vector<int32_t>& tokens,
                                                 size_t n_prompt) {
  std::vector<std::vector<float>> rows;
  TestSequence seq;
  Batch batch = batch_for(exec);
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
  free_blocks(blocks, seq);
  return rows;
}

struct Rows {
  std::vector<std::vector<float>> logits;  // every row of every step
  std::vector<int32_t> greedy;
};

// A prompt in two chunks (the first without logits) beside a second prompt (logits for all),
// then `n_gen` steps decoding both (the greedy token of the last row, or `forced[i]` when given:
// teacher forcing, so that a near-tie decided the other way cannot change later rows): ragged
// batches with chunked prefill. `prompt` has at least two tokens. `recurrent`: the model has
// recurrent layers (the two sequences take state slots 0 and 1).
template <typename Exec>
Rows run_script(Exec&& execute, int block_size, int n_blocks, const std::vector<int32_t>& prompt,
                int n_gen, const std::vector<int32_t>* forced = nullptr, int n_kv_groups = 1,
                bool recurrent = false) {
  Rows rows;
  BlockFreeList blocks(n_blocks);
  test::TestSequence a, b;
  if (recurrent) {
    a.state_slot = 0;
    b.state_slot = 1;
  }
  Batch batch;
  batch.block_size = block_size;
  batch.n_kv_groups = n_kv_groups;
  Logits out;
  const size_t half = prompt.size() / 2;
  const std::vector<int32_t> p0(prompt.begin(), prompt.begin() + long(half));
  const std::vector<int32_t> p1(prompt.begin() + long(half), prompt.end());
  const std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
  const auto run = [&] {
    const Status s = execute(batch, out);
    EXPECT_TRUE(s.ok()) << s.message();
    for (int32_t r = 0; r < out.n_rows(); ++r)
      rows.logits.emplace_back(out.row(r), out.row(r) + out.n_vocab);
  };
  test::add_step(batch, blocks, a, p0, LogitsMode::kNone);
  test::add_step(batch, blocks, b, other, LogitsMode::kAll);
  run();
  batch.clear();
  test::add_step(batch, blocks, a, p1, LogitsMode::kLast);
  run();
  for (int i = 0; i < n_gen; ++i) {
    rows.greedy.push_back(test::argmax(rows.logits.back().data(), out.n_vocab));
    const int32_t tok = forced ? (*forced)[size_t(i)] : rows.greedy.back();
    batch.clear();
    test::add_step(batch, blocks, b, {tok}, LogitsMode::kLast);
    test::add_step(batch, blocks, a, {tok}, LogitsMode::kLast);
    run();
  }
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

// Compares a run's logits rows and greedy tokens with a reference run of the same script
// (`got` teacher-forced with want.greedy where `forced`). Returns the worst relative L2 of a row.
// Greedy tokens must be identical, except (forced runs only) where the reference's top two
// logits lie within 4 RMS of that row's measured error: a near-tie that rounding may decide
// either way (random-weight models with a final soft-cap have many).
inline double expect_rows_match(const Rows& got, const Rows& want, bool forced) {
  EXPECT_EQ(got.logits.size(), want.logits.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.logits.size(), want.logits.size()); ++i) {
    EXPECT_EQ(got.logits[i].size(), want.logits[i].size());
    worst =
        std::max(worst, rel_l2(got.logits[i].data(), want.logits[i].data(), want.logits[i].size()));
  }
  EXPECT_EQ(got.greedy.size(), want.greedy.size());
  const size_t n_gen = std::min(got.greedy.size(), want.greedy.size());
  for (size_t g = 0; g < n_gen; ++g) {
    if (got.greedy[g] == want.greedy[g]) continue;
    if (!forced) {
      ADD_FAILURE() << "greedy token " << g << ": " << got.greedy[g] << " != " << want.greedy[g];
      continue;
    }
    // The row that chose token g: the first prompt's last row (g = 0), then its decode rows,
    // each step's last (run_script: two rows a step, the first prompt's second).
    const size_t row = want.logits.size() - 1 - 2 * (n_gen - g);
    const std::vector<float>& w = want.logits[row];
    const std::vector<float>& o = got.logits[row];
    double err = 0;
    for (size_t j = 0; j < w.size(); ++j) err += (double(o[j]) - w[j]) * (double(o[j]) - w[j]);
    err = std::sqrt(err / double(w.size()));
    const double margin = double(w[size_t(want.greedy[g])]) - double(w[size_t(got.greedy[g])]);
    EXPECT_LE(margin, 4 * err) << "greedy token " << g << ": " << got.greedy[g]
                               << " != " << want.greedy[g] << " with a top-two margin of " << margin
                               << " (row error RMS " << err << ")";
  }
  return worst;
}

}  // namespace sluice::test
