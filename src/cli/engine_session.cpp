#include "cli/engine_session.h"

#include <algorithm>

#include "base/log.h"
#include "cli/model_arg.h"
#include "cli/parallel_session.h"
#include "perf/machine.h"

namespace sluice::cli {

Status create_engine(EngineSession& s, const EngineCliOptions& o, const SpecConfig& spec,
                     KvType kv_type);

void add_engine_options(CLI::App* cmd, EngineCliOptions& o) {
  cmd->add_option("-c,--ctx-size", o.ctx_size, "Context length (0: the model's)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("--kv-cache-gb", o.kv_cache_gb,
                  "KV cache size in GiB (0: 40% of available memory, at most --max-seqs contexts)")
      ->capture_default_str();
  cmd->add_option("--max-seqs", o.max_seqs, "Requests running at once")->capture_default_str();
  cmd->add_option("--max-batch-tokens", o.max_batch_tokens, "Tokens computed per step")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o.prefill_chunk, "Most prompt tokens of one request per step")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", o.no_prefix_cache, "Do not reuse KV of repeated prefixes");
  cmd->add_option("--block-size", o.block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_option("--state-checkpoints", o.state_checkpoints,
                  "Models with recurrent layers (qwen35): saved states a prefix hit resumes from "
                  "(each the size of one sequence's state; 0: no prefix hits for them)")
      ->capture_default_str();
  cmd->add_option("--state-checkpoint-interval", o.state_checkpoint_interval,
                  "Keep a saved state every this many tokens of a sequence (besides the end of "
                  "each prompt and of each answer)")
      ->capture_default_str();
  cmd->add_option("--kv-type", o.kv_type, "KV element type: f16 or f32")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--spec", o.spec,
                  "Speculative decoding: none; ngram (drafts from the request's own text and "
                  "from recent requests' outputs); draft (a smaller model, --model-draft). "
                  "Drafts are verified exactly")
      ->capture_default_str();
  cmd->add_option("--model-draft", o.model_draft,
                  "Draft model for --spec draft (same vocabulary as the model)");
  cmd->add_option("--spec-k", o.spec_k, "Longest draft per request and step (1..64)")
      ->capture_default_str();
  cmd->add_option("--spec-gate", o.spec_gate,
                  "How each step's drafts are priced, to cut those that would cost more time "
                  "than they save: measured (by what steps have cost on this run); roofline (by "
                  "the price `sluice bench --roofline` measurements give, no gate without "
                  "them); off (every draft verified)")
      ->check(CLI::IsMember({"measured", "roofline", "off"}))
      ->capture_default_str();
  cmd->add_option("--spec-ngram-min", o.spec_ngram_min, "Shortest n-gram looked up")
      ->capture_default_str();
  cmd->add_option("--spec-ngram-max", o.spec_ngram_max, "Longest n-gram looked up")
      ->capture_default_str();
  cmd->add_option("--spec-cache-mtokens", o.spec_cache_mtokens,
                  "Finished requests' tokens kept for n-gram lookup across requests, in millions "
                  "(0: none)")
      ->capture_default_str();
  cmd->add_option("--tp", o.tp,
                  "Tensor-parallel ranks (MPI): heads, FFN columns and vocabulary split over N "
                  "processes; launches them through mpirun unless started by it")
      ->capture_default_str();
  cmd->add_option("--pp", o.pp,
                  "Pipeline stages (MPI): layers split over M processes (times --tp ranks each)")
      ->capture_default_str();
  cmd->add_option("--pp-microbatches", o.pp_micro,
                  "Micro-batches per step with --pp: the stages overlap on them (0: 1 with steps "
                  "in flight, else --pp)")
      ->capture_default_str();
  cmd->add_option("--pp-depth", o.pp_depth,
                  "Steps in flight with --pp, each over its own requests, so stage s runs one step "
                  "while stage s - 1 runs the next (0: --pp; 1: one step at a time)")
      ->capture_default_str();
}

Result<SpecConfig> spec_config_from(const EngineCliOptions& o) {
  SpecConfig sc;
  SLUICE_ASSIGN_OR_RETURN(sc.mode, parse_spec_mode(o.spec));
  sc.n_draft_max = o.spec_k;
  SLUICE_ASSIGN_OR_RETURN(sc.gate, parse_spec_gate(o.spec_gate));
  sc.ngram.n_min = o.spec_ngram_min;
  sc.ngram.n_max = o.spec_ngram_max;
  if (!(o.spec_cache_mtokens >= 0 && o.spec_cache_mtokens <= 1e4)) {
    return make_error("--spec-cache-mtokens must be in [0, 10000] (got ", o.spec_cache_mtokens,
                      ")");
  }
  sc.ngram.cache_tokens = int64_t(o.spec_cache_mtokens * 1e6);
  if (sc.mode == SpecMode::kDraft && o.model_draft.empty()) {
    return make_error("--spec draft needs --model-draft FILE");
  }
  if (sc.mode != SpecMode::kDraft && !o.model_draft.empty()) {
    return make_error("--model-draft is only used with --spec draft");
  }
  return sc;
}

Result<std::unique_ptr<EngineSession>> open_engine_session(const std::string& model_spec,
                                                           const EngineCliOptions& o) {
  if (o.max_seqs < 1 || o.max_batch_tokens < 1 || o.prefill_chunk < 0 || o.block_size < 1 ||
      o.block_size > 1024 || o.ctx_size < 0 || o.threads < 0 || o.kv_cache_gb < 0 ||
      o.state_checkpoints < 0 || o.state_checkpoints > 65536 || o.state_checkpoint_interval < 1) {
    return make_error(
        "engine options out of range (--max-seqs, --max-batch-tokens, "
        "--state-checkpoint-interval >= 1; --block-size 1..1024; --state-checkpoints "
        "0..65536; others >= 0)");
  }
  SLUICE_ASSIGN_OR_RETURN(SpecConfig spec, spec_config_from(o));
  SLUICE_ASSIGN_OR_RETURN(std::string path, resolve_model_arg(model_spec));
  ModelOptions mo;
  mo.n_ctx = o.ctx_size;
  mo.allow_context_beyond_trained = true;  // the loader warns
  if (!o.pooling.empty()) {
    mo.pooling = parse_pooling(o.pooling);
    if (!mo.pooling) {
      return make_error("--pooling '", o.pooling, "' is not one of none, mean, cls, last, rank");
    }
  }
  const KvType kv_type = o.kv_type == "f32" ? KvType::kF32 : KvType::kF16;
  const bool dist = o.tp > 1 || o.pp > 1;
  if (dist && spec.mode == SpecMode::kDraft) {
    return make_error("--spec draft with --tp or --pp is not supported");
  }
  mo.tp_size = o.tp;  // rank 0's shard (cli/parallel_session.h)
  mo.pp_size = o.pp;
  SLUICE_ASSIGN_OR_RETURN(Model model, Model::load(path, mo));
  SLUICE_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(model.file()));
  auto s = std::make_unique<EngineSession>(
      EngineSession{.model = std::move(model), .tokenizer = std::move(tok)});
  if (dist) {
    SLUICE_RETURN_IF_ERROR(start_rank0(*s, o, kv_type));
    SLUICE_RETURN_IF_ERROR(create_engine(*s, o, spec, kv_type));
    return s;
  }
  // A draft model's KV cache has as many blocks as the target's (one per block of a request's
  // tokens, in both models): the budget is split by their bytes per block.
  double share = 1.0;
  if (spec.mode == SpecMode::kDraft) {
    SLUICE_ASSIGN_OR_RETURN(std::string draft_path, resolve_model_arg(o.model_draft));
    SLUICE_ASSIGN_OR_RETURN(Model draft, Model::load(draft_path, mo));
    SLUICE_ASSIGN_OR_RETURN(Tokenizer draft_tok, Tokenizer::from_gguf(draft.file()));
    s->draft_model = std::make_unique<Model>(std::move(draft));
    s->draft_tokenizer = std::make_unique<Tokenizer>(std::move(draft_tok));
    const double t = double(kv_bytes_per_block(s->model.config(), o.block_size, kv_type));
    const double d = double(kv_bytes_per_block(s->draft_model->config(), o.block_size, kv_type));
    share = t / (t + d);
  }
  // Speculation on a recurrent model keeps a verification's per-token states: one full
  // draft's worth of state slots.
  const int draft_state_slots =
      spec.mode != SpecMode::kNone && s->model.config().any_recurrent() ? spec.n_draft_max : 0;
  SLUICE_ASSIGN_OR_RETURN(
      s->kv, plan_kv_cache(s->model.config(), o.block_size, kv_type, o.kv_cache_gb * share,
                           o.max_seqs, std::max(o.state_checkpoints, 0) + draft_state_slots));
  if (share < 1.0 && o.kv_cache_gb <= 0) {
    s->kv.n_blocks = std::max<int32_t>(1, int32_t(s->kv.n_blocks * share));
  }
  SLUICE_LOG(kInfo, s->kv.description);
  CpuExecutorOptions eo;
  eo.n_threads = o.threads;
  eo.block_size = o.block_size;
  eo.kv_type = kv_type;
  eo.n_blocks = s->kv.n_blocks;
  eo.n_state_slots = o.max_seqs;
  eo.n_state_checkpoints = o.state_checkpoints > 0 ? o.state_checkpoints : -1;
  eo.n_draft_state_slots = draft_state_slots;
  SLUICE_ASSIGN_OR_RETURN(s->executor, CpuExecutor::create(s->model, eo));
  eo.n_draft_state_slots = 0;  // the draft model's executor
  if (s->draft_model) {
    SLUICE_ASSIGN_OR_RETURN(s->draft_executor, CpuExecutor::create(*s->draft_model, eo));
    spec.draft = s->draft_executor.get();
    spec.draft_tokenizer = s->draft_tokenizer.get();
    SLUICE_LOG(
        kInfo,
        "draft model: " + o.model_draft + " (" + std::to_string(s->kv.n_blocks) + " KV blocks of " +
            std::to_string(kv_bytes_per_block(s->draft_model->config(), o.block_size, kv_type) >>
                           10) +
            " KiB)");
  }
  SLUICE_RETURN_IF_ERROR(create_engine(*s, o, spec, kv_type));
  return s;
}

Status create_engine(EngineSession& s, const EngineCliOptions& o, const SpecConfig& spec,
                     KvType kv_type) {
  EngineConfig ec;
  ec.n_ctx = s.model.config().n_ctx;
  ec.scheduler.max_seqs = o.max_seqs;
  ec.scheduler.max_batch_tokens = o.max_batch_tokens;
  ec.scheduler.prefill_chunk = o.prefill_chunk;
  ec.state_checkpoint_interval = o.state_checkpoint_interval;
  ec.enable_prefix_cache = !o.no_prefix_cache;
  ec.spec = spec;
  // Step times against the roofline, when this machine's ceilings have been measured.
  if (auto roof = load_roofline(default_roofline_path()); roof.ok()) {
    ec.cost_model = make_step_cost_model(s.whole_model ? *s.whole_model : s.model, *roof, kv_type);
    ec.cost_model->comm = s.comm;
    // A step that streams faster than the cached bandwidth raises it; one that read well past
    // the last-level cache (DRAM, not L3) also raises the cache file.
    ec.cost_model->roofline_path = default_roofline_path();
    ec.cost_model->persist_min_bytes =
        std::max(256.0 * (1 << 20), 8.0 * double(last_level_cache_bytes()));
  } else {
    SLUICE_LOG(kInfo,
               "no roofline measurements (run `sluice bench --roofline`): step times are "
               "not compared with the roofline");
  }
  SLUICE_ASSIGN_OR_RETURN(s.engine, Engine::create(s.tokenizer, s.exec(), ec));
  return {};
}

}  // namespace sluice::cli
