// The executor seam: everything the engine needs from the hardware that runs the model.
//
//   engine (schedule -> Batch) --execute--> Executor --Logits--> engine (sample)
//
// Implementations: CpuExecutor (kernels/ on this CPU), ShardedExecutor (parallel/: tensor and
// pipeline-parallel ranks over MPI), SimulatedExecutor (sim_executor.h: a virtual clock advanced
// by the roofline cost of each batch), RecordingExecutor (sim/calibration.h: times a real one)
// and a test double (tests/support/fake_executor.h). The engine and the front ends hold an
// `Executor&` and never ask which one it is.
//
// Contract shared by every implementation:
// * execute(): the batch is checked first with validate_batch() (batch.h) against capacity();
//   on error nothing has been written (no K/V, no block copies) and the message says what is
//   wrong. Otherwise its block copies are applied in order, then every sequence's new tokens
//   are computed and their K/V stored in their slots, and `out` receives one logits row per
//   requested position in batch token order (Logits).
// * Blocks are addressed by id in [0, capacity().n_blocks); what a block holds is the
//   executor's business (layout, dtype, device), except through export/import below.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "executor/batch.h"

namespace sluice {

// KV blocks copied out of an executor: the same layout tag on both sides of a transfer is what
// makes an import meaningful (disaggregated prefill/decode, a disk tier, a CPU<->GPU swap).
struct KvBlockData {
  // "<dtype> L<layers> H<kv heads> D<head dim> B<block size> <layout>", e.g.
  // "f16 L16 H8 D64 B16 k-dim-major/v-row-major": import refuses any other.
  std::string layout;
  int32_t n_blocks = 0;
  size_t bytes_per_block = 0;
  std::vector<uint8_t> bytes;  // [n_blocks, bytes_per_block], blocks in the order exported
};

// Messages between ranks during one execute() (tensor/pipeline parallel executors): how many,
// the bytes this rank sent, and the seconds spent in them (waiting for slower ranks included).
struct CommStats {
  int64_t n_ops = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;

  // What batches this executor accepts; constant over its life.
  virtual ExecutorCapacity capacity() const = 0;

  // See the contract above. `out` is reused: steady-state steps do not allocate.
  virtual Status execute(const Batch& batch, Logits& out) = 0;

  // Copy-on-write of shared blocks, in order: each dst takes its src's K/V. Fails, copying
  // nothing, on an id out of range or src == dst (validate_block_copies).
  virtual Status copy_blocks(std::span<const BlockCopy> copies) = 0;

  // The contents of blocks `ids` (each in range; repeats allowed), in order.
  virtual Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const = 0;
  // Whether export_blocks() of blocks no step writes (pinned or cached full blocks) may run on
  // another thread while execute() runs: true when it only reads those blocks' memory. False
  // (the default) makes callers export between steps (a sharded executor's export is a
  // collective over its ranks).
  virtual bool concurrent_export() const { return false; }
  // Block ids[i] takes data block i. Fails, writing nothing, when the layout differs, the
  // counts differ or an id is out of range.
  virtual Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) = 0;
  // Recurrent state slots (capacity().n_state_slots > 0) move like K/V blocks (a prefix's
  // saved state to another engine or to disk): one slot per "block" of KvBlockData, whose
  // layout names the state's shape. The same contract as export_blocks / import_blocks
  // (concurrent_export included: an export reads only those slots' memory); an executor that
  // keeps no state refuses both.
  virtual Result<KvBlockData> export_states(std::span<const int32_t> slots) const {
    (void)slots;
    return make_error("this executor keeps no recurrent state to export");
  }
  virtual Status import_states(std::span<const int32_t> slots, const KvBlockData& data) {
    (void)slots;
    (void)data;
    return make_error("this executor keeps no recurrent state to import");
  }
  // Mixture of experts: the (layer, expert) FFNs the last execute() ran, each reading its
  // expert's weights once; -1 when the executor does not count them (dense models: 0).
  virtual int64_t last_step_expert_reads() const { return -1; }
  // Communication of the last execute() (one process: none).
  virtual CommStats last_step_comm() const { return {}; }

  // Batches in flight at once (pipeline-parallel executors: one per stage, so stage 1 computes
  // one step while stage 0 computes the next; docs/distributed.md). 1: execute() only.
  virtual int32_t pipeline_depth() const { return 1; }
  // With pipeline_depth() > 1: submit() starts a batch (validated first, as execute() does) and
  // returns before its logits; collect() waits for the oldest submitted batch's logits. At most
  // pipeline_depth() batches are submitted and not collected. The batches run in submission
  // order: a block that a later batch writes (a block freed by an earlier batch's request and
  // reallocated) is written after the earlier batch has run. A batch's requests must not be in
  // another batch in flight (their next tokens depend on its logits). Every other call may come
  // between them; last_step_comm() then describes the last collected batch. Executors of depth
  // 1 refuse both.
  virtual Status submit(const Batch&) {
    return make_error("this executor runs one batch at a time (execute)");
  }
  virtual Status collect(Logits&) {
    return make_error("this executor runs one batch at a time (execute)");
  }
};

}  // namespace sluice
