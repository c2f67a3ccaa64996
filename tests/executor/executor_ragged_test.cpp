// Ragged batches: several sequences of different lengths in one Batch, prompts fed in chunks
// of 1, 7 or 64 tokens, decode steps of other sequences interleaved with prefill chunks. Every
// logits row must equal (within 1e-5 relative L2) the row from running that sequence alone.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "executor/cpu_executor.h"
#include "executor/executor_test_util.h"
#include "model/model_test_util.h"

namespace sluice {
namespace {

struct RaggedSpec {
  std::vector<int> prompt_lens;
  int n_decode = 5;
  int chunk = 7;
};

// Sequence i joins at step i; each step gives every active sequence its next prompt chunk or
// one decode token. Decode tokens are fixed in advance, so both runs feed the same tokens.
void check_ragged(const Model& model, const RaggedSpec& spec, KvType kv_type, uint32_t seed,
                  int n_threads = 0) {
  CpuExecutorOptions opts;
  opts.n_threads = n_threads;
  opts.block_size = 16;
  opts.n_blocks = 256;
  opts.kv_type = kv_type;
  auto exec = CpuExecutor::create(model, opts);
  ASSERT_TRUE(exec.ok()) << exec.message();
  BlockFreeList blocks((*exec)->n_blocks());
  const int n_vocab = model.config().n_vocab;

  std::mt19937 rng(seed);
  const size_t n_seqs = spec.prompt_lens.size();
  std::vector<std::vector<int32_t>> all_tokens(n_seqs);  // prompt + decode tokens
  for (size_t i = 0; i < n_seqs; ++i) {
    const int n = spec.prompt_lens[i] + spec.n_decode;
    for (int j = 0; j < n; ++j) all_tokens[i].push_back(int32_t(rng() % uint32_t(n_vocab)));
  }

  // Batched run: rows keyed by (sequence, position).
  std::map<std::pair<size_t, size_t>, std::vector<float>> batched;
  std::vector<test::TestSequence> seqs(n_seqs);
  Batch batch;
  batch.n_kv_groups = (*exec)->capacity().n_kv_groups();
  batch.block_size = (*exec)->block_size();
  Logits out;
  int max_rows_in_a_batch = 0, mixed_steps = 0;
  for (int step = 0;; ++step) {
    batch.clear();
    std::vector<size_t> in_batch;
    bool any_prefill = false, any_decode = false;
    for (size_t i = 0; i < n_seqs && int(i) <= step; ++i) {
      const size_t done = seqs[i].tokens.size();
      if (done == all_tokens[i].size()) continue;
      const size_t prompt = size_t(spec.prompt_lens[i]);
      const size_t n = done < prompt ? std::min(prompt - done, size_t(spec.chunk)) : 1;
      (done < prompt ? any_prefill : any_decode) = true;
      const std::vector<int32_t> step_tokens(all_tokens[i].begin() + long(done),
                                             all_tokens[i].begin() + long(done + n));
      // Prompt chunks ask for every position; decode steps for the last (the only) one.
      test::add_step(batch, blocks, seqs[i], step_tokens,
                     done < prompt ? LogitsMode::kAll : LogitsMode::kLast);
      in_batch.push_back(i);
    }
    if (batch.n_seqs() == 0) break;
    mixed_steps += any_prefill && any_decode;
    const Status s = (*exec)->execute(batch, out);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(out.n_rows(), batch.n_logit_rows());
    max_rows_in_a_batch = std::max(max_rows_in_a_batch, out.n_rows());
    for (int32_t r = 0; r < out.n_rows(); ++r) {
      const BatchSequence& bs = batch.seqs[size_t(out.seq_index[size_t(r)])];
      const size_t seq = in_batch[size_t(out.seq_index[size_t(r)])];
      const size_t pos =
          size_t(bs.context_len - bs.n_new_tokens + (out.token_index[size_t(r)] - bs.token_start));
      batched[{seq, pos}] = std::vector<float>(out.row(r), out.row(r) + out.n_vocab);
    }
  }
  EXPECT_GT(mixed_steps, 0) << "no step mixed prefill and decode";
  for (auto& sq : seqs) test::free_blocks(blocks, sq);
  ASSERT_EQ(blocks.n_free(), blocks.n_blocks());

  // Each sequence alone: whole prompt in one batch, then one token per step.
  double worst = 0;
  for (size_t i = 0; i < n_seqs; ++i) {
    const auto alone = test::run_alone(**exec, blocks, all_tokens[i], size_t(spec.prompt_lens[i]));
    ASSERT_EQ(alone.size(), all_tokens[i].size());
    for (size_t pos = 0; pos < alone.size(); ++pos) {
      const auto it = batched.find({i, pos});
      ASSERT_NE(it, batched.end()) << "seq " << i << " pos " << pos;
      const double e = test::rel_l2(it->second.data(), alone[pos].data(), alone[pos].size());
      worst = std::max(worst, e);
      ASSERT_LT(e, 1e-5) << "seq " << i << " pos " << pos << " chunk " << spec.chunk;
    }
  }
  std::printf("[ ragged ] chunk %2d, %zu seqs: worst rel-L2 vs alone %.1e (max %d rows per step)\n",
              spec.chunk, n_seqs, worst, max_rows_in_a_batch);
}

// The synthetic model `preset` of file type `type`, written into `dir` and loaded.
Result<Model> load_synthetic(const test::TempDir& dir, const std::string& preset, FileType type) {
  const std::string path = dir.path(preset + ".gguf");
  test::write_synthetic_model(preset, type, path);
  return Model::load(path);
}

TEST(Ragged, SyntheticModelChunksAndInterleavedDecode) {
  test::TempDir dir;
  auto model = load_synthetic(dir, "tiny", FileType::MOSTLY_Q8_0);
  ASSERT_TRUE(model.ok()) << model.message();
  for (int chunk : {1, 7, 64}) {
    RaggedSpec spec;
    spec.prompt_lens = {1, 5, 37, 100, 130, 16};
    spec.n_decode = 6;
    spec.chunk = chunk;
    check_ragged(*model, spec, KvType::kF16, 11);
  }
}

// Contexts of several attention key segments: decode steps split each sequence's attention by
// segments between threads (flash-decoding) while prompt chunks go by kv head.
TEST(Ragged, LongContextsSplitBySegments) {
  test::TempDir dir;
  auto model = load_synthetic(dir, "tiny", FileType::MOSTLY_F16);
  ASSERT_TRUE(model.ok()) << model.message();
  RaggedSpec spec;
  spec.prompt_lens = {300, 40, 480};
  spec.n_decode = 4;
  spec.chunk = 64;
  check_ragged(*model, spec, KvType::kF16, 13);
}

TEST(Ragged, Qwen3AndF32Cache) {
  test::TempDir dir;
  auto model = load_synthetic(dir, "tiny-qwen3", FileType::MOSTLY_F16);
  ASSERT_TRUE(model.ok()) << model.message();
  RaggedSpec spec;
  spec.prompt_lens = {3, 64, 17};
  spec.chunk = 7;
  check_ragged(*model, spec, KvType::kF32, 12);
}

// Sliding windows (gemma2: even layers, phi3: every layer) over contexts much longer than the
// window, split by key segments in decode, chunked in prefill.
TEST(Ragged, SlidingWindowModels) {
  test::TempDir dir;
  for (const char* variant : {"tiny-gemma2", "tiny-phi3", "tiny-mistral"}) {
    SCOPED_TRACE(variant);
    auto model = load_synthetic(dir, variant, FileType::MOSTLY_Q8_0);
    ASSERT_TRUE(model.ok()) << model.message();
    for (int chunk : {1, 7, 64}) {
      RaggedSpec spec;
      spec.prompt_lens = {300, 3, 40, 17};
      spec.n_decode = 4;
      spec.chunk = chunk;
      check_ragged(*model, spec, KvType::kF16, 14);
    }
  }
}

// Mixture of experts: a token's experts and sum do not depend on which other tokens share the
// step (each expert runs once over the rows routed to it).
TEST(Ragged, MixtureOfExpertsModels) {
  test::TempDir dir;
  for (const char* variant : {"tiny-mixtral", "tiny-qwen2moe", "tiny-qwen3moe"}) {
    SCOPED_TRACE(variant);
    for (FileType ft : {FileType::MOSTLY_Q8_0, FileType::MOSTLY_Q4_K_M}) {
      auto model = load_synthetic(dir, variant, ft);
      ASSERT_TRUE(model.ok()) << model.message();
      RaggedSpec spec;
      spec.prompt_lens = {1, 5, 37, 70, 16};
      spec.n_decode = 5;
      spec.chunk = 7;
      check_ragged(*model, spec, KvType::kF16, 15);
      // 3 threads: a lone decode's 2-3 experts split each matmul over the pool, a batch's many
      // experts go to threads whole; the rows must agree bit for bit.
      check_ragged(*model, spec, KvType::kF16, 15, 3);
    }
  }
}

// A batch reads each expert once: one decode reads n_used experts a layer; 16 decodes (32
// token-expert pairs a layer on tiny-mixtral) read at most the 4 experts a layer.
TEST(Ragged, BatchedDecodeReadsEachExpertOnce) {
  test::TempDir dir;
  auto model = load_synthetic(dir, "tiny-mixtral", FileType::MOSTLY_Q8_0);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  auto exec = CpuExecutor::create(*model, {});
  ASSERT_TRUE(exec.ok()) << exec.message();
  BlockFreeList blocks((*exec)->n_blocks());
  std::vector<test::TestSequence> seqs(16);
  Batch batch;
  batch.n_kv_groups = (*exec)->capacity().n_kv_groups();
  batch.block_size = (*exec)->block_size();
  Logits out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    batch.clear();
    test::add_step(batch, blocks, seqs[i], {int32_t(3 + 7 * i), int32_t(11 * i + 1)},
                   LogitsMode::kLast);
    ASSERT_TRUE((*exec)->execute(batch, out).ok());
  }
  batch.clear();
  test::add_step(batch, blocks, seqs[0], {5}, LogitsMode::kLast);
  ASSERT_TRUE((*exec)->execute(batch, out).ok());
  EXPECT_EQ((*exec)->last_step_expert_reads(), int64_t(c.n_layer) * c.n_expert_used);
  batch.clear();
  for (size_t i = 0; i < seqs.size(); ++i) {
    test::add_step(batch, blocks, seqs[i], {int32_t(40 + 13 * i)}, LogitsMode::kLast);
  }
  ASSERT_TRUE((*exec)->execute(batch, out).ok());
  const int64_t reads = (*exec)->last_step_expert_reads();
  EXPECT_LE(reads, int64_t(c.n_layer) * c.n_expert);
  EXPECT_GE(reads, int64_t(c.n_layer) * c.n_expert_used);
  std::printf("[ moe ] 16 decodes: %lld expert reads over %d layers (ungrouped: %lld)\n",
              static_cast<long long>(reads), c.n_layer,
              static_cast<long long>(16 * c.n_layer * c.n_expert_used));
}

TEST(Ragged, Stories260K) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto model = Model::load(path, {512, true});
  ASSERT_TRUE(model.ok()) << model.message();
  for (int chunk : {1, 7, 64}) {
    RaggedSpec spec;
    spec.prompt_lens = {2, 9, 70, 33};
    spec.n_decode = 8;
    spec.chunk = chunk;
    check_ragged(*model, spec, KvType::kF16, 13);
  }
}

}  // namespace
}  // namespace sluice
