// The engine bridge: the one engine thread that owns the Engine, and the thread-safe queues
// through which HTTP handler threads talk to it.
//
//   HTTP thread                          engine thread (owns Engine)
//   -----------                          ---------------------------
//   submit(job) --inbox (mutex+cv)-->    admit: engine.add_request_group per prompt
//   cancel(ch)  --inbox------------->    abort: engine.abort (frees KV blocks at once)
//                                        poll() every watched socket: hang-up -> abort
//                                        engine.step()
//   ch.wait()   <--RequestChannel----    route events by RequestId to their job's channel
//
// Every loop iteration drains the inbox and polls the sockets of all live jobs before the next
// step, so a cancel or a client hang-up takes effect at the next step boundary: at most the
// step already running completes. A job is one HTTP request; its n choices of one prompt are
// one engine request group: n engine requests that compute the prompt once and share its KV
// blocks (Engine::add_request_group).
//
// Contract that keeps socket polling safe: a handler does not return (so its connection does
// not close its socket) before its channel reached a terminal state, and the engine thread
// stops watching a job's socket before it closes the channel.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "http/api_error.h"
#include "server/metrics.h"

namespace sluice::server {

// One engine event of one choice of a job.
struct ChoiceEvent {
  int choice = 0;
  EngineEvent event;
};

// The engine thread -> one HTTP request. Single producer (engine thread), single consumer.
class RequestChannel {
 public:
  enum class State {
    kPending,    // queued, not yet admitted by the engine thread
    kRunning,    // admitted; events flow
    kDone,       // every choice finished (stop, length or context)
    kCancelled,  // aborted: client gone, cancel(), or shutdown; error() says why
    kFailed,     // rejected at admission or the engine failed; error() says why
  };
  static bool terminal(State s) { return s >= State::kDone; }

  // Blocks until events arrived or the state moved past `seen`; appends the events to `out`
  // and returns the current state. Events pushed before a terminal state are always returned
  // with or before it.
  State wait(std::vector<ChoiceEvent>& out, State seen);
  // Blocks until a terminal state, dropping events.
  State wait_terminal();
  State state() const;
  http::ApiError error() const;
  // Prompt tokens found in the prefix cache when the job was admitted (each distinct prompt
  // once, as usage.prompt_tokens counts them); set before the state leaves kPending.
  int64_t cached_tokens() const { return cached_tokens_.load(std::memory_order_acquire); }
  // GenerationJob::pin_prompt: the handle the pin handler gave the pinned prompt blocks (0:
  // none), and how many blocks it holds; set before the state turns kDone.
  uint64_t kv_handle() const { return kv_handle_.load(std::memory_order_acquire); }
  int32_t kv_pinned_blocks() const { return kv_pinned_blocks_.load(std::memory_order_acquire); }

 private:
  friend class EngineBridge;
  void deliver(std::vector<ChoiceEvent>&& events, State next, http::ApiError error = {});

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ChoiceEvent> events_;
  State state_ = State::kPending;
  http::ApiError error_;
  uint64_t job_id_ = 0;  // set before the channel is shared
  std::atomic<int64_t> cached_tokens_{0};
  std::atomic<uint64_t> kv_handle_{0};
  std::atomic<int32_t> kv_pinned_blocks_{0};
};

// K/V of a prompt's leading full blocks that came from elsewhere (a prefill worker, the disk
// tier): imported into the prefix cache right before the job's requests are added, so they
// find it (Engine::import_prefix).
struct PrefixImport {
  std::vector<int32_t> tokens;  // the prompt (its full blocks [first_block, first_block + n))
  int32_t first_block = 0;
  KvBlockData blocks;
  // Models with recurrent layers: the saved state after the first state_blocks full blocks
  // (n_blocks 1; Engine::import_state), without which they find no prefix hit there.
  KvBlockData state;
  int32_t state_blocks = 0;
};

// One HTTP request's generations.
struct GenerationJob {
  std::vector<std::vector<int32_t>> prompts;  // one per choice
  std::vector<GenerationParams> params;       // one per choice
  int watch_socket = -1;                      // the client's socket: hang-up cancels the job
  std::vector<PrefixImport> imports;          // imported before the requests are added
  // Disaggregated prefill: when the job is done, the cached blocks of prompts[0] are pinned
  // and handed to the pin handler (set_pin_handler), whose handle the channel then reports.
  bool pin_prompt = false;
};

struct BridgeOptions {
  // Generations admitted but never scheduled yet, at most; more: 429. 0: unbounded.
  int max_queue = 4096;
};

class EngineBridge {
 public:
  EngineBridge(ServerMetrics& metrics, const BridgeOptions& options);
  ~EngineBridge();  // stop()
  EngineBridge(const EngineBridge&) = delete;
  EngineBridge& operator=(const EngineBridge&) = delete;

  // Starts the engine thread. It calls `load` first (the Engine it returns must outlive the
  // bridge and is used on that thread only), then runs the step loop.
  void start(std::function<Result<Engine*>()> load);
  // Blocks until loading finished; its error, if it failed.
  Status wait_loaded();
  // The loader's result once it finished; nullopt while it runs.
  std::optional<Status> load_status() const;
  bool ready() const { return ready_.load(std::memory_order_acquire); }

  // Queues a job. Errors: 503 (not ready, shutting down), 429 (queue full).
  std::variant<std::shared_ptr<RequestChannel>, http::ApiError> submit(GenerationJob job);
  // Aborts the job at the next step boundary; its channel then ends kCancelled.
  void cancel(const RequestChannel& channel);
  // Runs `fn` on the engine thread between steps (read-only queries of engine state, e.g. KV
  // cache probes) and waits for it. False, without running it, if the engine is not running
  // or does not get to it within `timeout_ms`.
  bool call(std::function<void(const Engine&)> fn, int timeout_ms);
  // Embedding models: the pooled vectors of `inputs` (Engine::embed), computed on the engine
  // thread between steps. Every embedding job waiting when the engine thread gets to them runs
  // in one Engine::embed call, their inputs batched together (if that fails, each job runs
  // alone so that an error reaches only its own job). Blocks until done. Errors: 503 (not
  // ready, shutting down), 400 (an input the engine refuses).
  std::variant<std::vector<std::vector<float>>, http::ApiError> embed(
      std::vector<std::vector<int32_t>> inputs);
  // Runs `fn` on the engine thread between steps without waiting for it (unpinning blocks).
  // Dropped when the engine stops first.
  void post(std::function<void(Engine&)> fn);
  // Engine thread, before start()'s loader returns (or never): who takes pinned prompt blocks
  // (GenerationJob::pin_prompt), and with recurrent layers the pinned checkpoint of the prompt
  // (slot -1: none), and returns a handle for them; it owns them from then on and must unpin
  // them (post) exactly once. Without a handler they are unpinned at once.
  using PinHandler =
      std::function<uint64_t(std::vector<int32_t> tokens, std::vector<BlockId> blocks,
                             KvCacheManager::CheckpointRef state)>;
  void set_pin_handler(PinHandler handler) { pin_handler_ = std::move(handler); }
  // Engine thread, likewise: runs after every step (the disk tier takes the newly cached
  // blocks there).
  void set_after_step(std::function<void(Engine&)> fn) { after_step_ = std::move(fn); }
  // Aborts every job (end of the shutdown grace period); new submissions get 503.
  void cancel_all(const std::string& reason);
  // Stops admitting new jobs (503) while running ones continue.
  void close_admission();
  // Jobs submitted and not yet terminal.
  int64_t n_active() const { return n_active_.load(); }
  // Cancels everything and joins the engine thread. Idempotent.
  void stop();

 private:
  struct Pending {
    GenerationJob job;
    std::shared_ptr<RequestChannel> channel;
  };
  // A job on the engine thread.
  struct LiveJob {
    std::shared_ptr<RequestChannel> channel;
    std::vector<RequestId> ids;  // per choice: engine id, or kFinished
    std::vector<bool> never_scheduled;
    int n_open = 0;
    int watch_socket = -1;
    std::vector<ChoiceEvent> outbox;  // this step's events, delivered together
    std::vector<int32_t> pin_tokens;  // GenerationJob::pin_prompt: the prompt to pin when done
  };
  static constexpr RequestId kFinished = 0;
  // Channel updates of one step, handed over after the metrics snapshot so that a client that
  // reads /metrics right after its answer sees the state after its last step.
  struct Delivery {
    std::shared_ptr<RequestChannel> channel;
    std::vector<ChoiceEvent> events;
    RequestChannel::State state;
  };
  struct Route {
    uint64_t job_id = 0;
    int choice = 0;
  };

  // One embed() call waiting for the engine thread.
  struct EmbedJob {
    std::vector<std::vector<int32_t>> inputs;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::variant<std::vector<std::vector<float>>, http::ApiError> result;
  };
  void run_embeds(Engine& engine, std::vector<std::shared_ptr<EmbedJob>>& jobs);

  void run(const std::function<Result<Engine*>()>& load);
  void loop(Engine& engine);
  void admit(Engine& engine, Pending& p);
  void end_job(Engine& engine, uint64_t job_id, RequestChannel::State state,
               const http::ApiError& error);
  void poll_hangups(Engine& engine);
  void route_events(Engine& engine, std::vector<EngineEvent>& events, std::vector<Delivery>& out);
  void account_scheduled(Engine& engine);
  void publish(const Engine& engine);
  void housekeeping();
  void release_queue_slots(int64_t n);

  ServerMetrics& metrics_;
  const BridgeOptions options_;
  std::thread thread_;
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> n_active_{0};
  std::atomic<int64_t> n_queued_{0};  // generations admitted, never scheduled (max_queue)
  std::atomic<uint64_t> next_job_id_{1};

  // Inbox (guarded by mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;         // the engine thread waits for the inbox
  std::condition_variable loaded_cv_;  // wait_loaded() waits for the loader
  std::vector<Pending> inbox_;
  std::vector<uint64_t> cancels_;
  // call(): run with the engine, or with nullptr when dropped (stop).
  std::vector<std::function<void(const Engine*)>> calls_;
  std::vector<std::function<void(Engine&)>> posts_;
  std::vector<std::shared_ptr<EmbedJob>> embeds_;
  std::string cancel_all_reason_;
  bool cancel_all_ = false;
  bool admission_closed_ = false;
  bool stop_ = false;
  bool loaded_ = false;
  Status load_status_;

  // Engine thread only.
  std::unordered_map<uint64_t, LiveJob> live_;
  std::unordered_map<RequestId, Route> routes_;
  int trim_ticks_ = 0;  // idle ticks left that return freed memory to the OS
  PinHandler pin_handler_;
  std::function<void(Engine&)> after_step_;
};

}  // namespace sluice::server
