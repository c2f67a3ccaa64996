// The CPU executor: runs a ragged Batch through the model's forward pass (model/forward.h, one
// per architecture family, over this executor's ops) and returns the logits rows the batch
// asked for. It owns the paged K/V memory and the worker
// pool; which blocks each sequence uses comes in with every Batch.
//
//   SLUICE_ASSIGN_OR_RETURN(Model model, Model::load(path, {.n_ctx = 4096}));
//   SLUICE_ASSIGN_OR_RETURN(auto exec, CpuExecutor::create(model, {.n_blocks = 1024}));
//   BlockFreeList blocks(exec->n_blocks());
//   std::vector<int32_t> table;                      // one per sequence
//   blocks.allocate_for(int32_t(prompt.size()), exec->block_size(), table);
//   Batch batch;
//   batch.block_size = exec->block_size();
//   batch.add_sequence(prompt, /*n_computed=*/0, table, LogitsMode::kLast);
//   Logits logits;
//   SLUICE_RETURN_IF_ERROR(exec->execute(batch, logits));  // logits.row(0): [n_vocab]
//
// Per step: one pass over the weights for all tokens of all sequences (matmuls over [n_tokens,
// ...] activations); K/V of the new tokens are written to their slots first, then every
// sequence attends causally through its own block table.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "executor/batch.h"
#include "executor/collective.h"
#include "executor/executor.h"
#include "executor/kv_cache.h"
#include "kernels/matmul.h"
#include "kernels/matmul_isa.h"
#include "kernels/packed.h"
#include "model/model.h"

namespace sluice {

struct CpuExecutorOptions {
  int n_threads = 0;    // 0: every hardware thread
  int block_size = 16;  // tokens per KV block
  // K/V element type. f16 (llama.cpp's default) halves cache memory and traffic; the golden
  // logits of ../shared were produced with it. f32 keeps K/V exact (reference comparisons).
  KvType kv_type = KvType::kF16;
  // KV capacity in blocks (shared by all sequences); 0: enough for one sequence of
  // min(n_ctx, 8192) tokens.
  int n_blocks = 0;
  // Models with recurrent layers (ModelConfig::layer_recurrent): state slots, one per sequence
  // that runs at once (the engine's max_seqs); 0: 16. Unused by other models.
  int n_state_slots = 0;
  // And that many more slots for saved states (prefix caching on recurrent models, docs/
  // kv-cache.md); 0: the default, 16; < 0: none.
  int n_state_checkpoints = 0;
  // And that many more for speculative decoding: a verification step writes the state after
  // each of its draft tokens into them (BatchSequence::draft_state_slot); 0: none (no
  // speculation on recurrent models).
  int n_draft_state_slots = 0;
  // Repack Q8_0 / Q4_0 / Q4_K / Q6_K / F16 / BF16 weights at load for the SIMD kernels
  // (kernels/packed.h: 16-row interleaved groups, F16 per the ISA, BF16 in huge pages; as many
  // bytes again as those weights, the file's copy is then released). Not with kScalar kernels.
  bool repack_weights = true;
  // Matmul kernels: kAuto picks the best ISA (8-bit activation blocks for Q8_0/Q4_0/Q4_K/Q6_K,
  // bf16-rounded activations for BF16 prefill: ~1e-2 relative logits error on random tiny
  // models, as llama.cpp); kScalar keeps f32 activations everywhere (reference comparisons).
  MatmulIsa matmul_isa = MatmulIsa::kAuto;
  // Tensor parallel: the collectives among the ranks when the model is a shard
  // (Model::shard(), model/shard.h), required then and unused otherwise. Every rank's executor
  // runs every batch: partial products are all-reduced, the embedding of each token comes from
  // the rank that holds its row, and rank 0 gathers the logits (other ranks' Logits hold rows
  // and indices but no values).
  Collective* collective = nullptr;
  // Pipeline parallel: the link to the neighbouring stages when the model is a stage
  // (Model::shard().pipelined()), required then and unused otherwise. A stage's KV cache holds
  // only its layers; a stage before the last returns no logits rows.
  StageLink* stage_link = nullptr;
};

// The options that executors working on one model together (tensor / pipeline-parallel ranks)
// must share, as text: blocks, block size, K/V type, kernels (parallel::rank_fingerprint).
std::string describe_options(const CpuExecutorOptions& options);

// Attention (ForwardOps::attention: one layer's attention over every sequence of a step) by
// layer kind, summed over the steps since the last reset: windowed layers (a window > 0) and
// global ones (gemma4's shared-K/V layers count with their own kind).
struct AttentionTimes {
  struct Kind {
    int64_t ns = 0;     // wall time (one steady_clock pair per call)
    int64_t calls = 0;  // layer calls (one per attention layer per step)
    int64_t keys = 0;   // keys attended, summed over queries, sequences and calls (not heads)
  };
  Kind windowed, global;
};

class CpuExecutor final : public Executor {
 public:
  // `model` must outlive the executor. Allocates the K/V cache.
  static Result<std::unique_ptr<CpuExecutor>> create(const Model& model,
                                                     const CpuExecutorOptions& options = {});
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  // Executor (executor.h): n_ctx is the model's context length.
  ExecutorCapacity capacity() const override;
  Status execute(const Batch& batch, Logits& out) override;
  Status copy_blocks(std::span<const BlockCopy> copies) override;
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override;
  // A step writes only the blocks of its batch (and copy-on-write destinations); exporting
  // others reads memory nothing writes.
  bool concurrent_export() const override { return true; }
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) override;
  Result<KvBlockData> export_states(std::span<const int32_t> slots) const override;
  Status import_states(std::span<const int32_t> slots, const KvBlockData& data) override;

  const ModelConfig& config() const { return model_.config(); }
  int block_size() const { return kv_->shape().block_size; }
  int n_blocks() const { return kv_->shape().n_blocks; }
  int n_threads() const { return pool_.n_threads(); }
  const KvCacheStorage& kv_cache() const { return *kv_; }
  // Mixture of experts: expert FFNs run (each reads its expert's weights once) in the last
  // execute(), summed over layers. A dense model: 0.
  int64_t last_step_expert_reads() const override { return moe_expert_reads_; }
  // Attention by layer kind since creation or the last reset (read between steps: execute()
  // writes it). Costs two clock reads per attention layer per step.
  const AttentionTimes& attention_times() const { return attn_times_; }
  void reset_attention_times() { attn_times_ = {}; }

 private:
  struct Scratch;
  class Ops;  // model/forward.h's ForwardOps over this executor
  CpuExecutor(const Model& model, int n_threads, MatmulIsa isa);

  void repack(const CpuExecutorOptions& options);
  // The model's forward pass (model/) over Ops.
  void forward(const Batch& batch, Logits& out);
  void gather_logits(Logits& out);
  // y = x W^T through the packed copy of W when there is one.
  void matmul_w(const WeightMatrix& w, const float* x, int64_t n, float* y,
                const QuantizedActs* xq = nullptr);
  // The same over `pool` (null: the calling thread) with workspace `ws`.
  void matmul_on(const WeightMatrix& w, const float* x, int64_t n, float* y,
                 const QuantizedActs* xq, ThreadPool* pool, MatmulWorkspace& ws);

  const Model& model_;
  ThreadPool pool_;
  std::unique_ptr<KvCacheStorage> kv_;
  KvCacheLayout layout_;  // the model's K/V groups (ModelConfig::kv_cache_layout)
  int slot_base_ = 0;     // the first K/V slot this pipeline stage stores
  // Layer il's K/V slot in kv_ (its slot in its group's blocks, less the stage's first).
  int kv_slot(int il) const { return layout_.layer_slot[size_t(il)] - slot_base_; }
  // Recurrent layers' states: [n_state_slots][this stage's recurrent layers][state floats]
  // (kernels/delta_net.h: conv inputs, then the S x S matrices). Empty without them.
  std::vector<float> states_;
  int32_t n_state_slots_ = 0;  // running sequences' and checkpoints'
  int32_t n_state_checkpoints_ = 0;
  int32_t n_draft_state_slots_ = 0;
  // Floats from one state slot to the next.
  int64_t state_slot_floats() const { return int64_t(n_stage_recurrent_) * state_floats_; }
  int64_t state_floats_ = 0;      // one layer's, one sequence's
  int n_stage_recurrent_ = 0;     // recurrent layers this stage runs
  std::vector<int> state_index_;  // [n_layer] a recurrent layer's index in a slot (-1: none)
  float* layer_state(int32_t slot, int il);
  // export_states / import_states: the layout tag ("state f32 layers 0-24 R18 S279552"), and
  // the slots' check.
  std::string state_layout() const;
  Status check_state_slots(const char* what, std::span<const int32_t> slots) const;
  std::vector<float> rope_inv_freq_;      // [n_rot / 2]
  std::vector<float> rope_inv_freq_swa_;  // [n_rot / 2] windowed layers' (rope_theta_swa > 0)
  // The matmul kernels' ISA (CpuExecutorOptions::matmul_isa), resolved at construction: never
  // kAuto.
  MatmulIsa isa_ = MatmulIsa::kScalar;
  // Weights repacked at load for the AVX2 and AVX-512 kernels (kernels/packed.h), by GGUF data
  // pointer.
  StreamedBuffer packed_mem_;  // every packed or copied matrix (first: outlives both maps)
  std::unordered_map<const void*, PackedWeights> packed_;
  // MXFP4 matrices copied as they are into packed_mem_ (see repack): file data -> copy.
  std::unordered_map<const void*, const uint8_t*> copied_;
  std::unique_ptr<Scratch> s_;
  int64_t moe_expert_reads_ = 0;
  AttentionTimes attn_times_;
  Collective* coll_ = nullptr;  // tensor parallel: the ranks' collectives
  StageLink* link_ = nullptr;   // pipeline parallel: the neighbouring stages
};

}  // namespace sluice
