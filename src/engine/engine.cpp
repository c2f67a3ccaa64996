#include "engine/engine.h"

#include <algorithm>

namespace sluice {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContext: return "context";
    case FinishReason::kAbort: return "abort";
  }
  return "none";
}

Result<std::unique_ptr<Engine>> Engine::create(const Tokenizer& tokenizer, Executor& executor,
                                               const EngineConfig& config) {
  const ExecutorCapacity cap = executor.capacity();
  int32_t n_ctx = config.n_ctx > 0 ? config.n_ctx : cap.n_ctx;
  if (n_ctx <= 0) return make_error("engine: context length must be positive");
  if (int64_t(tokenizer.vocab().n_tokens()) > int64_t(cap.n_vocab)) {
    return make_error("engine: the tokenizer has ", tokenizer.vocab().n_tokens(),
                      " tokens but the model's output has ", cap.n_vocab, " rows");
  }
  KvCacheConfig kv;
  kv.n_blocks = cap.n_blocks;
  kv.block_size = cap.block_size;
  kv.enable_prefix_cache = config.enable_prefix_cache;
  kv.salt = 0x5eed;
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
  if (config.cost_model) roofline_.emplace(*config.cost_model);
}

double Engine::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
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
  const int32_t blocks_needed = int32_t(prompt.size() / size_t(kv_.block_size())) + 1;
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
    Request r{params[i], std::move(samplers[i]), StreamingDecoder(tokenizer_),
              StopMatcher(params[i].stop), int32_t(prompt.size()), 0, {}};
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
  scheduler_.finish(id);
  finished_times_[id] = std::move(r.times);
  requests_.erase(id);
}

Status Engine::advance(RequestId id, Request& r, const float* logits, EngineEvent& ev) {
  const int32_t n_vocab = executor_.capacity().n_vocab;
  SLUICE_ASSIGN_OR_RETURN(SampleResult s, r.sampler.sample(std::span<const float>(logits, size_t(n_vocab)), sample_ws_));
  r.sampler.accept(s.token);
  const double t = now();
  if (r.times.first_token < 0) r.times.first_token = t;
  r.times.tokens.push_back(t);
  ++r.n_generated;
  ++stats_.generated_tokens;
  ev.tokens.push_back(s.token);
  if (r.params.sampling.n_logprobs >= 0) ev.samples.push_back(s);

  if (!r.params.ignore_eos && tokenizer_.vocab().is_eog(s.token)) {
    finish(id, r, FinishReason::kStop, ev);
    return {};
  }
  StopMatcher::Output o = r.stop.push(r.decoder.push(s.token));
  ev.text += o.text;
  if (o.stopped()) {
    ev.stop_index = o.stop_index;
    finish(id, r, FinishReason::kStop, ev);
    return {};
  }
  if (r.params.max_tokens > 0 && r.n_generated >= r.params.max_tokens) {
    finish(id, r, FinishReason::kLength, ev);
    return {};
  }
  const SchedRequest* sr = scheduler_.find(id);
  if (sr->num_tokens() + 1 >= n_ctx_) {
    // The sampled token is appended below would fill the context: nothing more can be computed.
    finish(id, r, FinishReason::kContext, ev);
    return {};
  }
  scheduler_.append_token(id, s.token);
  return {};
}

Result<std::vector<EngineEvent>> Engine::step() {
  const double t0 = now();
  std::vector<EngineEvent> events = std::move(pending_events_);
  pending_events_.clear();

  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) {
    // Work left but nothing schedulable: the head request cannot fit in the whole KV cache
    // even alone (it grew past it while decoding). It ends as "context full".
    if (scheduler_.has_work() && scheduler_.n_running() == 0) {
      const RequestId id = scheduler_.waiting().front();
      EngineEvent ev;
      ev.id = id;
      finish(id, requests_.at(id), FinishReason::kContext, ev);
      events.push_back(std::move(ev));
    }
    return events;
  }

  batch_.clear();
  for (const BlockCopy& c : out.copies) batch_.block_copies.push_back({c.src, c.dst});
  for (const ScheduledSeq& s : out.seqs) {
    const SchedRequest* sr = scheduler_.find(s.id);
    std::span<const int32_t> toks(sr->tokens.data() + s.num_computed, size_t(s.n_new));
    batch_.add_sequence(toks, s.num_computed, kv_.block_table(s.id),
                        s.samples ? LogitsMode::kLast : LogitsMode::kNone);
    Request& r = requests_.at(s.id);
    if (r.times.scheduled < 0) r.times.scheduled = t0;
    if (s.num_computed < sr->n_prompt) {
      stats_.prompt_tokens += uint64_t(std::min(s.num_computed + s.n_new, sr->n_prompt) - s.num_computed);
    }
  }
  const double t_exec = now();
  SLUICE_RETURN_IF_ERROR(executor_.execute(batch_, logits_));
  if (roofline_) roofline_->record(batch_, now() - t_exec);
  scheduler_.on_step_done(out);  // forks the samples in ScheduledSeq::forks
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
    const ScheduledSeq& s = out.seqs[size_t(logits_.seq_index[size_t(row)])];
    // The request, then the samples that forked it: n tokens from one row of logits.
    for (size_t k = 0; k <= s.forks.size(); ++k) {
      const RequestId id = k == 0 ? s.id : s.forks[k - 1];
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      EngineEvent ev;
      ev.id = id;
      SLUICE_RETURN_IF_ERROR(advance(id, it->second, logits_.row(row), ev));
      events.push_back(std::move(ev));
    }
  }
  ++stats_.steps;
  stats_.busy_seconds += now() - t0;
  return events;
}

}  // namespace sluice
