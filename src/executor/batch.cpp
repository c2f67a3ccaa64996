#include "executor/batch.h"

namespace sluice {

int32_t Batch::n_logit_rows() const {
  int32_t n = 0;
  for (const BatchSequence& s : seqs) {
    if (s.logits == LogitsMode::kLast) n += 1;
    if (s.logits == LogitsMode::kAll) n += s.n_new_tokens;
  }
  return n;
}

void Batch::clear() {
  token_ids.clear();
  positions.clear();
  kv_slots.clear();
  seqs.clear();
  block_tables.clear();
  block_copies.clear();
}

void Batch::add_sequence(std::span<const int32_t> tokens, int32_t n_computed,
                         std::span<const int32_t> block_table, LogitsMode logits) {
  BatchSequence s;
  s.token_start = n_tokens();
  s.n_new_tokens = int32_t(tokens.size());
  s.context_len = n_computed + s.n_new_tokens;
  s.block_table_start = int32_t(block_tables.size());
  s.n_blocks = int32_t(block_table.size());
  s.logits = logits;
  for (int32_t j = 0; j < s.n_new_tokens; ++j) {
    const int32_t pos = n_computed + j;
    token_ids.push_back(tokens[size_t(j)]);
    positions.push_back(pos);
    // A table too short for the step gets block -1 here, which the executor rejects.
    const size_t b = size_t(pos / block_size);
    kv_slots.push_back({b < block_table.size() ? block_table[b] : -1, pos % block_size});
  }
  block_tables.insert(block_tables.end(), block_table.begin(), block_table.end());
  seqs.push_back(s);
}

}  // namespace sluice
