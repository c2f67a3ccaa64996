// Batch construction, the stand-in block allocator, and the executor's refusal of malformed
// batches (before anything is computed or written).
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "executor/cpu_executor.h"
#include "executor/executor_test_util.h"
#include "model/model_test_util.h"

namespace sluice {
namespace {

TEST(Batch, AddSequenceFillsPositionsAndSlots) {
  Batch b;
  b.block_size = 4;
  const std::vector<int32_t> table_a = {7, 2, 9};
  b.add_sequence(std::vector<int32_t>{10, 11, 12}, 3, table_a, LogitsMode::kAll);  // pos 3..5
  const std::vector<int32_t> table_b = {5};
  b.add_sequence(std::vector<int32_t>{20}, 0, table_b, LogitsMode::kLast);
  ASSERT_EQ(b.n_tokens(), 4);
  ASSERT_EQ(b.n_seqs(), 2);
  EXPECT_EQ(b.positions, (std::vector<int32_t>{3, 4, 5, 0}));
  EXPECT_EQ(b.kv_slots[0].block_id, 7);
  EXPECT_EQ(b.kv_slots[0].offset, 3);
  EXPECT_EQ(b.kv_slots[1].block_id, 2);
  EXPECT_EQ(b.kv_slots[1].offset, 0);
  EXPECT_EQ(b.kv_slots[3].block_id, 5);
  EXPECT_EQ(b.seqs[0].context_len, 6);
  EXPECT_EQ(b.seqs[1].token_start, 3);
  EXPECT_EQ(b.seqs[1].block_table_start, 3);
  EXPECT_EQ(b.n_logit_rows(), 4);
  b.clear();
  EXPECT_EQ(b.n_tokens(), 0);
  EXPECT_EQ(b.n_seqs(), 0);
}

// Pipeline micro-batches: random ragged batches cut into 1..n_seqs + 2 parts cover every
// sequence once, in order, each part non-empty and self-contained (the executor accepts it),
// block copies in the first; the parts' logits rows, appended, are the whole batch's rows
// (indices and values, on stories260K when ../shared has it).
TEST(Batch, SplitIntoMicroBatchesAndReassembleLogits) {
  std::mt19937 rng(29);
  const std::string model_path = test::shared_path("testdata/models/stories260K.gguf");
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuExecutor> exec;
  if (!model_path.empty()) {
    auto m = Model::load(model_path);
    ASSERT_TRUE(m.ok()) << m.message();
    model = std::make_unique<Model>(std::move(m).value());
    CpuExecutorOptions eo;
    eo.n_threads = 1;
    eo.n_blocks = 256;
    auto e = CpuExecutor::create(*model, eo);
    ASSERT_TRUE(e.ok()) << e.message();
    exec = std::move(e).value();
  }
  std::vector<Batch> parts;
  for (int trial = 0; trial < 200; ++trial) {
    Batch b;
    b.block_size = 16;
    BlockFreeList blocks(256);
    const int n_seqs = 1 + int(rng() % 9);
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seqs));
    for (int si = 0; si < n_seqs; ++si) {
      const int n_new = 1 + int(rng() % 20), n_computed = int(rng() % 40);
      ASSERT_TRUE(blocks.allocate_for(n_computed + n_new, 16, tables[size_t(si)]));
      std::vector<int32_t> toks(static_cast<size_t>(n_new));
      for (int32_t& t : toks) t = int32_t(rng() % 500);
      b.add_sequence(toks, n_computed, tables[size_t(si)], LogitsMode(rng() % 3));
    }
    if (rng() % 2) b.block_copies.push_back({250, 251});
    const int want_parts = 1 + int(rng() % size_t(n_seqs + 2));
    split_batch(b, want_parts, parts);
    ASSERT_EQ(int(parts.size()), std::min(want_parts, n_seqs));
    int32_t si = 0, tokens = 0;
    Logits whole, joined, part_out;
    for (size_t p = 0; p < parts.size(); ++p) {
      const Batch& part = parts[p];
      ASSERT_GT(part.n_seqs(), 0);
      EXPECT_EQ(part.block_copies.size(), p == 0 ? b.block_copies.size() : 0u);
      for (int32_t j = 0; j < part.n_seqs(); ++j, ++si) {
        const BatchSequence &x = part.seqs[size_t(j)], &y = b.seqs[size_t(si)];
        EXPECT_EQ(x.n_new_tokens, y.n_new_tokens);
        EXPECT_EQ(x.context_len, y.context_len);
        EXPECT_EQ(x.logits, y.logits);
        for (int32_t t = 0; t < x.n_new_tokens; ++t) {
          EXPECT_EQ(part.token_ids[size_t(x.token_start + t)],
                    b.token_ids[size_t(y.token_start + t)]);
          EXPECT_EQ(part.positions[size_t(x.token_start + t)],
                    b.positions[size_t(y.token_start + t)]);
        }
      }
      ExecutorCapacity cap{256, 16, 512, 1 << 20, {}};
      EXPECT_TRUE(validate_batch(part, cap).ok()) << validate_batch(part, cap).message();
      if (exec && trial < 20) {
        Batch run = part;
        run.block_copies.clear();
        ASSERT_TRUE(exec->execute(run, part_out).ok());
      } else {
        part_out.values.clear();
        set_logit_rows(part, part_out);
        part_out.values.assign(size_t(part_out.n_rows()), float(p));
      }
      append_logits(part_out, si - part.n_seqs(), tokens, joined);
      tokens += part.n_tokens();
    }
    EXPECT_EQ(si, b.n_seqs());
    EXPECT_EQ(tokens, b.n_tokens());
    set_logit_rows(b, whole);
    EXPECT_EQ(joined.seq_index, whole.seq_index);
    EXPECT_EQ(joined.token_index, whole.token_index);
    if (exec && trial < 20) {
      b.block_copies.clear();
      ASSERT_TRUE(exec->execute(b, whole).ok());
      EXPECT_EQ(joined.values, whole.values) << "trial " << trial;
    }
  }
}

// The wire form: a round trip gives the same batch and the same bytes; truncated, padded or
// inconsistent forms are refused; random corruption never crashes, and whatever still parses
// re-serializes to the same bytes.
TEST(Batch, WireFormRoundTripAndRefusals) {
  Batch b;
  b.block_size = 4;
  const std::vector<int32_t> table_a = {7, 2, 9};
  b.add_sequence(std::vector<int32_t>{10, 11, 12}, 3, table_a, LogitsMode::kAll);
  const std::vector<int32_t> table_b = {5};
  b.add_sequence(std::vector<int32_t>{20}, 0, table_b, LogitsMode::kLast);
  b.add_sequence(std::vector<int32_t>{21, 22}, 1, table_b, LogitsMode::kNone);
  b.block_copies.push_back({9, 4});
  std::vector<uint8_t> bytes;
  serialize_batch(b, bytes);
  EXPECT_EQ(bytes.size(), 32u + 4 * (4 * 6 + 8 * 3 + 5 + 2 + 1));
  auto back = deserialize_batch(bytes);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->token_ids, b.token_ids);
  EXPECT_EQ(back->positions, b.positions);
  EXPECT_EQ(back->block_tables, b.block_tables);
  ASSERT_EQ(back->seqs.size(), 3u);
  EXPECT_EQ(back->seqs[0].logits, LogitsMode::kAll);
  EXPECT_EQ(back->seqs[2].context_len, 3);
  EXPECT_EQ(back->kv_slots[1].block_id, 2);
  EXPECT_EQ(back->block_copies[0].dst, 4);
  std::vector<uint8_t> again;
  serialize_batch(*back, again);
  EXPECT_EQ(again, bytes);
  // State slots and state copies (recurrent layers) go along.
  Batch st = *back;
  st.seqs[1].state_slot = 5;
  st.seqs[2].draft_state_slot = 9;
  st.state_copies = {{5, 2}};
  serialize_batch(st, again);
  auto st_back = deserialize_batch(again);
  ASSERT_TRUE(st_back.ok()) << st_back.message();
  EXPECT_EQ(st_back->seqs[1].state_slot, 5);
  EXPECT_EQ(st_back->seqs[0].state_slot, -1);
  EXPECT_EQ(st_back->seqs[2].draft_state_slot, 9);
  EXPECT_EQ(st_back->seqs[1].draft_state_slot, -1);
  ASSERT_EQ(st_back->state_copies.size(), 1u);
  EXPECT_EQ(st_back->state_copies[0].src, 5);
  EXPECT_EQ(st_back->state_copies[0].dst, 2);
  // An empty batch is fine too.
  serialize_batch(Batch{}, again);
  EXPECT_TRUE(deserialize_batch(again).ok());

  EXPECT_FALSE(deserialize_batch(std::span<const uint8_t>(bytes.data(), 31)).ok());
  EXPECT_FALSE(deserialize_batch(std::span<const uint8_t>(bytes.data(), bytes.size() - 4)).ok());
  std::vector<uint8_t> bad = bytes;
  bad.push_back(0);
  EXPECT_FALSE(deserialize_batch(bad).ok()) << "trailing bytes";
  bad = bytes;
  bad[0] = 'X';
  EXPECT_FALSE(deserialize_batch(bad).ok()) << "magic";
  bad = bytes;
  bad[12] = 0xff;  // token count
  EXPECT_FALSE(deserialize_batch(bad).ok());
  // Sequence 1's token_start past the tokens.
  const size_t seq1 = 32 + 4 * (4 * 6) + 4 * 8;
  bad = bytes;
  bad[seq1] = 200;
  EXPECT_FALSE(deserialize_batch(bad).ok());
  bad = bytes;
  bad[seq1 + 20] = 7;  // logits mode
  EXPECT_FALSE(deserialize_batch(bad).ok());

  std::mt19937 rng(3);
  int parsed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    bad = bytes;
    for (int f = 0; f < 1 + int(rng() % 3); ++f) bad[rng() % bad.size()] = uint8_t(rng());
    auto r = deserialize_batch(bad);
    if (!r.ok()) continue;
    ++parsed;
    serialize_batch(*r, again);
    ASSERT_EQ(again, bad);
  }
  EXPECT_GT(parsed, 1000);
}

TEST(BlockFreeList, AllocateGrowFree) {
  BlockFreeList f(5);
  std::vector<int32_t> a, b;
  EXPECT_TRUE(f.allocate_for(17, 8, a));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_TRUE(f.allocate_for(17, 8, a));  // already covered
  EXPECT_EQ(a.size(), 3u);
  EXPECT_FALSE(f.allocate_for(24, 8, b));  // needs 3, 2 free
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(f.allocate_for(16, 8, b));
  EXPECT_EQ(f.n_free(), 0);
  f.free(a);
  EXPECT_EQ(f.n_free(), 3);
  EXPECT_TRUE(f.can_allocate(3));
}

class BadBatch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::write_synthetic_model("tiny", FileType::MOSTLY_F16, dir_->path("tiny.gguf"));
    model_ = new Model(std::move(Model::load(dir_->path("tiny.gguf"), {64, false})).value());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }
  void SetUp() override {
    CpuExecutorOptions o;
    o.block_size = 4;
    o.n_blocks = 8;
    exec_ = std::move(CpuExecutor::create(*model_, o)).value();
    good_.block_size = 4;
    good_.add_sequence(std::vector<int32_t>{1, 2, 3, 4, 5}, 0, std::vector<int32_t>{3, 6},
                       LogitsMode::kLast);
  }
  std::string error_of(const Batch& b) {
    Logits out;
    const Status s = exec_->execute(b, out);
    return s.ok() ? std::string() : s.message();
  }

  static test::TempDir* dir_;
  static Model* model_;
  std::unique_ptr<CpuExecutor> exec_;
  Batch good_;
};
test::TempDir* BadBatch::dir_ = nullptr;
Model* BadBatch::model_ = nullptr;

#define EXPECT_HAS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg) << "\nwanted: " << (part)

TEST_F(BadBatch, GoodBatchRuns) {
  EXPECT_EQ(error_of(good_), "");
  Batch empty;
  empty.block_size = 4;
  EXPECT_EQ(error_of(empty), "");
}

TEST_F(BadBatch, BlockSizeMismatch) {
  Batch b = good_;
  b.block_size = 16;
  EXPECT_HAS(error_of(b), "block size 16 differs from the executor's 4");
}

TEST_F(BadBatch, TokenOutOfVocab) {
  Batch b = good_;
  b.token_ids[2] = 512;
  EXPECT_HAS(error_of(b), "token id 512 at 2 is out of range [0, 512)");
}

TEST_F(BadBatch, BlockOutOfCache) {
  Batch b;
  b.block_size = 4;
  b.add_sequence(std::vector<int32_t>{1, 2, 3, 4, 5}, 0, std::vector<int32_t>{3, 8},
                 LogitsMode::kLast);
  EXPECT_HAS(error_of(b), "uses block 8 (the cache has 8; K/V group 0)");
}

TEST_F(BadBatch, TableTooShort) {
  Batch b;
  b.block_size = 4;
  b.add_sequence(std::vector<int32_t>{1, 2, 3, 4, 5}, 0, std::vector<int32_t>{3},
                 LogitsMode::kLast);
  EXPECT_HAS(error_of(b), "too short for 5 tokens");
}

TEST_F(BadBatch, SlotDisagreesWithTable) {
  Batch b = good_;
  b.kv_slots[4] = {3, 0};
  EXPECT_HAS(error_of(b), "has KV slot (3, 0) but its block table puts cache position 4 at (6, 0)");
}

TEST_F(BadBatch, ContextBeyondModel) {
  Batch b;
  b.block_size = 4;
  std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  b.add_sequence(std::vector<int32_t>{1}, 64, table, LogitsMode::kLast);
  EXPECT_HAS(error_of(b), "context length 65");
}

TEST_F(BadBatch, SequencesMustCoverTokens) {
  Batch b = good_;
  b.token_ids.push_back(1);
  b.positions.push_back(5);
  b.kv_slots.push_back({6, 1});
  EXPECT_HAS(error_of(b), "sequences cover 5 of 6 tokens");
  Batch c = good_;
  c.positions.pop_back();
  EXPECT_HAS(error_of(c), "5 token ids but 4 positions");
}

// batch_fuzz found it: a block size near INT32_MAX overflowed the blocks-needed arithmetic.
TEST(Batch, ValidationOfAHugeBlockSizeDoesNotOverflow) {
  Batch b;
  b.block_size = std::numeric_limits<int32_t>::max();
  const std::vector<int32_t> tokens(126, 1);
  const std::vector<int32_t> table = {0};
  b.add_sequence(tokens, 0, table, LogitsMode::kLast);
  const ExecutorCapacity cap{4, std::numeric_limits<int32_t>::max(), 512, 1 << 20, {}};
  EXPECT_TRUE(validate_batch(b, cap).ok()) << validate_batch(b, cap).message();
}

// Recurrent models: every sequence names a state slot; a verification's draft state slots lie
// within the executor's last n_draft_state_slots, one per new token but the last.
TEST(Batch, StateAndDraftStateSlotsAreValidated) {
  ExecutorCapacity cap{16, 16, 512, 1 << 20, {}};
  cap.n_state_slots = 10;
  cap.n_draft_state_slots = 4;  // slots [6, 10)
  Batch b;
  const std::vector<int32_t> table = {0};
  b.add_sequence(std::vector<int32_t>{1, 2, 3}, 0, table, LogitsMode::kAll, 2);
  EXPECT_TRUE(validate_batch(b, cap).ok()) << validate_batch(b, cap).message();
  for (const auto& [slot, ok] : {std::pair{6, true}, std::pair{8, true}, std::pair{9, false},
                                 std::pair{5, false}, std::pair{-2, false}}) {
    b.seqs[0].draft_state_slot = slot;
    const Status st = validate_batch(b, cap);
    EXPECT_EQ(st.ok(), ok) << slot << ": " << st.message();
    if (!ok) {
      EXPECT_NE(st.message().find("draft state slots"), std::string::npos) << st.message();
    }
  }
  b.seqs[0].draft_state_slot = -1;
  b.seqs[0].state_slot = 10;
  EXPECT_FALSE(validate_batch(b, cap).ok());
}

}  // namespace
}  // namespace sluice
