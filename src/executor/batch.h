// Batch: the one value an executor runs. Plain data built by the engine from the scheduler's
// output, identical for every executor (CPU, CUDA, simulated) and cheap to broadcast to other
// ranks. A fresh prompt, a prompt chunk, a decode step and a speculative verification are all
// "a sequence with some new tokens"; one Batch carries any mix of them (ragged).
//
// Flat token arrays, sequences as ranges into them, block tables as ranges into one array:
//
//   token_ids   [ a0 a1 a2 a3 | b0 | c0 c1 ]       n_tokens = 7
//   positions   [  5  6  7  8 | 41 |  0  1 ]       a: chunk of a prompt, b: decode, c: new prompt
//   kv_slots    [ (block, offset) for each token ]
//   seqs        a: {token_start 0, n_new_tokens 4, context_len 9, table [0, 1)}, b: {4, 1, 42, [1,
//   4)} ... block_tables[ 7 | 2 9 4 | 5 ] block_copies[ (9 -> 4) ]     copy-on-write: block 4 takes
//   block 9's K/V before the step runs
//
// K/V groups (base/cache_layout.h): with n_kv_groups G > 1 each sequence has G block table
// rows of n_blocks entries, group-major (block_tables[start + g * n_blocks + i]), and each token
// G KV slots (kv_slots[t * G + g]). A windowed group's entries wholly before the window of the
// sequence's first new token may be stale (released blocks): valid ids whose contents are masked.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/block_copy.h"
#include "base/status.h"

namespace sluice {

// Which of a sequence's new tokens need logits: none (a prompt chunk that is not the last),
// the last one (prompt end, decode), or all (speculative verification, scoring a prompt).
// kPooled (embedding models): no logits but the sequence's pooled final hidden state (or a
// reranker's scores), one row per sequence of the model's pooled width (ModelConfig::pooling);
// the whole sequence is new in that step (context_len == n_new_tokens) and every sequence of
// the batch is kPooled.
enum class LogitsMode : uint8_t { kNone, kLast, kAll, kPooled };

// Where a new token's K/V goes: row `offset` of KV block `block_id`.
struct KvSlot {
  int32_t block_id = 0;
  int32_t offset = 0;
};

struct BatchSequence {
  int32_t token_start = 0;        // first new token in Batch::token_ids
  int32_t n_new_tokens = 0;       // >= 1
  int32_t context_len = 0;        // tokens with K/V after this step (computed + new)
  int32_t block_table_start = 0;  // its block tables: Batch::block_tables[start, start +
                                  // n_kv_groups * n_blocks), one row of n_blocks per group
  int32_t n_blocks = 0;           // >= ceil(context_len / block_size)
  LogitsMode logits = LogitsMode::kLast;
  // Models with recurrent layers: the sequence's state slot (ExecutorCapacity::n_state_slots),
  // holding its state after context_len - n_new_tokens tokens (zero when that is 0); -1: none.
  int32_t state_slot = -1;
  // Speculative verification on such models: slots [draft_state_slot, draft_state_slot +
  // n_new_tokens - 1) receive the state after each new token but the last (a rejected draft
  // rolls state_slot back to one with a state copy); -1: none.
  int32_t draft_state_slot = -1;
};

struct Batch {
  int32_t block_size = 16;            // tokens per KV block (must match the executor's)
  int32_t n_kv_groups = 1;            // K/V groups (must match the executor's)
  std::vector<int32_t> token_ids;     // [n_tokens]
  std::vector<int32_t> positions;     // [n_tokens] RoPE positions
  std::vector<KvSlot> kv_slots;       // [n_tokens][n_kv_groups]
  std::vector<BatchSequence> seqs;    // [n_seqs], tokens in order, back to back
  std::vector<int32_t> block_tables;  // concatenated block table rows
  // Applied in order before the forward pass (a later copy may overwrite an earlier source).
  std::vector<BlockCopy> block_copies;
  // Recurrent state slots copied (src -> dst) before the forward pass, after the block copies
  // (a forked sample takes its leader's state).
  std::vector<BlockCopy> state_copies;

  int32_t n_tokens() const { return int32_t(token_ids.size()); }
  int32_t n_seqs() const { return int32_t(seqs.size()); }
  // Rows of logits an executor returns for this batch.
  int32_t n_logit_rows() const;

  // Empties the batch, keeping capacity (no allocation in the steady state).
  void clear();

  // Appends one sequence's step: `tokens` are its new tokens, to be placed at positions
  // n_computed, n_computed + 1, ...; `block_table` lists the blocks of the whole sequence and
  // must cover n_computed + tokens.size() positions. Fills positions and KV slots from it.
  // One K/V group (n_kv_groups 1).
  void add_sequence(std::span<const int32_t> tokens, int32_t n_computed,
                    std::span<const int32_t> block_table, LogitsMode logits,
                    int32_t state_slot = -1);
  // The same with one block table per K/V group (n_kv_groups of them, all of one length).
  void add_sequence(std::span<const int32_t> tokens, int32_t n_computed,
                    std::span<const std::vector<int32_t>> block_tables, LogitsMode logits,
                    int32_t state_slot = -1);
};

// What batches an executor accepts (Executor::capacity()).
struct ExecutorCapacity {
  int32_t n_blocks = 0;    // KV blocks: ids [0, n_blocks)
  int32_t block_size = 0;  // tokens per block
  int32_t n_vocab = 0;     // token ids [0, n_vocab) and logits row width
  int32_t n_ctx = 0;       // longest context of one sequence
  // The K/V groups' windows (KvCacheLayout::group_window: > 0 that many newest positions, 0
  // global); empty: one global group. A windowed group's blocks wholly older than its window
  // are never read again and may be released while the sequence runs (their block table
  // entries are then stale, and masked).
  std::vector<int32_t> kv_group_windows = {};
  // K and V bytes of one block in this executor's memory (0: not known, or none).
  size_t bytes_per_block = 0;
  // Models with recurrent layers: state slots [0, n_state_slots), one per running sequence,
  // of state_bytes_per_slot bytes each; every sequence of a batch names one. 0: no state.
  int32_t n_state_slots = 0;
  size_t state_bytes_per_slot = 0;
  // Of those, the last n_draft_state_slots are for speculative verification (the engine's),
  // the n_state_checkpoints before them for saved states (prefix caching: the engine's
  // KvCacheManager keeps them), the others for running sequences.
  int32_t n_state_checkpoints = 0;
  int32_t n_draft_state_slots = 0;
  int32_t n_kv_groups() const {
    return kv_group_windows.empty() ? 1 : int32_t(kv_group_windows.size());
  }
  int32_t group_window(int32_t g) const {
    return kv_group_windows.empty() ? 0 : kv_group_windows[size_t(g)];
  }
};

// The checks every executor makes before running a batch: token ids in [0, n_vocab), positions
// non-negative, sequences back to back covering every token, contexts within n_ctx, block
// tables in range and long enough, each new token's KV slot where its block table puts its
// position, block copies valid. A message that names the first offending field.
Status validate_batch(const Batch& batch, const ExecutorCapacity& cap);
// Block copies alone: src and dst distinct and in [0, n_blocks).
Status validate_block_copies(std::span<const BlockCopy> copies, int32_t n_blocks);

// Flat wire form of a Batch (rank broadcast, remote executors): a 32-byte header
// ("SLBATCH3", block_size, then the counts of tokens, sequences, block-table entries and block
// copies, and n_kv_groups, u32 little-endian), then token_ids, positions, kv_slots (block,
// offset; n_kv_groups per token), seqs (eight i32 each: logits mode, state slot, then the draft
// state slot),
// block_tables, block_copies (src, dst), then the count of state copies and the state copies
// (src, dst), all i32 little-endian.
// Deterministic: equal batches give equal bytes.
void serialize_batch(const Batch& batch, std::vector<uint8_t>& out);
// The inverse. Checks the header and that the sizes add up exactly, and that every sequence's
// token and block-table ranges lie inside the arrays and its logits mode is known; the
// receiver still runs validate_batch against its capacity.
Result<Batch> deserialize_batch(std::span<const uint8_t> bytes);

// The executor's answer: one row of logits per requested position, in batch token order (a
// pooled batch: one row of n_vocab = the pooled width per sequence).
struct Logits {
  int32_t n_vocab = 0;
  std::vector<float> values;         // [n_rows, n_vocab]
  std::vector<int32_t> seq_index;    // [n_rows] the row's sequence (index into Batch::seqs)
  std::vector<int32_t> token_index;  // [n_rows] the row's token (index into Batch::token_ids)

  int32_t n_rows() const { return int32_t(seq_index.size()); }
  const float* row(int32_t i) const { return values.data() + int64_t(i) * n_vocab; }
};

// The rows an executor returns for `batch` (seq_index, token_index; values untouched): every
// token of a kAll sequence, the last of a kLast or kPooled one, in batch order.
void set_logit_rows(const Batch& batch, Logits& out);

// Pipeline micro-batches: `batch` cut into at most `n_parts` batches of whole, consecutive
// sequences (token counts as even as whole sequences allow), each self-contained (its own
// token, block-table and sequence offsets); the block copies go with the first part. Parts'
// logits rows, concatenated in order, are the whole batch's (append_logits).
void split_batch(const Batch& batch, int n_parts, std::vector<Batch>& parts);
// Appends a part's logits rows to `out` (the whole batch's), its sequence and token indices
// shifted by the part's first sequence and token in the whole batch.
void append_logits(const Logits& part, int32_t seq_offset, int32_t token_offset, Logits& out);

}  // namespace sluice
