#include "server/engine_bridge.h"

#include <poll.h>

#include <chrono>

#include "base/log.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using http::internal_error;
namespace {

using Clock = std::chrono::steady_clock;
using State = RequestChannel::State;

ApiError unavailable(std::string message, std::string code) {
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable";
  e.message = std::move(message);
  e.code = std::move(code);
  e.retry_after_s = 1;
  return e;
}

ApiError client_gone() {
  ApiError e;
  e.status = 499;
  e.type = "cancelled";
  e.message = "the client closed the connection";
  return e;
}

}  // namespace

// --- RequestChannel -----------------------------------------------------------------------------

void RequestChannel::deliver(std::vector<ChoiceEvent>&& events, State next, ApiError error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.empty()) {
      events_ = std::move(events);
    } else {
      for (ChoiceEvent& e : events) events_.push_back(std::move(e));
    }
    if (!terminal(state_)) {
      state_ = next;
      if (terminal(next)) error_ = std::move(error);
    }
  }
  cv_.notify_all();
}

State RequestChannel::wait(std::vector<ChoiceEvent>& out, State seen) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !events_.empty() || state_ != seen; });
  if (out.empty()) {
    out.swap(events_);
  } else {
    for (ChoiceEvent& e : events_) out.push_back(std::move(e));
    events_.clear();
  }
  return state_;
}

State RequestChannel::wait_terminal() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return terminal(state_); });
  events_.clear();
  return state_;
}

State RequestChannel::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

ApiError RequestChannel::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

// --- EngineBridge: HTTP-thread side -------------------------------------------------------------

EngineBridge::EngineBridge(ServerMetrics& metrics, const BridgeOptions& options)
    : metrics_(metrics), options_(options) {}

EngineBridge::~EngineBridge() {
  stop();
}

void EngineBridge::start(std::function<Result<Engine*>()> load) {
  thread_ = std::thread([this, load = std::move(load)] { run(load); });
}

Status EngineBridge::wait_loaded() {
  std::unique_lock<std::mutex> lock(mu_);
  loaded_cv_.wait(lock, [&] { return loaded_; });
  return load_status_;
}

std::optional<Status> EngineBridge::load_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_) return std::nullopt;
  return load_status_;
}

std::variant<std::shared_ptr<RequestChannel>, ApiError> EngineBridge::submit(GenerationJob job) {
  const int64_t k = int64_t(job.prompts.size());
  if (options_.max_queue > 0 && k > options_.max_queue) {
    return bad_request("the request asks for " + std::to_string(k) +
                           " generations; the server queues at most " +
                           std::to_string(options_.max_queue) + " (--max-queue)",
                       "n");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready()) return unavailable("the model is loading", "model_loading");
    if (admission_closed_ || stop_)
      return unavailable("the server is shutting down", "shutting_down");
  }
  if (options_.max_queue > 0) {
    int64_t cur = n_queued_.load();
    do {
      if (cur + k > options_.max_queue) {
        ApiError e;
        e.status = 429;
        e.type = "rate_limit_error";
        e.code = "queue_full";
        e.message = "the server queue is full (" + std::to_string(options_.max_queue) +
                    " generations waiting); retry later";
        e.retry_after_s = 1;
        return e;
      }
    } while (!n_queued_.compare_exchange_weak(cur, cur + k));
  } else {
    n_queued_.fetch_add(k);
  }
  auto channel = std::make_shared<RequestChannel>();
  channel->job_id_ = next_job_id_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (admission_closed_ || stop_) {
      release_queue_slots(k);
      return unavailable("the server is shutting down", "shutting_down");
    }
    inbox_.push_back(Pending{std::move(job), channel});
    n_active_.fetch_add(1);
  }
  cv_.notify_one();
  return channel;
}

void EngineBridge::cancel(const RequestChannel& channel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(channel.job_id_);
  }
  cv_.notify_one();
}

void EngineBridge::cancel_all(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    admission_closed_ = true;
    cancel_all_ = true;
    cancel_all_reason_ = reason;
  }
  cv_.notify_one();
}

void EngineBridge::close_admission() {
  std::lock_guard<std::mutex> lock(mu_);
  admission_closed_ = true;
}

void EngineBridge::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    admission_closed_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineBridge::release_queue_slots(int64_t n) {
  if (n > 0) n_queued_.fetch_sub(n);
}

// --- EngineBridge: engine thread ----------------------------------------------------------------

void EngineBridge::run(const std::function<Result<Engine*>()>& load) {
  Result<Engine*> engine = make_error("the model loader failed");
  try {
    engine = load();
  } catch (const std::exception& e) {
    engine = make_error("loading the model failed: ", e.what());
  }
  if (engine.ok()) {  // metrics first: whoever sees ready() also sees them
    publish(**engine);
    metrics_.set_ready(true);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    loaded_ = true;
    load_status_ = engine.status();
    if (engine.ok()) ready_.store(true, std::memory_order_release);
  }
  loaded_cv_.notify_all();
  if (!engine.ok()) return;
  loop(**engine);
  metrics_.set_ready(false);
}

bool EngineBridge::call(std::function<void(const Engine&)> fn, int timeout_ms) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    bool ran = false;
  };
  auto done = std::make_shared<Done>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready() || stop_) return false;
    // `fn` lives in the queued closure, which outlives a caller that timed out.
    calls_.push_back([done, fn = std::move(fn)](const Engine* engine) {
      if (engine) fn(*engine);
      std::lock_guard<std::mutex> l(done->mu);
      done->finished = true;
      done->ran = engine != nullptr;
      done->cv.notify_all();
    });
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> l(done->mu);
  done->cv.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return done->finished; });
  return done->ran;
}

std::variant<std::vector<std::vector<float>>, ApiError> EngineBridge::embed(
    std::vector<std::vector<int32_t>> inputs) {
  auto job = std::make_shared<EmbedJob>();
  job->inputs = std::move(inputs);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready() || stop_ || admission_closed_) {
      return unavailable("the server is not accepting requests", "shutting_down");
    }
    embeds_.push_back(job);
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> l(job->mu);
  job->cv.wait(l, [&] { return job->done; });
  return std::move(job->result);
}

void EngineBridge::run_embeds(Engine& engine, std::vector<std::shared_ptr<EmbedJob>>& jobs) {
  auto finish = [](EmbedJob& job, std::variant<std::vector<std::vector<float>>, ApiError> r) {
    std::lock_guard<std::mutex> l(job.mu);
    job.result = std::move(r);
    job.done = true;
    job.cv.notify_all();
  };
  std::vector<std::vector<int32_t>> all;
  for (const auto& job : jobs) all.insert(all.end(), job->inputs.begin(), job->inputs.end());
  Result<std::vector<std::vector<float>>> vecs = engine.embed(all);
  if (vecs.ok()) {
    size_t at = 0;
    for (const auto& job : jobs) {
      const size_t n = job->inputs.size();
      std::vector<std::vector<float>> mine(std::make_move_iterator(vecs->begin() + long(at)),
                                           std::make_move_iterator(vecs->begin() + long(at + n)));
      at += n;
      finish(*job, std::move(mine));
    }
    return;
  }
  for (const auto& job : jobs) {
    Result<std::vector<std::vector<float>>> own =
        jobs.size() == 1 ? std::move(vecs) : engine.embed(job->inputs);
    if (own.ok()) {
      finish(*job, std::move(*own));
    } else {
      finish(*job, bad_request(own.message(), "input"));
    }
  }
}

void EngineBridge::post(std::function<void(Engine&)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    posts_.push_back(std::move(fn));
  }
  cv_.notify_all();
}

void EngineBridge::loop(Engine& engine) {
  std::vector<Pending> incoming;
  std::vector<uint64_t> cancels;
  std::vector<std::function<void(const Engine*)>> calls;
  std::vector<std::function<void(Engine&)>> posts;
  std::vector<std::shared_ptr<EmbedJob>> embeds;
  while (true) {
    bool cancel_all = false;
    bool stop = false;
    std::string reason;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!engine.has_work()) {
        const bool woke = cv_.wait_for(lock, std::chrono::seconds(1), [&] {
          return !inbox_.empty() || !cancels_.empty() || !calls_.empty() || !posts_.empty() ||
                 !embeds_.empty() || cancel_all_ || stop_;
        });
        if (!woke) {
          lock.unlock();
          housekeeping();
          continue;
        }
      }
      incoming.swap(inbox_);
      cancels.swap(cancels_);
      calls.swap(calls_);
      posts.swap(posts_);
      embeds.swap(embeds_);
      cancel_all = cancel_all_ || stop_;
      cancel_all_ = false;
      reason = stop_ ? "the server is shutting down" : cancel_all_reason_;
      stop = stop_;
    }
    try {
      for (uint64_t id : cancels) end_job(engine, id, State::kCancelled, client_gone());
      cancels.clear();
      if (cancel_all) {
        std::vector<uint64_t> ids;
        for (const auto& [id, job] : live_) ids.push_back(id);
        for (uint64_t id : ids)
          end_job(engine, id, State::kCancelled, unavailable(reason, "shutting_down"));
        for (Pending& p : incoming) {
          release_queue_slots(int64_t(p.job.prompts.size()));
          p.channel->deliver({}, State::kFailed, unavailable(reason, "shutting_down"));
          n_active_.fetch_sub(1);
        }
        incoming.clear();
      }
      if (stop) {
        for (auto& c : calls) c(nullptr);
        for (const auto& job : embeds) {
          std::lock_guard<std::mutex> l(job->mu);
          job->result = unavailable(reason, "shutting_down");
          job->done = true;
          job->cv.notify_all();
        }
        publish(engine);
        break;
      }
      for (auto& fn : posts) fn(engine);
      posts.clear();
      if (!embeds.empty()) {
        const auto t0 = Clock::now();
        run_embeds(engine, embeds);
        metrics_.observe_step(std::chrono::duration<double>(Clock::now() - t0).count());
        embeds.clear();
      }
      for (Pending& p : incoming) admit(engine, p);
      incoming.clear();
      for (auto& c : calls) c(&engine);
      calls.clear();
      poll_hangups(engine);
      if (engine.has_work()) {
        const auto t0 = Clock::now();
        Result<std::vector<EngineEvent>> events = engine.step();
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        if (events.ok()) {
          metrics_.observe_step(dt);
          std::vector<Delivery> deliveries;
          route_events(engine, *events, deliveries);
          if (after_step_) after_step_(engine);
          account_scheduled(engine);
          publish(engine);
          for (Delivery& d : deliveries) d.channel->deliver(std::move(d.events), d.state);
        } else {
          SLUICE_LOG(kError, "serve: engine step failed: " + events.message());
          std::vector<uint64_t> ids;
          for (const auto& [id, job] : live_) ids.push_back(id);
          for (uint64_t id : ids) {
            end_job(engine, id, State::kFailed,
                    internal_error("the engine failed: " + events.message()));
          }
        }
      }
      publish(engine);
    } catch (const std::exception& e) {
      // Out of memory or a bug: fail what is running rather than take the process down.
      SLUICE_LOG(kError, std::string("serve: engine thread: ") + e.what());
      for (const auto& job : embeds) {
        std::lock_guard<std::mutex> l(job->mu);
        if (job->done) continue;
        job->result = internal_error(e.what());
        job->done = true;
        job->cv.notify_all();
      }
      embeds.clear();
      std::vector<uint64_t> ids;
      for (const auto& [id, job] : live_) ids.push_back(id);
      for (uint64_t id : ids) end_job(engine, id, State::kFailed, internal_error(e.what()));
      for (Pending& p : incoming) {
        if (p.channel->state() != State::kPending) continue;  // admitted or failed already
        release_queue_slots(int64_t(p.job.prompts.size()));
        p.channel->deliver({}, State::kFailed, internal_error(e.what()));
        n_active_.fetch_sub(1);
      }
      incoming.clear();
    }
  }
}

void EngineBridge::admit(Engine& engine, Pending& p) {
  const uint64_t job_id = p.channel->job_id_;
  const size_t n = p.job.prompts.size();
  LiveJob job;
  job.channel = p.channel;
  job.watch_socket = p.job.watch_socket;
  job.ids.assign(n, kFinished);
  job.never_scheduled.assign(n, true);
  job.n_open = int(n);
  if (p.job.pin_prompt && n > 0) job.pin_tokens = p.job.prompts[0];
  for (const PrefixImport& im : p.job.imports) {
    // A failed import (a layout mismatch the transfer's checks missed) only costs the
    // recomputation: the request computes what is not cached.
    Result<int32_t> got = engine.import_prefix(im.tokens, im.blocks, im.first_block);
    if (!got.ok()) SLUICE_LOG(kWarn, "serve: K/V import: " + got.message());
    if (got.ok() && im.state_blocks > 0) {
      const std::span<const int32_t> prefix(
          im.tokens.data(), size_t(im.state_blocks) * size_t(engine.kv().block_size()));
      Result<bool> st = engine.import_state(prefix, im.state);
      if (!st.ok()) SLUICE_LOG(kWarn, "serve: recurrent state import: " + st.message());
    }
  }
  p.job.imports.clear();
  // Consecutive choices over one prompt (n > 1) form one engine group: the prompt is computed
  // once and its KV blocks are shared.
  int64_t cached = 0;
  for (size_t c = 0; c < n;) {
    size_t end = c + 1;
    while (end < n && p.job.prompts[end] == p.job.prompts[c]) ++end;
    // What the scheduler's lookup will find if nothing changes before it runs.
    cached += engine.expected_cached_tokens(p.job.prompts[c]);
    std::vector<GenerationParams> params(p.job.params.begin() + std::ptrdiff_t(c),
                                         p.job.params.begin() + std::ptrdiff_t(end));
    Result<std::vector<RequestId>> ids =
        engine.add_request_group(std::move(p.job.prompts[c]), params);
    if (!ids.ok()) {
      for (RequestId added : job.ids) {
        if (added == kFinished) continue;
        engine.abort(added);
        routes_.erase(added);
      }
      release_queue_slots(int64_t(n));
      p.channel->deliver({}, State::kFailed, bad_request(ids.message()));
      n_active_.fetch_sub(1);
      return;
    }
    for (size_t k = 0; k < ids->size(); ++k) {
      job.ids[c + k] = (*ids)[k];
      routes_[(*ids)[k]] = Route{job_id, int(c + k)};
    }
    c = end;
  }
  p.channel->cached_tokens_.store(cached, std::memory_order_release);
  p.channel->deliver({}, State::kRunning);
  live_.emplace(job_id, std::move(job));
}

void EngineBridge::end_job(Engine& engine, uint64_t job_id, State state, const ApiError& error) {
  auto it = live_.find(job_id);
  if (it == live_.end()) return;  // already finished: its channel is terminal
  LiveJob& job = it->second;
  int64_t unscheduled = 0;
  uint64_t aborted = 0;
  for (size_t c = 0; c < job.ids.size(); ++c) {
    if (job.ids[c] == kFinished) continue;
    engine.abort(job.ids[c]);  // frees the request's KV blocks now
    routes_.erase(job.ids[c]);
    if (job.never_scheduled[c]) ++unscheduled;
    ++aborted;
  }
  release_queue_slots(unscheduled);
  metrics_.count_finish(state == State::kFailed ? "error" : "abort", aborted);
  std::shared_ptr<RequestChannel> channel = std::move(job.channel);
  std::vector<ChoiceEvent> outbox = std::move(job.outbox);
  live_.erase(it);  // stop watching the socket before the handler may close it
  channel->deliver(std::move(outbox), state, error);
  n_active_.fetch_sub(1);
  trim_ticks_ = 5;
}

void EngineBridge::poll_hangups(Engine& engine) {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (const auto& [id, job] : live_) {
    if (job.watch_socket < 0) continue;
    fds.push_back(pollfd{job.watch_socket, POLLRDHUP, 0});
    ids.push_back(id);
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    // A peer that closed (or half-closed) its side is gone, as uvicorn's http.disconnect.
    if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
      end_job(engine, ids[i], State::kCancelled, client_gone());
    }
  }
}

void EngineBridge::route_events(Engine& engine, std::vector<EngineEvent>& events,
                                std::vector<Delivery>& out) {
  std::vector<uint64_t> touched;
  std::vector<std::pair<uint64_t, std::string>> failed;  // a choice failed: its whole job fails
  for (EngineEvent& ev : events) {
    auto rt = routes_.find(ev.id);
    if (rt == routes_.end()) continue;  // aborted by us earlier
    const Route route = rt->second;
    auto lj = live_.find(route.job_id);
    if (lj == live_.end()) {  // only after a failed admission (an exception mid-way)
      routes_.erase(rt);
      continue;
    }
    LiveJob& job = lj->second;
    const size_t c = size_t(route.choice);
    if (job.outbox.empty()) touched.push_back(route.job_id);
    if (ev.finished()) {
      if (const RequestTimes* t = engine.times(ev.id); t && ev.finish != FinishReason::kAbort) {
        metrics_.observe_finished(*t, ev.finish);
      }
      if (job.never_scheduled[c]) {
        job.never_scheduled[c] = false;
        release_queue_slots(1);
      }
      job.ids[c] = kFinished;
      --job.n_open;
      routes_.erase(rt);
    }
    if (ev.finish == FinishReason::kError) failed.emplace_back(route.job_id, ev.error);
    job.outbox.push_back(ChoiceEvent{route.choice, std::move(ev)});
  }
  for (const auto& [job_id, message] : failed)
    end_job(engine, job_id, State::kFailed, internal_error(message));
  for (uint64_t id : touched) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    LiveJob& job = it->second;
    if (job.n_open > 0) {
      out.push_back(Delivery{job.channel, std::move(job.outbox), State::kRunning});
      job.outbox.clear();
      continue;
    }
    if (!job.pin_tokens.empty()) {
      std::vector<BlockId> pinned = engine.pin_prefix(job.pin_tokens);
      const int32_t n_pinned = int32_t(pinned.size());
      // Recurrent models: the state a hit on this prompt resumes from (it leaves a token).
      const int32_t usable =
          int32_t((job.pin_tokens.size() - 1) / size_t(engine.kv().block_size()));
      const KvCacheManager::CheckpointRef state =
          engine.pin_checkpoint(job.pin_tokens, std::min(n_pinned, usable));
      uint64_t handle = 0;
      if (pin_handler_ && !pinned.empty()) {
        handle = pin_handler_(std::move(job.pin_tokens), std::move(pinned), state);
      } else {
        engine.unpin(pinned);
        if (state.slot >= 0) engine.unpin_checkpoint(state.slot);
      }
      job.channel->kv_pinned_blocks_.store(handle ? n_pinned : 0, std::memory_order_release);
      job.channel->kv_handle_.store(handle, std::memory_order_release);
    }
    out.push_back(Delivery{std::move(job.channel), std::move(job.outbox), State::kDone});
    live_.erase(it);
    n_active_.fetch_sub(1);
    trim_ticks_ = 5;
  }
}

void EngineBridge::account_scheduled(Engine& engine) {
  if (n_queued_.load() == 0) return;
  for (auto& [id, job] : live_) {
    for (size_t c = 0; c < job.ids.size(); ++c) {
      if (!job.never_scheduled[c] || job.ids[c] == kFinished) continue;
      const RequestTimes* t = engine.times(job.ids[c]);
      if (t && t->scheduled >= 0) {
        job.never_scheduled[c] = false;
        release_queue_slots(1);
      }
    }
  }
}

void EngineBridge::publish(const Engine& engine) {
  EngineSnapshot s;
  s.waiting = int64_t(engine.scheduler().n_waiting());
  s.running = int64_t(engine.scheduler().n_running());
  s.kv_blocks_used = engine.kv().n_used_blocks();
  s.kv_blocks_total = engine.kv().n_blocks();
  s.kv_bytes_per_block = int64_t(engine.kv_bytes_per_block());
  s.state_slots_used = engine.kv().n_used_state_slots();
  s.state_slots_total = engine.kv().n_state_slots();
  s.state_bytes_per_slot = int64_t(engine.state_bytes_per_slot());
  s.state_checkpoints_used = engine.kv().n_used_checkpoints();
  s.state_checkpoints_total = engine.kv().n_state_checkpoints();
  s.preemptions = engine.scheduler().n_preemptions();
  s.stats = engine.stats();
  s.prefix = engine.kv().prefix_stats();
  s.checkpoints = engine.kv().checkpoint_stats();
  s.sharing = engine.kv().share_stats();
  s.grammar = engine.grammar_stats();
  if (const StepRoofline* r = engine.roofline()) {
    s.has_roofline = true;
    s.roofline = r->stats();
  }
  metrics_.set_engine(s);
  metrics_.set_queue_depth(n_queued_.load());
}

void EngineBridge::housekeeping() {
  // After a burst, freed request and connection memory sits in malloc's arenas; hand it back
  // over the next few idle seconds (connection threads exit a couple of seconds after a burst).
  if (trim_ticks_ <= 0) return;
  --trim_ticks_;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace sluice::server
