#include "engine/engine.h"

#include <algorithm>

namespace sluice {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "none";
}

std::shared_ptr<const grammar::TokenVocab> make_grammar_vocab(const Tokenizer& tokenizer,
                                                              int32_t n_vocab,
                                                              bool render_special) {
  // Output rows past the tokenizer's vocabulary (padding) have no bytes: never allowed.
  std::vector<std::string> bytes(size_t(std::max(n_vocab, tokenizer.vocab().n_tokens())));
  for (int32_t t = 0; t < tokenizer.vocab().n_tokens(); ++t)
    bytes[size_t(t)] = std::string(tokenizer.piece(t, render_special));
  const std::vector<TokenId>& eog = tokenizer.vocab().eog_ids();
  return std::make_shared<grammar::TokenVocab>(std::move(bytes),
                                               std::vector<int32_t>(eog.begin(), eog.end()));
}

namespace {
DecodeOptions decode_options(const GenerationParams& p) {
  DecodeOptions o;
  o.render_special = p.render_special;
  return o;
}
}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const Tokenizer& tokenizer, Executor& executor,
                                               const EngineConfig& config) {
  const ExecutorCapacity cap = executor.capacity();
  int32_t n_ctx = config.n_ctx > 0 ? config.n_ctx : cap.n_ctx;
  if (n_ctx <= 0) return make_error("engine: context length must be positive");
  if (int64_t(tokenizer.vocab().n_tokens()) > int64_t(cap.n_vocab)) {
    return make_error("engine: the tokenizer has ", tokenizer.vocab().n_tokens(),
                      " tokens but the model's output has ", cap.n_vocab, " rows");
  }
  // A rejected draft rolls K/V back by counters alone; a recurrent state goes back to the state
  // the verification kept after the last accepted token (the executor's draft state slots).
  if (cap.n_state_slots > 0 && config.spec.mode != SpecMode::kNone) {
    if (cap.n_draft_state_slots < 1) {
      return make_error(
          "speculative decoding on a model with recurrent layers needs draft state slots, "
          "which this executor does not have (tensor- and pipeline-parallel executors have "
          "none yet)");
    }
    if (config.spec.mode == SpecMode::kDraft && config.spec.draft &&
        config.spec.draft->capacity().n_state_slots > 0) {
      return make_error(
          "a draft model with recurrent layers is not supported (its state cannot follow the "
          "target's rejections): use an attention model as the draft, or --spec ngram");
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Speculator> speculator,
                          Speculator::create(config.spec, tokenizer, cap, n_ctx, config.clock));
  KvCacheConfig kv;
  kv.n_blocks = cap.n_blocks;
  kv.block_size = cap.block_size;
  kv.enable_prefix_cache = config.enable_prefix_cache;
  kv.salt = 0x5eed;
  kv.group_windows = cap.kv_group_windows;
  kv.n_state_slots = cap.n_state_slots - cap.n_state_checkpoints;
  // Checkpoints copy a sequence's state between steps: with several steps in flight (a
  // pipeline) the state has moved on by then.
  kv.n_state_checkpoints = executor.pipeline_depth() > 1 ? 0 : cap.n_state_checkpoints;
  kv.checkpoint_interval_blocks = std::max(1, config.state_checkpoint_interval / cap.block_size);
  std::unique_ptr<Engine> e(
      new Engine(tokenizer, executor, config, n_ctx, kv, std::move(speculator)));
  if (config.spec.mode != SpecMode::kNone) {
    e->n_draft_slots_ = cap.n_draft_state_slots;
    e->draft_slot0_ = cap.n_state_slots - cap.n_draft_state_slots;
  }
  return e;
}

Engine::Engine(const Tokenizer& tokenizer, Executor& executor, const EngineConfig& config,
               int32_t n_ctx, KvCacheConfig kv_config, std::unique_ptr<Speculator> speculator)
    : tokenizer_(tokenizer),
      executor_(executor),
      config_(config),
      n_ctx_(n_ctx),
      kv_(kv_config),
      scheduler_(config.scheduler, kv_),
      speculator_(std::move(speculator)),
      epoch_(std::chrono::steady_clock::now()) {
  batch_.block_size = executor.capacity().block_size;
  batch_alt_.block_size = batch_.block_size;
  if (config.cost_model) roofline_.emplace(*config.cost_model);
  if (!speculator_) depth_ = std::max(1, executor.pipeline_depth());
  grammar_vocab_ = make_grammar_vocab(tokenizer, executor.capacity().n_vocab);
}

double Engine::now() const {
  if (config_.clock) return config_.clock->now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

Result<int32_t> Engine::import_prefix(std::span<const int32_t> tokens, const KvBlockData& blocks,
                                      int32_t first_block) {
  const int32_t bs = kv_.block_size();
  const int32_t n_full = int32_t(tokens.size() / size_t(bs));
  if (first_block < 0 || first_block > n_full) {
    return make_error("import_prefix: first block ", first_block, " of ", n_full);
  }
  if (blocks.n_blocks != n_full - first_block ||
      blocks.bytes.size() != size_t(blocks.n_blocks) * blocks.bytes_per_block) {
    return make_error("import_prefix: ", blocks.n_blocks, " blocks of data for full blocks [",
                      first_block, ", ", n_full, ") of ", tokens.size(), " tokens");
  }
  // The layout check first (an export of no blocks names this executor's layout), so that
  // nothing is cached that would not be written.
  SLUICE_ASSIGN_OR_RETURN(const KvBlockData mine, executor_.export_blocks({}));
  if (mine.layout != blocks.layout) {
    return make_error("import_prefix: blocks of layout '", blocks.layout, "', this executor's is '",
                      mine.layout, "'");
  }
  const std::vector<KvCacheManager::ImportedBlock> got = kv_.import_prefix(tokens, first_block);
  if (!got.empty()) {
    KvBlockData sub;
    sub.layout = blocks.layout;
    sub.bytes_per_block = blocks.bytes_per_block;
    sub.n_blocks = int32_t(got.size());
    std::vector<int32_t> ids;
    for (const KvCacheManager::ImportedBlock& b : got) {
      ids.push_back(b.id);
      const uint8_t* src =
          blocks.bytes.data() + size_t(b.index - first_block) * blocks.bytes_per_block;
      sub.bytes.insert(sub.bytes.end(), src, src + blocks.bytes_per_block);
    }
    SLUICE_RETURN_IF_ERROR(executor_.import_blocks(ids, sub));
  }
  return kv_.n_cached_prefix_tokens(tokens);
}

Result<bool> Engine::import_state(std::span<const int32_t> tokens, const KvBlockData& state) {
  const int32_t bs = kv_.block_size();
  if (tokens.empty() || tokens.size() % size_t(bs) != 0) {
    return make_error("import_state: ", tokens.size(), " tokens are not whole blocks of ", bs);
  }
  if (state.n_blocks != 1 || state.bytes.size() != state.bytes_per_block) {
    return make_error("import_state: ", state.n_blocks, " states (", state.bytes.size(),
                      " bytes) where one is expected");
  }
  SLUICE_ASSIGN_OR_RETURN(const KvBlockData mine, executor_.export_states({}));
  if (mine.layout != state.layout) {
    return make_error("import_state: a state of layout '", state.layout, "', this executor's is '",
                      mine.layout, "'");
  }
  const size_t n_full = tokens.size() / size_t(bs);
  if (kv_.cached_prefix_blocks(tokens).size() != n_full) {
    return make_error("import_state: the ", n_full, " blocks the state follows are not all cached");
  }
  const int32_t slot = kv_.import_checkpoint(tokens);
  if (slot < 0) return false;
  const int32_t slots[1] = {slot};
  if (Status st = executor_.import_states(slots, state); !st.ok()) {
    kv_.forget_checkpoint(slot);
    return st;
  }
  return true;
}

Result<KvBlockData> Engine::export_prefix(std::span<const int32_t> tokens) const {
  const std::vector<BlockId> ids = kv_.cached_prefix_blocks(tokens);
  const size_t n_full = tokens.size() / size_t(kv_.block_size());
  if (ids.size() != n_full) {
    return make_error("export_prefix: ", ids.size(), " of the ", n_full,
                      " full blocks of the prefix are cached");
  }
  return executor_.export_blocks(ids);
}

Status Engine::check_whole_inputs(std::span<const std::vector<int32_t>> inputs) const {
  const int32_t n_vocab = executor_.capacity().n_vocab;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t>& in = inputs[i];
    if (in.empty()) return make_error("input ", i, " is empty");
    for (int32_t t : in) {
      if (t < 0 || t >= n_vocab) {
        return make_error("input ", i, ": token id ", t, " is outside the vocabulary (", n_vocab,
                          " tokens)");
      }
    }
    if (int32_t(in.size()) > n_ctx_) {
      return make_error("input ", i, " has ", in.size(), " tokens; the context holds ", n_ctx_);
    }
    if (kv_.blocks_for_step(int32_t(in.size())) > kv_.n_free_blocks()) {
      return make_error("input ", i, " needs ", kv_.blocks_for_step(int32_t(in.size())),
                        " KV blocks; ", kv_.n_free_blocks(), " are free (raise --kv-cache-gb)");
    }
  }
  return {};
}

Status Engine::run_whole(std::span<const std::vector<int32_t>> inputs, LogitsMode mode,
                         const std::function<Status(size_t, const Logits&)>& on_step) {
  // One step: its batch, its sequences' ids (their blocks are held until its logits are in)
  // and its first input.
  struct Step {
    Batch batch;
    std::vector<RequestId> ids;
    size_t first = 0;
    int32_t n_tokens = 0;
    Status executed;  // depth 1: execute()'s result (the logits are in `logits` then)
  };
  const bool pipelined = depth_ > 1;
  std::deque<Step> steps;  // submitted, oldest first
  Logits logits;
  const auto release = [&](Step& s) {
    for (RequestId id : s.ids) kv_.free(id);
  };
  // An error with steps in flight: collect them (their results are dropped) so that the
  // executor is idle again, and free their blocks.
  const auto fail = [&](Status st) -> Status {
    for (Step& s : steps) {
      if (pipelined) (void)executor_.collect(logits);
      release(s);
    }
    steps.clear();
    return st;
  };
  const double t0 = now();
  for (size_t next = 0; next < inputs.size() || !steps.empty();) {
    while (next < inputs.size() && int32_t(steps.size()) < depth_) {
      Step s;
      s.batch.block_size = kv_.block_size();
      s.batch.n_kv_groups = kv_.n_groups();
      s.first = next;
      while (next < inputs.size()) {
        const auto n = int32_t(inputs[next].size());
        if (!s.ids.empty() && (s.n_tokens + n > config_.scheduler.max_batch_tokens ||
                               int32_t(s.ids.size()) >= config_.scheduler.max_seqs)) {
          break;
        }
        const RequestId id = next_id_++;
        if (!kv_.allocate_slots(id, 0, n)) break;
        s.ids.push_back(id);
        s.batch.add_sequence(inputs[next], 0, kv_.block_tables(id), mode, kv_.state_slot(id));
        s.n_tokens += n;
        ++next;
      }
      if (s.ids.empty()) {
        // The blocks are held by the steps in flight: collect one first.
        if (!steps.empty()) break;
        return make_error("input ", next, ": the KV cache is short of blocks");
      }
      kv_.take_copies();  // fresh blocks: nothing to copy
      const Status st =
          pipelined ? executor_.submit(s.batch) : (s.executed = executor_.execute(s.batch, logits));
      if (!st.ok()) {
        release(s);
        return fail(st);
      }
      steps.push_back(std::move(s));
    }
    Step& s = steps.front();
    const Status st = pipelined ? executor_.collect(logits) : s.executed;
    release(s);
    const size_t first = s.first;
    stats_.steps += 1;
    stats_.prompt_tokens += uint64_t(s.n_tokens);
    steps.pop_front();
    if (!st.ok()) return fail(st);
    if (Status cb = on_step(first, logits); !cb.ok()) return fail(cb);
  }
  stats_.busy_seconds += now() - t0;
  return {};
}

Result<std::vector<std::vector<float>>> Engine::embed(
    std::span<const std::vector<int32_t>> inputs) {
  if (!in_flight_.empty()) return make_error("embed: pipelined steps are in flight");
  SLUICE_RETURN_IF_ERROR(check_whole_inputs(inputs));
  std::vector<std::vector<float>> out(inputs.size());
  SLUICE_RETURN_IF_ERROR(
      run_whole(inputs, LogitsMode::kPooled, [&](size_t first, const Logits& logits) -> Status {
        for (int32_t r = 0; r < logits.n_rows(); ++r) {
          const float* row = logits.row(r);
          out[first + size_t(logits.seq_index[size_t(r)])].assign(row, row + logits.n_vocab);
        }
        return {};
      }));
  return out;
}

Status Engine::score(std::span<const std::vector<int32_t>> inputs,
                     const std::function<Status(size_t, std::span<const float>)>& on_logits) {
  if (!in_flight_.empty()) return make_error("score: pipelined steps are in flight");
  SLUICE_RETURN_IF_ERROR(check_whole_inputs(inputs));
  return run_whole(inputs, LogitsMode::kAll, [&](size_t first, const Logits& logits) -> Status {
    // kAll: each sequence's rows are consecutive, in batch (= input) order.
    for (int32_t r = 0; r < logits.n_rows();) {
      const size_t i = first + size_t(logits.seq_index[size_t(r)]);
      const auto n = int32_t(inputs[i].size());
      if (r + n > logits.n_rows() ||
          logits.seq_index[size_t(r + n - 1)] != logits.seq_index[size_t(r)]) {
        return make_error("score: the executor returned ", logits.n_rows(),
                          " logits rows, not one per token");
      }
      SLUICE_RETURN_IF_ERROR(
          on_logits(i, std::span<const float>(logits.row(r), size_t(n) * size_t(logits.n_vocab))));
      r += n;
    }
    return {};
  });
}

Result<RequestId> Engine::add_request(std::vector<int32_t> prompt, const GenerationParams& params) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<RequestId> ids,
                          add_request_group(std::move(prompt), {params}));
  return ids[0];
}

Result<std::vector<RequestId>> Engine::add_request_group(
    std::vector<int32_t> prompt, const std::vector<GenerationParams>& params) {
  if (params.empty()) return make_error("a request group needs at least one sample");
  if (prompt.empty()) return make_error("the prompt is empty");
  const int32_t n_vocab = executor_.capacity().n_vocab;
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab) {
      return make_error("prompt token id ", t, " is outside the vocabulary (", n_vocab, " tokens)");
    }
  }
  if (int32_t(prompt.size()) >= n_ctx_) {
    return make_error("the prompt has ", prompt.size(), " tokens; the context holds ", n_ctx_,
                      " (one more is needed to generate)");
  }
  const int32_t blocks_needed = kv_.blocks_for_step(int32_t(prompt.size()) + 1);
  if (blocks_needed > kv_.n_blocks()) {
    return make_error("the prompt needs ", blocks_needed, " KV blocks; the cache has only ",
                      kv_.n_blocks(), " (raise --kv-cache-gb)");
  }
  std::vector<Sampler> samplers;
  samplers.reserve(params.size());
  for (const GenerationParams& p : params) {
    SLUICE_RETURN_IF_ERROR(p.sampling.validate(n_vocab));
    SLUICE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(p.sampling, prompt));
    samplers.push_back(std::move(sampler));
  }

  std::vector<RequestId> ids;
  const double t = now();
  for (size_t i = 0; i < params.size(); ++i) {
    const RequestId id = next_id_++;
    Request r{params[i],
              std::move(samplers[i]),
              StreamingDecoder(tokenizer_, decode_options(params[i])),
              StopMatcher(params[i].stop),
              ReasoningBudget(params[i].reasoning),
              int32_t(prompt.size()),
              0,
              {}};
    r.times.arrival = t;
    r.decoder.continue_sequence();  // the continuation follows the prompt's text
    requests_.emplace(id, std::move(r));
    ids.push_back(id);
  }
  scheduler_.add_group(ids, std::move(prompt), params[0].priority);
  return ids;
}

void Engine::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  EngineEvent ev;
  ev.id = id;
  finish(id, it->second, FinishReason::kAbort, ev);
  pending_events_.push_back(std::move(ev));
}

const RequestTimes* Engine::times(RequestId id) const {
  if (auto it = requests_.find(id); it != requests_.end()) return &it->second.times;
  if (auto it = finished_times_.find(id); it != finished_times_.end()) return &it->second;
  return nullptr;
}

void Engine::finish(RequestId id, Request& r, FinishReason why, EngineEvent& ev) {
  if (why != FinishReason::kAbort) {
    // Release what the decoder and the stop matcher still hold (nothing after a stop match).
    std::string tail = r.decoder.flush();
    if (!r.stop.stopped()) {
      StopMatcher::Output o = r.stop.push(tail);
      ev.text += o.text;
      if (o.stopped()) {
        ev.stop_index = o.stop_index;
        why = FinishReason::kStop;
      } else {
        ev.text += r.stop.flush();
      }
    }
  }
  ev.finish = why;
  r.times.finished = now();
  if (speculator_) {
    const SchedRequest* sr = scheduler_.find(id);
    speculator_->finish(id, sr ? &sr->tokens : nullptr);
  }
  scheduler_.finish(id);
  finished_times_[id] = std::move(r.times);
  requests_.erase(id);
}

Result<SampleResult> Engine::sample_next(Request& r, std::span<const float> logits) {
  if (const int32_t t = r.budget.forced(); t >= 0) {
    // The reasoning budget is spent: its close text is written for the model.
    SampleResult s;
    s.token = t;
    return s;
  }
  return r.sampler.sample(logits, sample_ws_);
}

Status Engine::advance(RequestId id, Request& r, const float* logits, EngineEvent& ev) {
  const int32_t n_vocab = executor_.capacity().n_vocab;
  Result<SampleResult> sampled = sample_next(r, std::span<const float>(logits, size_t(n_vocab)));
  if (!sampled.ok() && r.sampler.has_grammar()) {
    // A grammar that allows nothing here is this request's failure, not the engine's.
    ev.error = sampled.message();
    finish(id, r, FinishReason::kError, ev);
    return {};
  }
  SLUICE_ASSIGN_OR_RETURN(SampleResult s, std::move(sampled));
  r.sampler.accept(s.token);
  emit(id, r, s, /*append=*/true, ev);
  return {};
}

bool Engine::emit(RequestId id, Request& r, const SampleResult& s, bool append, EngineEvent& ev) {
  const double t = now();
  if (r.times.first_token < 0) r.times.first_token = t;
  r.times.tokens.push_back(t);
  ++r.n_generated;
  ++stats_.generated_tokens;
  ev.tokens.push_back(s.token);
  if (r.params.sampling.n_logprobs >= 0) ev.samples.push_back(s);

  if (!r.params.ignore_eos && tokenizer_.vocab().is_eog(s.token)) {
    finish(id, r, FinishReason::kStop, ev);
    return true;
  }
  // The grammar's stop token ends the output even with ignore_eos (nothing may follow it).
  // Judged by the token, not the sampler's state: after a verification the sampler has
  // already accepted the tokens emitted after this one.
  if (r.params.sampling.grammar && r.params.sampling.grammar->vocab->is_stop(s.token)) {
    finish(id, r, FinishReason::kStop, ev);
    return true;
  }
  const std::string piece = r.decoder.push(s.token);
  r.budget.on_token(piece);
  StopMatcher::Output o = r.stop.push(piece);
  ev.text += o.text;
  if (o.stopped()) {
    ev.stop_index = o.stop_index;
    finish(id, r, FinishReason::kStop, ev);
    return true;
  }
  if (r.params.max_tokens > 0 && r.n_generated >= r.params.max_tokens) {
    finish(id, r, FinishReason::kLength, ev);
    return true;
  }
  if (r.n_prompt + r.n_generated >= n_ctx_) {
    // With this token the sequence fills the context: nothing more can be computed.
    finish(id, r, FinishReason::kContext, ev);
    return true;
  }
  if (append) scheduler_.append_token(id, s.token);
  return false;
}

Status Engine::propose_drafts() {
  if (!speculator_) return {};
  draft_requests_.clear();
  for (RequestId id : scheduler_.running()) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request& r = it->second;
    // While a reasoning budget may still force tokens, the target alone picks them.
    if (r.params.reasoning.active() && !r.budget.closed()) continue;
    DraftRequest d;
    d.id = id;
    d.params = &r.params.sampling;
    d.sampler = &r.sampler;
    if (r.params.max_tokens > 0) d.n_emit_max = r.params.max_tokens - r.n_generated;
    draft_requests_.push_back(d);
  }
  SLUICE_RETURN_IF_ERROR(speculator_->propose(draft_requests_, scheduler_, stats_));
  if (n_draft_slots_ > 0) {
    // Recurrent models: one step's drafts, all sequences together, fit the draft state slots.
    int32_t left = n_draft_slots_;
    for (RequestId id : scheduler_.running()) {
      const SchedRequest* sr = scheduler_.find(id);
      if (!sr || sr->draft.empty()) continue;
      const int32_t keep = std::min(int32_t(sr->draft.size()), left);
      if (keep < int32_t(sr->draft.size())) {
        draft_trim_.assign(sr->draft.begin(), sr->draft.begin() + keep);
        scheduler_.set_draft(id, draft_trim_);
      }
      left -= keep;
    }
  }
  return {};
}

void Engine::build_batch(const SchedulerOutput& out, Batch& batch, int32_t n_draft_max) const {
  batch.clear();
  batch.n_kv_groups = kv_.n_groups();
  batch.block_copies.assign(out.copies.begin(), out.copies.end());
  // Rejected drafts' states go back first: a checkpoint or fork copy of the slot after them
  // reads the state at the sequence's last accepted token.
  batch.state_copies.clear();
  for (const StateRewind& w : rewinds_) {
    if (kv_.has(w.id) && kv_.state_slot(w.id) == w.slot) {
      batch.state_copies.push_back(BlockCopy{w.src, w.slot});
    }
  }
  batch.state_copies.insert(batch.state_copies.end(), out.state_copies.begin(),
                            out.state_copies.end());
  int32_t draft_slot = draft_slot0_;
  for (const ScheduledSeq& s : out.seqs) {
    const SchedRequest* sr = scheduler_.find(s.id);
    const int32_t n_known = s.n_new_tokens - s.n_draft;
    const int32_t n_draft = std::min(s.n_draft, n_draft_max);
    std::span<const int32_t> toks(sr->tokens.data() + s.n_computed, size_t(n_known));
    if (n_draft == 0) {
      batch.add_sequence(toks, s.n_computed, kv_.block_tables(s.id),
                         s.samples ? LogitsMode::kLast : LogitsMode::kNone, kv_.state_slot(s.id));
    } else {
      // The last known token, then the draft: logits at each of them.
      seq_tokens_.assign(toks.begin(), toks.end());
      seq_tokens_.insert(seq_tokens_.end(), sr->draft.begin(), sr->draft.begin() + n_draft);
      batch.add_sequence(seq_tokens_, s.n_computed, kv_.block_tables(s.id), LogitsMode::kAll,
                         kv_.state_slot(s.id));
      if (n_draft_slots_ > 0) {
        batch.seqs.back().draft_state_slot = draft_slot;
        draft_slot += n_draft;
      }
    }
  }
}

Status Engine::verify(const ScheduledSeq& s, Request& r, int32_t row, Verified& v) {
  const int32_t n_vocab = executor_.capacity().n_vocab;
  const SchedRequest* sr = scheduler_.find(s.id);
  v.samples.clear();
  v.n_accepted = 0;
  v.error.clear();
  const std::span<const float> q_rows = speculator_->draft_q(s.id);
  for (int32_t j = 0; j <= s.n_draft; ++j) {
    std::span<const float> logits(logits_.row(row + j), size_t(n_vocab));
    if (j < s.n_draft) {
      // q of draft token j (empty: one-hot, as n-gram and greedy drafts are).
      std::span<const float> q;
      if (q_rows.size() >= size_t(j + 1) * size_t(n_vocab)) {
        q = q_rows.subspan(size_t(j) * size_t(n_vocab), size_t(n_vocab));
      }
      Result<VerifyResult> verified = r.sampler.verify(logits, sr->draft[size_t(j)], q, sample_ws_);
      if (!verified.ok() && r.sampler.has_grammar()) {
        v.error = verified.message();
        break;
      }
      SLUICE_ASSIGN_OR_RETURN(VerifyResult vr, std::move(verified));
      r.sampler.accept(vr.sample.token);
      v.samples.push_back(vr.sample);
      if (!vr.accepted) break;
      ++v.n_accepted;
    } else {
      Result<SampleResult> sampled = sample_next(r, logits);
      if (!sampled.ok() && r.sampler.has_grammar()) {
        v.error = sampled.message();
        break;
      }
      SLUICE_ASSIGN_OR_RETURN(SampleResult sr2, std::move(sampled));
      r.sampler.accept(sr2.token);
      v.samples.push_back(sr2);
    }
  }
  speculator_->on_verified(s.id, s.n_draft, v.n_accepted, int32_t(v.samples.size()), stats_);
  return {};
}

void Engine::note_scheduled(const SchedulerOutput& out, double t) {
  for (const ScheduledSeq& s : out.seqs) {
    const SchedRequest* sr = scheduler_.find(s.id);
    Request& r = requests_.at(s.id);
    if (r.times.scheduled < 0) r.times.scheduled = t;
    if (s.n_computed < sr->n_prompt) {
      stats_.prompt_tokens +=
          uint64_t(std::min(s.n_computed + s.n_new_tokens, sr->n_prompt) - s.n_computed);
    }
  }
}

void Engine::end_unschedulable(std::vector<EngineEvent>& events) {
  // Work left but nothing schedulable: the head request cannot fit in the whole KV cache
  // even alone (it grew past it while decoding). It ends as "context full".
  if (scheduler_.has_work() && scheduler_.n_running() == 0) {
    const RequestId id = scheduler_.waiting().front();
    EngineEvent ev;
    ev.id = id;
    finish(id, requests_.at(id), FinishReason::kContext, ev);
    events.push_back(std::move(ev));
  }
}

void Engine::drop_in_flight() {
  for (const InFlight& f : in_flight_) scheduler_.on_step_failed(f.out);
  in_flight_.clear();
}

Result<std::vector<EngineEvent>> Engine::step() {
  const double t0 = now();
  std::vector<EngineEvent> events = std::move(pending_events_);
  pending_events_.clear();

  if (depth_ > 1) {
    // Pipelined: fill the executor's pipeline with steps over requests not in flight, each a
    // 1/depth share of the work, then take the oldest step's logits.
    while (int32_t(in_flight_.size()) < depth_) {
      const int64_t work = int64_t(scheduler_.n_running() + scheduler_.n_waiting());
      const int32_t share = int32_t(std::max<int64_t>(1, (work + depth_ - 1) / depth_));
      SchedulerOutput out = scheduler_.schedule(share);
      if (out.empty()) break;
      InFlight f;
      if (!spare_in_flight_.empty()) {  // a collected step's batch: its buffers are reused
        f = std::move(spare_in_flight_.back());
        spare_in_flight_.pop_back();
      }
      f.out = std::move(out);
      f.batch.block_size = batch_.block_size;
      build_batch(f.out, f.batch);
      note_scheduled(f.out, t0);
      f.t_submit = now();
      if (Status st = executor_.submit(f.batch); !st.ok()) {
        scheduler_.on_step_failed(f.out);
        drop_in_flight();
        return st;
      }
      in_flight_.push_back(std::move(f));
    }
    if (in_flight_.empty()) {
      end_unschedulable(events);
      return events;
    }
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (Status st = executor_.collect(logits_); !st.ok()) {
      scheduler_.on_step_failed(f.out);
      drop_in_flight();
      return st;
    }
    if (roofline_) {
      roofline_->record(f.batch, now() - f.t_submit, executor_.last_step_expert_reads(),
                        executor_.last_step_comm());
    }
    const Status st = process_step(f.out, events);
    spare_in_flight_.push_back(std::move(f));
    SLUICE_RETURN_IF_ERROR(st);
  } else {
    SLUICE_RETURN_IF_ERROR(propose_drafts());
    SchedulerOutput out = scheduler_.schedule();
    if (out.empty()) {
      end_unschedulable(events);
      return events;
    }
    build_batch(out, batch_);
    if (speculator_) {
      const auto build = [&](int32_t n_draft_max) -> const Batch& {
        build_batch(out, batch_alt_, n_draft_max);
        return batch_alt_;
      };
      StepRoofline* roofline = roofline_ ? &*roofline_ : nullptr;
      if (speculator_->gate(out, roofline, build, stats_)) build_batch(out, batch_);
    }
    note_scheduled(out, t0);
    const double t_exec = now();
    if (Status st = executor_.execute(batch_, logits_); !st.ok()) {
      scheduler_.on_step_failed(out);
      return st;
    }
    if (roofline_) {
      roofline_->record(batch_, now() - t_exec, executor_.last_step_expert_reads(),
                        executor_.last_step_comm());
    }
    rewinds_.clear();  // applied by this step
    draft_slot_of_.clear();
    for (const BatchSequence& bs : batch_.seqs) draft_slot_of_.push_back(bs.draft_state_slot);
    SLUICE_RETURN_IF_ERROR(process_step(out, events));
    if (speculator_) speculator_->on_step_done(out, batch_.n_tokens(), now() - t0);
  }
  ++stats_.steps;
  stats_.busy_seconds += now() - t0;
  return events;
}

Status Engine::process_step(const SchedulerOutput& out, std::vector<EngineEvent>& events) {
  // Verify the drafts first: how many each sequence accepted decides its n_computed.
  verified_.resize(out.seqs.size());
  n_accepted_.assign(out.seqs.size(), 0);
  for (int32_t row = 0; row < logits_.n_rows(); ++row) {
    const size_t i = size_t(logits_.seq_index[size_t(row)]);
    const ScheduledSeq& s = out.seqs[i];
    if (s.n_draft == 0) continue;
    SLUICE_RETURN_IF_ERROR(verify(s, requests_.at(s.id), row, verified_[i]));
    n_accepted_[i] = verified_[i].n_accepted;
    if (i < draft_slot_of_.size() && draft_slot_of_[i] >= 0 && n_accepted_[i] < s.n_draft) {
      rewinds_.push_back({s.id, kv_.state_slot(s.id), draft_slot_of_[i] + n_accepted_[i]});
      ++stats_.state_rewinds;
    }
    row += s.n_draft;  // the sequence's other rows
  }
  // A leader aborted while its step was in flight forked nothing (its heir recomputes the
  // prompt): its samples must not draw from this row.
  forked_.assign(out.seqs.size(), false);
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    forked_[i] = !out.seqs[i].forks.empty() && scheduler_.find(out.seqs[i].id) != nullptr;
  }
  scheduler_.on_step_done(out, n_accepted_);  // forks the samples in ScheduledSeq::forks
  for (const ScheduledSeq& s : out.seqs) {
    // A sample that forked into the running set was scheduled when its leader's prompt was; one
    // past max_seqs waits to recompute it and is scheduled when that starts.
    const RequestTimes* leader = times(s.id);
    for (RequestId id : s.forks) {
      const SchedRequest* sr = scheduler_.find(id);
      if (leader && sr && sr->state == RequestState::kRunning) {
        requests_.at(id).times.scheduled = leader->scheduled;
      }
    }
  }

  for (int32_t row = 0; row < logits_.n_rows(); ++row) {
    const size_t i = size_t(logits_.seq_index[size_t(row)]);
    const ScheduledSeq& s = out.seqs[i];
    if (s.n_draft > 0) {
      // Accepted drafts are already among the scheduler's tokens; the last token is not.
      row += s.n_draft;
      auto it = requests_.find(s.id);
      if (it == requests_.end()) continue;
      EngineEvent ev;
      ev.id = s.id;
      const Verified& v = verified_[i];
      bool done = false;
      for (size_t j = 0; j < v.samples.size() && !done; ++j) {
        done = emit(s.id, it->second, v.samples[j],
                    /*append=*/j + 1 == v.samples.size() && v.error.empty(), ev);
      }
      if (!done && !v.error.empty()) {
        ev.error = v.error;
        finish(s.id, it->second, FinishReason::kError, ev);
      }
      events.push_back(std::move(ev));
      continue;
    }
    // The request, then the samples that forked it: n tokens from one row of logits.
    const size_t n_forks = forked_[i] ? s.forks.size() : 0;
    for (size_t k = 0; k <= n_forks; ++k) {
      const RequestId id = k == 0 ? s.id : s.forks[k - 1];
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      EngineEvent ev;
      ev.id = id;
      SLUICE_RETURN_IF_ERROR(advance(id, it->second, logits_.row(row), ev));
      events.push_back(std::move(ev));
    }
  }
  return {};
}

}  // namespace sluice
