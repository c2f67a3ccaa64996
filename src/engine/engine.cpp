#include "engine/engine.h"

#include <algorithm>
#include <cmath>

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

Result<SpecMode> parse_spec_mode(std::string_view name) {
  if (name == "none" || name.empty()) return SpecMode::kNone;
  if (name == "ngram") return SpecMode::kNgram;
  if (name == "draft") return SpecMode::kDraft;
  return make_error("unknown speculative decoding mode '", std::string(name),
                    "' (expected none, ngram or draft)");
}

Result<SpecGate> parse_spec_gate(std::string_view name) {
  if (name == "off") return SpecGate::kOff;
  if (name == "roofline") return SpecGate::kRoofline;
  if (name == "measured") return SpecGate::kMeasured;
  return make_error("unknown speculation gate '", std::string(name),
                    "' (expected measured, roofline or off)");
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::kNone:
      return "none";
    case SpecMode::kNgram:
      return "ngram";
    case SpecMode::kDraft:
      return "draft";
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
  if (config.spec.mode != SpecMode::kNone) {
    if (config.spec.k < 1 || config.spec.k > 64) {
      return make_error("speculative draft length must be in [1, 64] (got ", config.spec.k, ")");
    }
    if (config.spec.mode == SpecMode::kDraft) {
      if (!config.spec.draft) return make_error("--spec draft needs a draft model (--model-draft)");
      const ExecutorCapacity dc = config.spec.draft->capacity();
      if (dc.n_vocab != cap.n_vocab) {
        return make_error("the draft model's vocabulary has ", dc.n_vocab, " tokens, the target's ",
                          cap.n_vocab, ": they must be identical");
      }
      if (const Tokenizer* dt = config.spec.draft_tokenizer) {
        const Vocab& a = tokenizer.vocab();
        const Vocab& b = dt->vocab();
        if (a.n_tokens() != b.n_tokens()) {
          return make_error("the draft model's vocabulary has ", b.n_tokens(),
                            " tokens, the target's ", a.n_tokens(), ": they must be identical");
        }
        for (int32_t t = 0; t < a.n_tokens(); ++t) {
          if (a.text(t) != b.text(t)) {
            return make_error("the draft model's vocabulary differs from the target's at token ", t,
                              " ('", b.text(t), "' vs '", a.text(t), "')");
          }
        }
      }
      if (dc.block_size != cap.block_size) {
        return make_error("the draft executor's KV block size differs from the target's");
      }
    }
    const NgramConfig& g = config.spec.ngram;
    if (g.n_min < 1 || g.n_max < g.n_min || g.n_max > 64) {
      return make_error("n-gram sizes must satisfy 1 <= min <= max <= 64 (got ", g.n_min, ", ",
                        g.n_max, ")");
    }
  }
  KvCacheConfig kv;
  kv.n_blocks = cap.n_blocks;
  kv.block_size = cap.block_size;
  kv.enable_prefix_cache = config.enable_prefix_cache;
  kv.salt = 0x5eed;
  kv.group_windows = cap.kv_group_windows;
  return std::unique_ptr<Engine>(new Engine(tokenizer, executor, config, n_ctx, kv));
}

Engine::Engine(const Tokenizer& tokenizer, Executor& executor, const EngineConfig& config,
               int32_t n_ctx, KvCacheConfig kv_config)
    : tokenizer_(tokenizer),
      executor_(executor),
      config_(config),
      n_ctx_(n_ctx),
      kv_(kv_config),
      scheduler_(config.scheduler, kv_),
      epoch_(std::chrono::steady_clock::now()) {
  batch_.block_size = executor.capacity().block_size;
  batch_alt_.block_size = batch_.block_size;
  if (config.cost_model) roofline_.emplace(*config.cost_model);
  if (config.spec.mode == SpecMode::kNone) depth_ = std::max(1, executor.pipeline_depth());
  grammar_vocab_ = make_grammar_vocab(tokenizer, executor.capacity().n_vocab);
  if (config.spec.mode == SpecMode::kNgram) {
    proposer_ = std::make_unique<NgramProposer>(config.spec.ngram);
  } else if (config.spec.mode == SpecMode::kDraft) {
    proposer_ = std::make_unique<DraftModelProposer>(*config.spec.draft);
  }
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

Result<KvBlockData> Engine::export_prefix(std::span<const int32_t> tokens) const {
  const std::vector<BlockId> ids = kv_.cached_prefix_blocks(tokens);
  const size_t n_full = tokens.size() / size_t(kv_.block_size());
  if (ids.size() != n_full) {
    return make_error("export_prefix: ", ids.size(), " of the ", n_full,
                      " full blocks of the prefix are cached");
  }
  return executor_.export_blocks(ids);
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
  if (proposer_) {
    if (const SchedRequest* sr = scheduler_.find(id)) proposer_->finish(id, sr->tokens);
  }
  scheduler_.finish(id);
  finished_times_[id] = std::move(r.times);
  requests_.erase(id);
}

Status Engine::advance(RequestId id, Request& r, const float* logits, EngineEvent& ev) {
  const int32_t n_vocab = executor_.capacity().n_vocab;
  Result<SampleResult> sampled =
      r.sampler.sample(std::span<const float>(logits, size_t(n_vocab)), sample_ws_);
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
  StopMatcher::Output o = r.stop.push(r.decoder.push(s.token));
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

int32_t Engine::draft_len(const Request& r, const SchedRequest& sr) const {
  // Acceptance estimated from decayed counts with a uniform prior; draft i is worth proposing
  // while acceptance^i >= min_gain.
  const double alpha = (r.spec_accepts + 1.0) / (r.spec_accepts + r.spec_rejects + 2.0);
  int32_t k = config_.spec.k;
  if (alpha < 1.0) {
    k = std::min(k, int32_t(std::floor(std::log(config_.spec.min_gain) / std::log(alpha))));
  }
  k = std::max(k, 1);
  // Every token emitted must fit max_tokens (the last emitted one is the target's own) and
  // every computed position the context.
  if (r.params.max_tokens > 0) k = std::min(k, r.params.max_tokens - r.n_generated - 1);
  k = std::min(k, n_ctx_ - sr.num_tokens());
  return k;
}

Status Engine::propose_drafts() {
  if (!proposer_) return {};
  slots_.clear();
  for (RequestId id : scheduler_.running()) {
    const SchedRequest* sr = scheduler_.find(id);
    auto it = requests_.find(id);
    if (!sr || it == requests_.end()) continue;
    Request& r = it->second;
    r.draft.clear();
    r.draft_q.clear();
    // Every token but the last computed, and not a group's leader about to fork.
    if (sr->n_computed + 1 != sr->num_tokens() || !sr->awaiting_fork.empty()) {
      scheduler_.set_draft(id, {});
      continue;
    }
    const int32_t k = draft_len(r, *sr);
    if (k <= 0) {
      scheduler_.set_draft(id, {});
      continue;
    }
    DraftSlot slot;
    slot.id = id;
    slot.tokens = sr->tokens;
    slot.max_k = k;
    slot.params = &r.params.sampling;
    slot.draft = &r.draft;
    slot.q = &r.draft_q;
    slots_.push_back(slot);
  }
  if (!slots_.empty()) {
    const double t0 = now();
    SLUICE_RETURN_IF_ERROR(proposer_->propose(slots_));
    stats_.spec_propose_seconds += now() - t0;
  }
  for (const DraftSlot& slot : slots_) {
    // A draft token the grammar refuses would be rejected: cut the draft there.
    Request& r = requests_.at(slot.id);
    if (r.sampler.has_grammar() && !slot.draft->empty()) {
      const size_t keep = size_t(r.sampler.grammar_allowed_prefix(*slot.draft));
      if (keep < slot.draft->size()) {
        stats_.spec_grammar_cut_tokens += uint64_t(slot.draft->size() - keep);
        slot.draft->resize(keep);
        if (!slot.q->empty()) slot.q->resize(keep * size_t(executor_.capacity().n_vocab));
      }
    }
    scheduler_.set_draft(slot.id, *slot.draft);
  }
  return {};
}

void Engine::build_batch(const SchedulerOutput& out, Batch& batch, int32_t draft_cap) const {
  batch.clear();
  batch.n_kv_groups = kv_.n_groups();
  batch.block_copies.assign(out.copies.begin(), out.copies.end());
  for (const ScheduledSeq& s : out.seqs) {
    const SchedRequest* sr = scheduler_.find(s.id);
    const int32_t n_known = s.n_new_tokens - s.n_draft;
    const int32_t n_draft = std::min(s.n_draft, draft_cap);
    std::span<const int32_t> toks(sr->tokens.data() + s.n_computed, size_t(n_known));
    if (n_draft == 0) {
      batch.add_sequence(toks, s.n_computed, kv_.block_tables(s.id),
                         s.samples ? LogitsMode::kLast : LogitsMode::kNone);
    } else {
      // The last known token, then the draft: logits at each of them.
      seq_tokens_.assign(toks.begin(), toks.end());
      seq_tokens_.insert(seq_tokens_.end(), sr->draft.begin(), sr->draft.begin() + n_draft);
      batch.add_sequence(seq_tokens_, s.n_computed, kv_.block_tables(s.id), LogitsMode::kAll);
    }
  }
}

void Engine::gate_drafts(SchedulerOutput& out) {
  int32_t longest = 0;
  for (const ScheduledSeq& s : out.seqs) longest = std::max(longest, s.n_draft);
  const bool measured = config_.spec.gate == SpecGate::kMeasured;
  if (longest == 0 || config_.spec.gate == SpecGate::kOff || (!roofline_ && !measured)) return;
  // The step is priced with every draft cut to at most L tokens, for L = 0 and powers of two
  // up to the longest draft; the L with the most expected tokens per second wins. Draft token
  // i of a request adds acceptance^i expected tokens. Memory-bound steps keep long drafts
  // (extra tokens are nearly free); compute-bound ones (large batches, tiny models) cut them,
  // to 0 when they would cost more time than they save. The price (step_price): what steps of
  // that size have cost on this run (MeasuredStepCost), or the roofline's. Sizes with no
  // measured price yet are explored one at a time.
  int32_t n_sampling = 0;
  alpha_.clear();
  for (const ScheduledSeq& s : out.seqs) {
    n_sampling += s.samples ? 1 : 0;
    const Request& r = requests_.at(s.id);
    // Optimistic (one accepted token as the prior, none rejected): a request's drafts are
    // tried until one is rejected. The gate learns acceptance only from drafts it lets
    // through: priced with draft_len's 0.5 prior, a repeated request's first drafts were cut
    // on that guess and the estimate never moved.
    alpha_.push_back((r.spec_accepts + 1.0) / (r.spec_accepts + r.spec_rejects + 1.0));
  }
  double best_rate = -1;
  int32_t best_cap = longest, last_priced = -1;
  for (int32_t cap = 0;; cap = cap == 0 ? 1 : std::min(2 * cap, longest)) {
    build_batch(out, batch_alt_, cap);
    double expected = n_sampling;
    for (size_t i = 0; i < out.seqs.size(); ++i) {
      double p = 1.0;
      const int32_t n_draft = std::min(out.seqs[i].n_draft, cap);
      for (int32_t j = 0; j < n_draft; ++j) expected += (p *= alpha_[i]);
    }
    const std::optional<double> seconds = step_price(batch_alt_);
    if (!seconds) {
      // No price for this size yet: run it (and so measure it) when the sizes priced so far
      // gained with size, or none is priced; else the best priced one.
      if (last_priced < 0 || best_cap == last_priced) best_cap = cap;
      break;
    }
    last_priced = cap;
    const double rate = expected / *seconds;
    if (rate > best_rate * (1 + 1e-9)) {
      best_rate = rate;
      best_cap = cap;
    }
    if (cap >= longest) break;
  }
  // Now and then a step the gate would run without drafts verifies one draft token per
  // request anyway, so the prices of the sizes it skips and the requests' acceptance stay
  // current: a slow measurement (a busy moment) would otherwise keep drafts off for good.
  if (best_cap == 0 && measured && ++skips_since_probe_ >= kGateProbeEvery) {
    best_cap = 1;
    skips_since_probe_ = 0;
  }
  if (best_cap >= longest) return;
  ++(best_cap == 0 ? stats_.spec_skipped_steps : stats_.spec_cut_steps);
  for (ScheduledSeq& s : out.seqs) {
    const int32_t cut = std::max(0, s.n_draft - best_cap);
    s.n_new_tokens -= cut;
    s.n_draft -= cut;
    out.n_tokens -= cut;
  }
  build_batch(out, batch_);
}

namespace {
// Whether a step computes more than each sequence's last known token (and its drafts): a
// prompt chunk, or a prompt recomputed after preemption.
bool has_prompt_tokens(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    if (!s.samples || s.n_new_tokens - s.n_draft != 1) return true;
  }
  return false;
}
}  // namespace

std::optional<double> Engine::step_price(const Batch& batch) {
  if (config_.spec.gate == SpecGate::kMeasured) return measured_.seconds(batch.n_tokens());
  if (roofline_) return roofline_->predict(batch);
  return std::nullopt;
}

Status Engine::verify(const ScheduledSeq& s, Request& r, int32_t row, Verified& v) {
  const int32_t n_vocab = executor_.capacity().n_vocab;
  const SchedRequest* sr = scheduler_.find(s.id);
  v.samples.clear();
  v.n_accepted = 0;
  v.error.clear();
  for (int32_t j = 0; j <= s.n_draft; ++j) {
    std::span<const float> logits(logits_.row(row + j), size_t(n_vocab));
    if (j < s.n_draft) {
      // q of draft token j (empty: one-hot, as n-gram and greedy drafts are).
      std::span<const float> q;
      if (r.draft_q.size() >= size_t(j + 1) * size_t(n_vocab)) {
        q = std::span<const float>(r.draft_q.data() + size_t(j) * size_t(n_vocab), size_t(n_vocab));
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
      Result<SampleResult> sampled = r.sampler.sample(logits, sample_ws_);
      if (!sampled.ok() && r.sampler.has_grammar()) {
        v.error = sampled.message();
        break;
      }
      SLUICE_ASSIGN_OR_RETURN(SampleResult sr2, std::move(sampled));
      r.sampler.accept(sr2.token);
      v.samples.push_back(sr2);
    }
  }
  // Counts decayed per draft token (about the last 30): short drafts, each accepted whole,
  // are as much evidence as one long one. (Decayed per verification, a request whose drafts
  // the gate had cut to one token could not estimate above (5 + 1) / (5 + 2) = 0.86, and the
  // gate kept cutting them for that estimate.)
  constexpr double kDecayPerToken = 0.97;
  const double decay = std::pow(kDecayPerToken, double(s.n_draft));
  r.spec_accepts = r.spec_accepts * decay + v.n_accepted;
  r.spec_rejects = r.spec_rejects * decay + (v.n_accepted < s.n_draft ? 1.0 : 0.0);
  ++stats_.spec_verify_seqs;
  stats_.spec_draft_tokens += uint64_t(s.n_draft);
  stats_.spec_accepted_tokens += uint64_t(v.n_accepted);
  stats_.spec_emitted_tokens += uint64_t(v.samples.size());
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
    gate_drafts(out);
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
    SLUICE_RETURN_IF_ERROR(process_step(out, events));
    if (proposer_ && config_.spec.gate == SpecGate::kMeasured && !has_prompt_tokens(out)) {
      // The whole step, drafting, scheduling and sampling included: what a draft token costs.
      // Steps of decoding sequences only: the gate prices drafts on top of those, and a
      // prompt's tokens cost less (one row of logits, no sampling) and come cold.
      measured_.record(batch_.n_tokens(), now() - t0);
    }
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
