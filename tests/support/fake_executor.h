// A deterministic fake Executor for engine, scheduler-integration and server-bridge tests: no
// model, microseconds per step, and still a faithful test of the seam.
//
// Its "K/V" is the token id stored in each slot. The logits row for a position depend on every
// token of the context *as read back from the block table* (positions 0 .. p), so a wrong slot,
// a lost block copy, a stale block after a rollback or a bad prefix-cache hit changes the
// output, exactly as with a real model. The next token is a hash of the context, mostly
// repeating a short cycle (so n-gram drafts get accepted, and sometimes not):
//
//   logits[t] = -4 for every t; logits[next(ctx)] = 4, logits[alt(ctx)] = 3
//
// Sampling at temperature 0 takes next(ctx); at temperature 1 it is a real distribution.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "executor/executor.h"

namespace sluice::test {

class FakeExecutor final : public Executor {
 public:
  FakeExecutor(int32_t n_blocks, int32_t block_size, int32_t n_vocab, int32_t n_ctx)
      : cap_{n_blocks, block_size, n_vocab, n_ctx},
        slots_(size_t(n_blocks) * size_t(block_size), -1) {}

  ExecutorCapacity capacity() const override { return cap_; }

  // The first execute() whose batch has at least `min_seqs` sequences fails, as a backend that
  // dies mid-step would (once; later calls run); 0: never.
  void fail_when_batch_has(int32_t min_seqs) { fail_min_seqs_ = min_seqs; }
  // Each execute() takes at least this long (a slower "model", so requests overlap in time).
  void set_step_delay(std::chrono::microseconds d) { step_delay_ = d; }
  // Each execute() advances `clock` (the engine's EngineConfig::clock) by fixed + per_token x
  // the batch's tokens: a model whose step costs are known exactly.
  void set_virtual_cost(VirtualClock* clock, double fixed_s, double per_token_s) {
    clock_ = clock;
    fixed_s_ = fixed_s;
    per_token_s_ = per_token_s;
  }

  Status execute(const Batch& batch, Logits& out) override {
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
    if (clock_) clock_->advance(fixed_s_ + per_token_s_ * double(batch.n_tokens()));
    if (fail_min_seqs_ > 0 && batch.n_seqs() >= fail_min_seqs_) {
      fail_min_seqs_ = 0;
      return make_error("fake executor: backend lost (a batch of ", batch.n_seqs(), " sequences)");
    }
    SLUICE_RETURN_IF_ERROR(validate_batch(batch, cap_));
    SLUICE_RETURN_IF_ERROR(copy_blocks(batch.block_copies));
    last_batch_ = batch;
    ++n_executes_;
    n_tokens_ += uint64_t(batch.n_tokens());
    out.n_vocab = cap_.n_vocab;
    out.values.clear();
    out.seq_index.clear();
    out.token_index.clear();
    for (int32_t si = 0; si < batch.n_seqs(); ++si) {
      const BatchSequence& s = batch.seqs[size_t(si)];
      for (int32_t j = 0; j < s.n_new_tokens; ++j) {
        const size_t t = size_t(s.token_start + j);
        slot(batch.kv_slots[t].block_id, batch.kv_slots[t].offset) = batch.token_ids[t];
      }
      const int32_t first = s.context_len - s.n_new_tokens;
      for (int32_t j = 0; j < s.n_new_tokens; ++j) {
        const bool wanted = s.logits == LogitsMode::kAll ||
                            (s.logits == LogitsMode::kLast && j + 1 == s.n_new_tokens);
        if (!wanted) continue;
        // Hash the context read back through the block table: positions 0 .. first + j.
        uint64_t h = 0x9e3779b97f4a7c15ull;
        int32_t last = 0;
        for (int32_t p = 0; p <= first + j; ++p) {
          const int32_t b = batch.block_tables[size_t(s.block_table_start + p / cap_.block_size)];
          last = slot(b, p % cap_.block_size);
          h = (h ^ uint64_t(uint32_t(last))) * 0x100000001b3ull;
        }
        // Mostly a cycle over a few tokens (predictable), sometimes a hash jump.
        const int32_t next = (h >> 60) == 0 ? int32_t((h >> 20) % uint64_t(cap_.n_vocab))
                                            : (last * 7 + 3) % std::min(cap_.n_vocab, 29);
        const int32_t alt = int32_t((h >> 8) % uint64_t(cap_.n_vocab));
        const size_t row = out.values.size();
        out.values.resize(row + size_t(cap_.n_vocab), -4.0f);
        out.values[row + size_t(alt)] = 3.0f;
        out.values[row + size_t(next)] = 4.0f;
        out.seq_index.push_back(si);
        out.token_index.push_back(s.token_start + j);
      }
    }
    return {};
  }

  Status copy_blocks(std::span<const BlockCopy> copies) override {
    SLUICE_RETURN_IF_ERROR(validate_block_copies(copies, cap_.n_blocks));
    for (const BlockCopy& c : copies) {
      std::memcpy(&slot(c.dst, 0), &slot(c.src, 0), sizeof(int32_t) * size_t(cap_.block_size));
    }
    return {};
  }

  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override {
    KvBlockData d;
    d.layout = layout();
    d.bytes_per_block = sizeof(int32_t) * size_t(cap_.block_size);
    for (int32_t id : ids) {
      if (id < 0 || id >= cap_.n_blocks)
        return make_error("fake executor: block ", id, " out of range");
      const auto* p =
          reinterpret_cast<const uint8_t*>(&slots_[size_t(id) * size_t(cap_.block_size)]);
      d.bytes.insert(d.bytes.end(), p, p + d.bytes_per_block);
      ++d.n_blocks;
    }
    return d;
  }

  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) override {
    if (data.layout != layout()) return make_error("fake executor: layout '", data.layout, "'");
    if (int32_t(ids.size()) != data.n_blocks ||
        data.bytes.size() != size_t(data.n_blocks) * data.bytes_per_block) {
      return make_error("fake executor: ", ids.size(), " ids for ", data.n_blocks, " blocks");
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= cap_.n_blocks)
        return make_error("fake executor: block ", id, " out of range");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(&slot(ids[i], 0), data.bytes.data() + i * data.bytes_per_block,
                  data.bytes_per_block);
    }
    return {};
  }

  // Pipelined execution (Executor::pipeline_depth): submit() queues a batch, collect() runs
  // the oldest. submit() fails when the batch reads a K/V slot that a batch in flight writes
  // (a request in two batches at once, or a prefix hit on blocks not computed yet): with a real
  // pipeline it would read what is not there yet.
  void set_pipeline_depth(int32_t depth) { depth_ = depth; }
  int32_t pipeline_depth() const override { return depth_; }
  Status submit(const Batch& batch) override {
    if (depth_ <= 1) return Executor::submit(batch);
    if (int32_t(queue_.size()) >= depth_) {
      return make_error("fake executor: ", queue_.size(), " batches in flight already");
    }
    SLUICE_RETURN_IF_ERROR(validate_batch(batch, cap_));
    in_flight_writes_.resize(slots_.size(), 0);
    std::vector<uint8_t> mine(slots_.size(), 0);
    for (const KvSlot& k : batch.kv_slots) mine[slot_index(k.block_id, k.offset)] = 1;
    for (const BatchSequence& s : batch.seqs) {
      for (int32_t p = 0; p < s.context_len; ++p) {
        const int32_t b = batch.block_tables[size_t(s.block_table_start + p / cap_.block_size)];
        const size_t at = slot_index(b, p % cap_.block_size);
        if (!mine[at] && in_flight_writes_[at] > 0) {
          return make_error("fake executor: a batch reads block ", b, " slot ", p % cap_.block_size,
                            ", which a batch in flight writes");
        }
      }
    }
    for (const KvSlot& k : batch.kv_slots) ++in_flight_writes_[slot_index(k.block_id, k.offset)];
    queue_.push_back(batch);
    max_in_flight_ = std::max(max_in_flight_, int32_t(queue_.size()));
    return {};
  }
  Status collect(Logits& out) override {
    if (depth_ <= 1) return Executor::collect(out);
    if (queue_.empty()) return make_error("fake executor: nothing in flight");
    const Batch batch = std::move(queue_.front());
    queue_.erase(queue_.begin());
    for (const KvSlot& k : batch.kv_slots) --in_flight_writes_[slot_index(k.block_id, k.offset)];
    return execute(batch, out);
  }
  // The most batches that were in flight at once.
  int32_t max_in_flight() const { return max_in_flight_; }

  // The batch the last execute() ran (what a step computed: its drafts, its chunks).
  const Batch& last_batch() const { return last_batch_; }
  uint64_t n_executes() const { return n_executes_; }
  uint64_t n_tokens() const { return n_tokens_; }

 private:
  std::string layout() const { return "i32 fake B" + std::to_string(cap_.block_size); }
  size_t slot_index(int32_t block, int32_t offset) const {
    return size_t(block) * size_t(cap_.block_size) + size_t(offset);
  }
  int32_t& slot(int32_t block, int32_t offset) { return slots_[slot_index(block, offset)]; }

  ExecutorCapacity cap_;
  std::vector<int32_t> slots_;
  Batch last_batch_;
  uint64_t n_executes_ = 0;
  uint64_t n_tokens_ = 0;
  int32_t fail_min_seqs_ = 0;
  std::chrono::microseconds step_delay_{0};
  VirtualClock* clock_ = nullptr;
  double fixed_s_ = 0, per_token_s_ = 0;
  int32_t depth_ = 1;
  std::vector<Batch> queue_;               // submitted, not collected
  std::vector<int32_t> in_flight_writes_;  // per slot: batches in queue_ that write it
  int32_t max_in_flight_ = 0;
};

}  // namespace sluice::test

#include "tokenizer/synthetic.h"

namespace sluice::test {

// The fake executor's vocabulary: <unk>, <s>, </s> (end of generation), then "▁w3" ...
// "▁w<n-1>" (tokenizer/synthetic.h).
inline Tokenizer fake_tokenizer(int32_t n_vocab) {
  return std::move(make_synthetic_tokenizer(n_vocab)).value();
}

}  // namespace sluice::test
