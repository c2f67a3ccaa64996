// Tensor- and pipeline-parallel execution over MPI ranks (model/shard.h; docs/distributed.md).
//
//   rank 0:  engine -> ShardedExecutor::execute(batch) --broadcast Batch--> ranks 1..N-1
//            each rank: its own executor over its shard (a CpuExecutor whose collective is
//            the MpiComm); all-reduces inside the forward pass
//            rank 0 gathers the logits and returns them to the engine
//   ranks > 0: run_worker() until rank 0 sends stop
//
// With pipeline stages every rank cuts the batch into the same micro-batches (split_batch):
// stage 0 embeds and runs its layers on micro-batch 0, sends the residual stream on and goes
// on to micro-batch 1 while stage 1 runs micro-batch 0, and so on; the last stage sends each
// micro-batch's logits to rank 0. A step then takes (n_micro + n_stages - 1) micro-batch times
// of one stage instead of n_stages whole-batch times (the bubble: docs/distributed.md).
// Better, in decode: steps in flight (submit/collect; the engine gives each a different group
// of requests), so stage 1 runs step k while stage 0 runs step k + 1 and no stage idles.
//
// The Batch travels in its wire form (batch.h serialize_batch); block copies the same way. A
// rank that dies or stops answering makes the step fail with an error naming the wait (the
// launcher tears the job down; rank 0 then exits non-zero); nothing blocks without a deadline
// except a worker waiting for the next step.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "base/status.h"
#include "executor/executor.h"
#include "model/model.h"
#include "parallel/mpi_comm.h"

namespace sluice::parallel {

// What every rank must agree on before the first step: the model file (size and a hash of
// its header, metadata and tensor directory), the tensor-parallel size and `executor`, the
// rank executor's options as its implementation describes them (describe_options in
// executor/cpu_executor.h). Rank 0 compares every rank's with its own; all ranks get the same
// verdict, an error naming the first rank that differs.
std::string rank_fingerprint(const Model& model, const std::string& executor);
Status check_ranks_agree(MpiComm& comm, const std::string& fingerprint);

// One step on this rank: its stage's layers on `batch` as `n_micro` micro-batches (`parts`
// gets them); with stages, the last stage's tp rank 0 sends each micro-batch's logits to world
// rank 0, buffered (one stage: `out` gets the logits at every rank that computes them). Every
// rank of the job runs each step, in the order rank 0 posted them.
Status run_stage(MpiComm& comm, Executor& exec, const Batch& batch, int n_micro,
                 std::vector<Batch>& parts, Logits& out);
// World rank 0, with stages: a step's logits (its micro-batches `parts`) from the last stage.
void receive_logits(MpiComm& comm, int32_t n_vocab, const std::vector<Batch>& parts,
                    Logits& part_out, Logits& out);

class ShardedExecutor final : public Executor {
 public:
  // Rank 0's executor: `local` runs shard 0 with `comm` as its collective (any Executor: this
  // class calls nothing but the seam on it). With pipeline
  // stages: `depth` steps in flight (0: one per stage; 1: one step at a time), `n_micro`
  // micro-batches per step (0: one per stage when one step is in flight, else 1).
  ShardedExecutor(MpiComm& comm, std::unique_ptr<Executor> local, int n_micro = 0, int depth = 0);
  // Takes the logits of the steps in flight, then tells the workers to stop (they return from
  // run_worker).
  ~ShardedExecutor() override;

  ExecutorCapacity capacity() const override { return local_->capacity(); }
  // One step at a time (nothing may be in flight).
  Status execute(const Batch& batch, Logits& out) override;
  // Pipelined steps: submit() posts the step and runs stage 0's layers on it (rank 0 is stage
  // 0), so it returns once stage 1 can start; collect() receives the oldest step's logits from
  // the last stage. Stage s computes step k while stage s - 1 computes step k + 1.
  int32_t pipeline_depth() const override { return depth_; }
  Status submit(const Batch& batch) override;
  Status collect(Logits& out) override;
  Status copy_blocks(std::span<const BlockCopy> copies) override;
  // Every rank holds a part of each block (its KV heads of its layers): the parts joined block
  // by block in rank order, under a layout tag naming the ranks' layouts (sharded_executor.cpp).
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override;
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) override;
  // Recurrent state slots likewise: each rank's part is its stage's layers and its heads.
  Result<KvBlockData> export_states(std::span<const int32_t> slots) const override;
  Status import_states(std::span<const int32_t> slots, const KvBlockData& data) override;
  int64_t last_step_expert_reads() const override { return local_->last_step_expert_reads(); }
  // Collectives and stage messages of the last execute() (or of a collected step: rank 0's
  // between its submit() and collect(), which with steps in flight includes theirs): how many,
  // bytes this rank sent, seconds in them.
  CommStats last_step_comm() const override { return last_comm_; }
  int n_micro() const { return n_micro_; }

 private:
  Status fail() const;
  // export_blocks (export_states when `states`), and each rank's bytes per block (when
  // `rank_bytes` is given); import_blocks / import_states.
  Result<KvBlockData> export_parts(std::span<const int32_t> ids, std::vector<size_t>* rank_bytes,
                                   bool states) const;
  Status import_parts(std::span<const int32_t> ids, const KvBlockData& data, bool states);

  // Takes the logits of every step in flight (before messages that every rank answers).
  Status drain() const;

  // A submitted step: its micro-batches, and its logits once received.
  struct InFlight {
    std::vector<Batch> parts;
    Logits logits;
    bool received = false;
    MpiComm::Stats before;
  };

  MpiComm& comm_;
  std::unique_ptr<Executor> local_;
  std::vector<uint8_t> msg_;
  Batch copies_;  // copy_blocks's message: a batch of block copies only
  int n_micro_ = 1;
  int32_t depth_ = 1;
  mutable std::deque<InFlight> in_flight_;
  std::vector<InFlight> spare_;  // collected steps, their buffers reused
  mutable Logits part_out_;
  MpiComm::Stats last_comm_;
  mutable bool failing_ = false;
};

// A worker rank's loop: each step rank 0 broadcasts, run on `exec` (its shard) until rank 0
// says stop (ok) or the job fails (the error).
Status run_worker(MpiComm& comm, Executor& exec);

}  // namespace sluice::parallel
