// Engine options shared by the commands that run a model (run, bench throughput, serve), and
// the one way to load model + tokenizer + executor + engine from them.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "executor/kv_sizing.h"
#include "executor/step_roofline.h"
#include "model/model.h"
#include "parallel/sharded_executor.h"

namespace sluice::cli {

struct EngineCliOptions {
  int ctx_size = 0;        // 0: the model's trained context
  int threads = 0;         // 0: all cores
  double kv_cache_gb = 0;  // 0: default share of available memory
  int max_seqs = 64;
  int max_batch_tokens = 2048;
  int prefill_chunk = 512;
  bool no_prefix_cache = false;
  int block_size = 16;
  std::string kv_type = "f16";
  std::string spec = "none";              // speculative decoding: none | ngram
  std::string spec_gate = "measured";     // how drafts are priced: measured | roofline | off
  int spec_k = SpecConfig{}.n_draft_max;  // the engine's default
  int spec_ngram_min = 2;
  int spec_ngram_max = 4;
  double spec_cache_mtokens = 1.0;  // suffix cache of finished requests, millions of tokens
  std::string model_draft;          // --spec draft: the draft model (path or hf:// spec)
  int tp = 1;                       // tensor-parallel ranks (cli/parallel_session.h)
  int pp = 1;                       // pipeline stages
  int pp_micro = 0;  // micro-batches per step with stages (0: 1 with steps in flight, else --pp)
  int pp_depth = 0;  // steps in flight with stages (0: one per stage; 1: one at a time)
  // Recurrent models (qwen35): saved states for prefix hits, and how often one is kept.
  int state_checkpoints = 16;
  int state_checkpoint_interval = 512;
  // Embedding models (serve --pooling): overrides <arch>.pooling_type; "" keeps the file's.
  std::string pooling{};
};

// Adds --ctx-size, --threads, --kv-cache-gb, --max-seqs, --max-batch-tokens, --prefill-chunk,
// --no-prefix-cache, --block-size, --kv-type and the speculative decoding options (--spec,
// --spec-k, --spec-ngram-min/max, --spec-cache-mtokens, --model-draft), --tp, --pp and
// --pp-microbatches to `cmd`.
void add_engine_options(CLI::App* cmd, EngineCliOptions& o);
// The speculative decoding part of `o`, checked.
Result<SpecConfig> spec_config_from(const EngineCliOptions& o);

struct EngineSession {
  Model model;
  Tokenizer tokenizer;
  std::unique_ptr<CpuExecutor> executor{};               // one process
  std::unique_ptr<parallel::ShardedExecutor> sharded{};  // --tp/--pp: rank 0's (executor null)
  int rank_threads = 0;  // --tp/--pp: the threads of each rank's executor
  // --spec draft: the draft model, its tokenizer and executor (declared before the engine,
  // which refers to them).
  std::unique_ptr<Model> draft_model{};
  std::unique_ptr<Tokenizer> draft_tokenizer{};
  std::unique_ptr<CpuExecutor> draft_executor{};
  std::unique_ptr<Engine> engine{};
  KvPlan kv{};
  // --tp / --pp: the whole model's tensors (views of the file, never read) for the step cost
  // model, and the communication term (the link rank 0 measured).
  std::unique_ptr<Model> whole_model{};
  CommSpec comm{};

  Executor& exec() { return sharded ? static_cast<Executor&>(*sharded) : *executor; }
};

// Resolves `model_spec` (path or hf://), loads everything, and logs the KV cache size.
Result<std::unique_ptr<EngineSession>> open_engine_session(const std::string& model_spec,
                                                           const EngineCliOptions& o);

}  // namespace sluice::cli
