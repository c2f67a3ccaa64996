// MPI for sluice's ranks (Open MPI from Debian; docs/distributed.md). One MpiComm per process,
// over MPI_COMM_WORLD: rank 0 runs the engine, the other ranks run executor shards
// (parallel/sharded_executor.h). With pipeline stages the world is a grid (set_layout):
//
//   world rank = stage * tp + tp_rank        e.g. --tp 2 --pp 2:  stage 0: ranks 0 1
//                                                                 stage 1: ranks 2 3
//
// The Collective operations (all-reduce, logits gather) run within a stage's tensor-parallel
// group; StageLink sends the residual stream from rank r to rank r + tp (the next stage), and
// the last stage's tp_rank 0 sends the logits to world rank 0.
//
// Every wait is a poll with a deadline instead of a blocking MPI call: a peer that died or stopped
// answering turns into an error after `timeout_s` (the communicator is then marked failed and
// every later operation returns at once) rather than a hang. Waits yield the core after a short
// spin, so oversubscribed ranks (more ranks than cores) do not starve the one computing.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "executor/collective.h"
#include "executor/executor.h"

namespace sluice::parallel {

// Whether this process was started by mpirun / mpiexec (Open MPI's or a PMIx launcher's
// environment), i.e. whether it should join the job's ranks rather than launch its own.
bool launched_by_mpi();

class MpiComm final : public Collective, public StageLink {
 public:
  // Initializes MPI (thread level SERIALIZED: the engine thread makes every call). Once per
  // process; a second call returns the same communicator.
  static Result<MpiComm*> init();
  // Finalizes MPI (at exit of a clean run; not after a failure).
  static void finalize();
  // The communicator init() made, or null when this process has not joined MPI ranks.
  static MpiComm* current();

  // Splits the world into n_stages pipeline stages of tp ranks each (every rank calls it,
  // with the same sizes; tp * n_stages must be the world's size). Default: one stage.
  Status set_layout(int tp, int n_stages);

  // The link between world ranks 0 and 1, measured by set_layout with a ping-pong (8-byte
  // messages: latency, one way; 4 MiB: bandwidth); 0 in one process.
  double link_latency_s() const { return link_latency_s_; }
  double link_bytes_per_s() const { return link_bytes_per_s_; }

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  int stage() const { return stage_; }
  int n_stages() const { return n_stages_; }
  bool last_stage() const { return stage_ == n_stages_ - 1; }

  // Collective (executor/collective.h), within this rank's stage: the tensor-parallel rank and
  // size; an all-gather of the partial sums, each rank adding them in rank order; a gather to
  // the stage's tp rank 0.
  int rank() const override { return tp_rank_; }
  int size() const override { return tp_size_; }
  void all_reduce_sum(float* x, int64_t n) override;
  void gather(const float* send, int64_t n, std::span<const int64_t> counts, float* recv) override;

  // StageLink (executor/collective.h): the residual stream from the stage before / to the
  // stage after (sends are buffered: finish_sends() waits for them).
  void recv_from_prev(float* x, int64_t n) override;
  void send_to_next(const float* x, int64_t n) override;
  // The last stage's logits of a micro-batch, to world rank 0 (buffered), and rank 0's receipt.
  void send_logits(const float* x, int64_t n);
  void recv_logits(float* x, int64_t n);
  // Waits until every buffered send has left (false: failed()).
  bool finish_sends();

  // Rank 0's bytes to every rank, which all wait for it (start-up agreement): `bytes` is resized
  // on the others.
  Status broadcast(std::vector<uint8_t>& bytes);
  // Rank 0's messages to the workers (a step, a block copy, stop...), in order: post() sends
  // `bytes` to every other rank without waiting for them (a rank still busy with an earlier
  // step takes it later: pipelined steps); receive_post() is a worker's next one (`idle`: the
  // wait may be long, between steps: it sleeps between polls and has no deadline). finish_posts()
  // waits until every posted message has left (false: failed()).
  Status post(std::span<const uint8_t> bytes);
  Status receive_post(std::vector<uint8_t>& bytes, bool idle);
  bool finish_posts();

  // Every rank's bytes to rank 0 (`all` gets them in rank order there).
  Status gather_bytes(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>& all);

  // Messages of the forward pass (all-reduces, the logits gather, stage-to-stage sends and
  // receives) since the process started: how many, the bytes this rank sent, and the seconds
  // spent waiting in them (for the slowest rank included).
  using Stats = CommStats;
  const Stats& stats() const { return stats_; }

  // A wait of rank 0 that exceeded the deadline or an MPI error: set once, never cleared.
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Seconds a step's wait may take (SLUICE_DIST_TIMEOUT_S; default 10).
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  // From any thread (a signal's handler): the wait in progress and every later one fail, so
  // a step stuck on a dead rank returns its error while the launcher tears the job down.
  void interrupt() { interrupted_.store(true); }

 private:
  MpiComm() = default;
  // Polls `req` to completion; false (and failed()) past the deadline or on an MPI error.
  bool wait(void* req, const char* what, bool idle);

  // The first rank on this host whose process is gone (-1: none): peers started on this
  // host are watched by pid, so a dead one is an error within a fraction of a second instead
  // of at the deadline (ranks on other hosts: the deadline, or mpirun's teardown).
  int dead_local_peer() const;

  // A buffer for point-to-point sends, reused once its send completed: the steady state
  // allocates nothing (a step's sends: one per micro-batch and stage boundary, plus logits).
  struct Send {
    std::vector<float> data;
    void* req = nullptr;  // MPI_Request* (allocated with the slot, reused)
    bool busy = false;    // its send is in flight
  };
  void send_floats(const float* x, int64_t n, int to, int tag, const char* what);
  void recv_floats(float* x, int64_t n, int from, int tag, const char* what);
  // Marks the slots whose send completed free.
  void reap_sends();
  // A posted message: its length and bytes, and a send of each to every worker.
  struct Post {
    uint64_t n = 0;
    std::vector<uint8_t> bytes;
    std::vector<void*> reqs;  // MPI_Request*, 2 per worker (length, bytes); null once done
  };
  // Frees the posts whose sends all completed.
  void reap_posts();
  std::list<Post> posts_;  // a list: the sends point into its elements

  int rank_ = 0, size_ = 1;        // world
  int tp_rank_ = 0, tp_size_ = 1;  // within the stage
  int stage_ = 0, n_stages_ = 1;
  double link_latency_s_ = 0, link_bytes_per_s_ = 0;
  void measure_link();
  void* tp_comm_ = nullptr;  // MPI_Comm* of the stage's group (null: the world)
  std::vector<Send> sends_;
  std::vector<long> local_pids_;  // [size]: the rank's pid when on this host, else 0
  double timeout_s_ = 10;
  std::atomic<bool> interrupted_{false};
  std::string error_;
  Stats stats_;
  std::vector<float> gathered_;
  std::vector<int> counts_, displs_;
};

}  // namespace sluice::parallel
