// Tensor- and pipeline-parallel execution over MPI ranks (model/shard.h; docs/distributed.md).
//
//   rank 0:  engine -> ShardedExecutor::execute(batch) --broadcast Batch--> ranks 1..N-1
//            each rank: its CpuExecutor over its shard; all-reduces inside the forward pass
//            rank 0 gathers the logits and returns them to the engine
//   ranks > 0: run_worker() until rank 0 sends stop
//
// With pipeline stages every rank cuts the batch into the same micro-batches (split_batch):
// stage 0 embeds and runs its layers on micro-batch 0, sends the residual stream on and goes
// on to micro-batch 1 while stage 1 runs micro-batch 0, and so on; the last stage sends each
// micro-batch's logits to rank 0. A step then takes (n_micro + n_stages - 1) micro-batch times
// of one stage instead of n_stages whole-batch times (the bubble: docs/distributed.md).
//
// The Batch travels in its wire form (batch.h serialize_batch); block copies the same way. A
// rank that dies or stops answering makes the step fail with an error naming the wait (the
// launcher tears the job down; rank 0 then exits non-zero); nothing blocks without a deadline
// except a worker waiting for the next step.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "dist/mpi_comm.h"
#include "executor/cpu_executor.h"
#include "executor/executor.h"

namespace sluice::dist {

// What every rank must agree on before the first step: the model file (size and a hash of
// its header, metadata and tensor directory), the tensor-parallel size and the executor's
// options. Rank 0 compares every rank's with its own; all ranks get the same verdict, an error
// naming the first rank that differs.
std::string rank_fingerprint(const Model& model, const CpuExecutorOptions& options);
Status check_ranks_agree(MpiComm& comm, const std::string& fingerprint);

// One step on this rank: `batch` as `n_micro` micro-batches through the stages (one stage:
// the whole batch at once); world rank 0 gets the logits in `out`. Every rank calls it with
// the same batch and n_micro.
struct StepBuffers {
  std::vector<Batch> parts;  // the micro-batches
  Logits part_out;           // one micro-batch's logits
};
Status run_step(MpiComm& comm, CpuExecutor& exec, const Batch& batch, int n_micro, Logits& out,
                StepBuffers& buf);

class ShardedExecutor final : public Executor {
 public:
  // Rank 0's executor: `local` runs shard 0 with `comm` as its collective. `n_micro`: the
  // micro-batches of a step with pipeline stages (0: one per stage).
  ShardedExecutor(MpiComm& comm, std::unique_ptr<CpuExecutor> local, int n_micro = 0);
  // Tells the workers to stop (they return from run_worker).
  ~ShardedExecutor() override;

  ExecutorCapacity capacity() const override { return local_->capacity(); }
  Status execute(const Batch& batch, Logits& out) override;
  Status copy_blocks(std::span<const BlockCopy> copies) override;
  // Every rank holds a part of each block (its KV heads of its layers): the parts joined block
  // by block in rank order, under a layout tag naming the ranks' layouts (sharded_executor.cpp).
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override;
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) override;
  int64_t last_step_expert_reads() const override { return local_->last_step_expert_reads(); }
  // Collectives and stage messages of the last execute(): how many, bytes this rank sent,
  // seconds in them.
  CommStats last_step_comm() const override { return last_comm_; }
  int n_micro() const { return n_micro_; }

  const CpuExecutor& local() const { return *local_; }

 private:
  Status fail();
  // export_blocks, and each rank's bytes per block (when `rank_bytes` is given).
  Result<KvBlockData> export_parts(std::span<const int32_t> ids,
                                   std::vector<size_t>* rank_bytes) const;

  MpiComm& comm_;
  std::unique_ptr<CpuExecutor> local_;
  std::vector<uint8_t> msg_;
  Batch copies_;  // copy_blocks's message: a batch of block copies only
  int n_micro_ = 1;
  StepBuffers step_buf_;
  MpiComm::Stats last_comm_;
  bool failing_ = false;
};

// A worker rank's loop: each step rank 0 broadcasts, run on `exec` (its shard) until rank 0
// says stop (ok) or the job fails (the error).
Status run_worker(MpiComm& comm, CpuExecutor& exec);

}  // namespace sluice::dist
