// The simulated executor (`sluice sim`): no kernels and no K/V, only time. Each execute()
// advances a VirtualClock by the roofline cost of exactly that batch (perf/roofline.h: weight and
// KV bytes over bandwidth, FLOPs over peak, on the tensor-parallel chips of one stage), the
// pipeline fill of its micro-batches, the communication between ranks (StepRoofline's CommSpec
// term) and a calibrated per-step overhead, so the production engine, scheduler, KV manager and
// prefix cache run on virtual hardware at simulation speed.
//
// Logits: every requested row puts all its mass on one ordinary token, so a request generates
// exactly what its max_tokens (with ignore_eos) asks: output lengths come from the workload.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "base/clock.h"
#include "executor/executor.h"
#include "executor/step_roofline.h"

namespace sluice {

// How the real machine departs from its roofline (fitted by `sluice sim --calibrate`, or 1/0 for
// an ideal machine):
//   step = overhead + per_seq * seqs + per_row * logits rows
//          + max(bytes_s / mem_efficiency, flops_s / compute_efficiency)    (overlapped)
//          +     bytes_s / mem_efficiency + flops_s / compute_efficiency    (additive)
// The roofline assumes loads and math overlap perfectly (max); a CPU running matmuls a few
// tokens wide does neither at its peak and is often better described by the sum.
struct SimCalibration {
  double mem_efficiency = 1.0;  // achieved share of the bandwidth floor (MBU) on memory-bound steps
  double compute_efficiency =
      1.0;                       // achieved share of the FLOPs floor (MFU) on compute-bound steps
  double step_overhead_s = 0;    // fixed cost of a step (scheduling, batch, launch)
  double per_seq_s = 0;          // per sequence of the batch
  double per_row_s = 0;          // per logits row (sampling, detokenizing, streaming)
  bool additive = false;         // sum the two floors instead of taking the larger
  std::string source = "ideal";  // where the numbers come from (reports)
};

struct SimExecutorConfig {
  ExecutorCapacity capacity;
  // The model, precision and ONE chip's roofline (cost.hw); cost.comm: tp/pp/micro-batches and
  // the link between ranks.
  StepCostModel cost;
  SimCalibration calibration;
  // With pipeline stages (cost.comm.pp > 1): steps in flight (Executor::pipeline_depth; the
  // engine keeps this many, each over its own requests, as over real ranks); 1: one at a time.
  int32_t pipeline_depth = 1;
};

// The breakdown of one simulated step.
struct SimStepCost {
  double compute_s = 0;  // the roofline part (pipeline fill included), after the efficiencies
  double comm_s = 0;     // between ranks
  double overhead_s = 0;
  bool compute_bound = false;
  double seconds() const { return compute_s + comm_s + overhead_s; }
};

class SimulatedExecutor final : public Executor {
 public:
  // `clock` (not owned) is advanced by every execute(); it outlives the executor.
  SimulatedExecutor(SimExecutorConfig config, VirtualClock& clock);

  ExecutorCapacity capacity() const override { return config_.capacity; }
  Status execute(const Batch& batch, Logits& out) override;
  // Steps in flight: each stage runs 1/pp of a step's compute when the stage before handed it
  // on and the stage is free, so stage s works on step k while stage s - 1 works on step k + 1;
  // collect() moves the clock to the oldest step's end (docs/sim.md).
  int32_t pipeline_depth() const override {
    return config_.cost.comm.pp > 1 ? std::max(config_.pipeline_depth, int32_t(1)) : 1;
  }
  Status submit(const Batch& batch) override;
  Status collect(Logits& out) override;
  Status copy_blocks(std::span<const BlockCopy> copies) override;
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override;
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) override;
  CommStats last_step_comm() const override { return last_comm_; }

  // The modelled time of `batch` (what execute() advances the clock by).
  SimStepCost step_cost(const Batch& batch);
  const SimExecutorConfig& config() const { return config_; }
  // Called with every batch execute() accepts, before the clock moves (traces, tests).
  void set_observer(std::function<void(const Batch&)> f) { observer_ = std::move(f); }
  // The token every logits row points at.
  static constexpr int32_t kOutputToken = 3;
  uint64_t steps() const { return steps_; }
  double busy_seconds() const { return busy_s_; }

 private:
  SimExecutorConfig config_;
  VirtualClock& clock_;
  HardwareSpec stage_hw_;  // the tp chips of one pipeline stage
  StepRoofline comm_model_;
  std::vector<Batch> micro_;
  std::vector<SeqWork> work_;
  CommStats last_comm_;
  // Pipelined steps: when each stage is next free, and the steps in flight.
  struct InFlight {
    double end = 0;  // virtual time its logits reach rank 0
    SimStepCost cost;
    Logits logits;
  };
  std::vector<double> stage_free_;
  std::deque<InFlight> in_flight_;
  double last_end_ = 0;  // the last collected step's end (busy time counts overlap once)
  // The batch's checks; its logits (every row on kOutputToken).
  Status accept(const Batch& batch);
  void fill_logits(const Batch& batch, Logits& out) const;
  std::function<void(const Batch&)> observer_;
  uint64_t steps_ = 0;
  double busy_s_ = 0;
};

}  // namespace sluice
