// Every engine step against the roofline: the measured wall time of the step next to the time
// the seeds' roofline model (perf/roofline.h) predicts for that exact ragged batch on this
// machine (`sluice bench --roofline`). predicted / measured is the step's efficiency: MBU for a
// memory-bound (decode-heavy) step, MFU for a compute-bound (prefill-heavy) one.
#pragma once

#include <cstdint>
#include <vector>

#include "executor/batch.h"
#include "executor/executor.h"
#include "kernels/attention.h"
#include "model/model.h"
#include "perf/hardware.h"
#include "perf/machine.h"
#include "perf/roofline.h"

namespace sluice {

// Tensor / pipeline parallel (parallel/, docs/distributed.md): what a step sends between ranks,
// over the link as measured at start-up. One step: 2 all-reduces of the residual stream
// [tokens, n_embd] f32 per layer plus one for the vocabulary-parallel embedding (each an
// all-gather: every rank sends its partial sums to the other tp - 1), the logits rows'
// gather (the vocabulary columns of tp - 1 ranks), and with pp stages the residual stream of
// every micro-batch across each stage boundary and the logits from the last stage to rank 0.
struct CommSpec {
  int tp = 1, pp = 1, n_micro = 1;
  double link_bytes_per_s = 0;  // 0: no communication term
  double link_latency_s = 0;    // per message
  int n_layer = 0;
  int64_t n_embd = 0, n_vocab = 0;
  bool any() const { return (tp > 1 || pp > 1) && link_bytes_per_s > 0; }
};

// The model and machine the predictions are made for.
struct StepCostModel {
  ModelCost model;
  Precision precision;
  HardwareSpec hw;
  CommSpec comm;
  // Mixture of experts: the stored bytes of one expert's FFN in one layer, so a step whose
  // executor counted its (layer, expert) reads is charged exactly those (0: dense).
  double expert_layer_bytes = 0;
  // Where hw.hbm_bytes_per_s comes from (MachineRoofline::read_origin). A step that streams
  // faster (bytes it read / its time) raises it, so MBU <= 100% by construction; a step reading at
  // least persist_min_bytes (past the caches: DRAM, not L3) also raises the cache file at
  // roofline_path ("": kept in memory only).
  std::string read_origin;
  std::string roofline_path;
  double persist_min_bytes = 0;
};

// The hyperparameter part of a model's cost, from its config (model/config.cpp reads the file's
// keys once): K/V elements a token adds to the cache (layers sharing another's K/V add none),
// attention FLOPs per (query, key) pair (every attention layer, each with its own head shape),
// the windowed layers' share of both and their window (ModelConfig::layer_window, the rule the
// cache's K/V groups follow), the recurrent layers' state and FLOPs, widths and experts. Parameter
// and byte counts are the caller's: what a step reads (make_step_cost_model) or what a file stores
// (sluice plan/info).
ModelCost model_cost(const ModelConfig& config);

// The model as loaded (its matmul weight bytes as stored, KV elements per token, attention FLOPs)
// on this machine: bandwidth = the measured multi-threaded read bandwidth; peak = the int8 dot
// peak for weights whose matmuls take 8-bit activations on this CPU, the f32 FMA peak for
// F16/F32 weights, the bf16 dot peak for BF16.
StepCostModel make_step_cost_model(const Model& model, const MachineRoofline& machine,
                                   KvType kv_type);

// Counters of steps by the bound the roofline predicts.
struct RooflineStats {
  uint64_t memory_bound_steps = 0;
  uint64_t compute_bound_steps = 0;
  double memory_bound_seconds = 0;    // measured
  double memory_bound_predicted = 0;  // roofline
  double compute_bound_seconds = 0;
  double compute_bound_predicted = 0;
  double last_seconds = 0;
  double last_predicted = 0;
  // Tensor / pipeline parallel: measured and predicted (CommSpec) communication seconds and the
  // bytes rank 0 sent, summed over steps.
  double comm_seconds = 0;
  double comm_predicted = 0;
  double comm_bytes = 0;
  double last_comm_seconds = 0;
  double last_comm_predicted = 0;
  // The bytes the memory-bound steps read, and the bandwidth MBU divides them by: the cached
  // reading, raised by any step that streamed faster (read_origin says which).
  double memory_bound_bytes = 0;
  double read_bytes_per_s = 0;
  std::string read_origin;
  uint64_t read_raises = 0;  // steps that raised it
  // Aggregate efficiencies (0 before any such step). MBU: the memory-bound steps' bytes at the
  // current bandwidth / their measured time (<= 1: the bandwidth is at least every step's);
  // MFU: predicted / measured time.
  double mbu() const {
    if (memory_bound_seconds <= 0) return 0;
    if (read_bytes_per_s > 0 && memory_bound_bytes > 0) {
      return memory_bound_bytes / read_bytes_per_s / memory_bound_seconds;
    }
    return memory_bound_predicted / memory_bound_seconds;
  }
  double mfu() const {
    return compute_bound_seconds > 0 ? compute_bound_predicted / compute_bound_seconds : 0;
  }
};

class StepRoofline {
 public:
  explicit StepRoofline(StepCostModel cost) : cost_(std::move(cost)) {
    stats_.read_bytes_per_s = cost_.hw.hbm_bytes_per_s;
    stats_.read_origin = cost_.read_origin;
    first_origin_ = cost_.read_origin.empty() ? "the cached reading" : cost_.read_origin;
  }
  // The roofline time of `batch` (does not record). expert_reads >= 0 (a MoE executor's
  // last_step_expert_reads): the weights read are the shared ones plus exactly those experts;
  // else the expected experts a step of that many tokens touches (roofline.h).
  double predict(const Batch& batch, bool* compute_bound = nullptr, int64_t expert_reads = -1);
  // The communication term of `batch` (CommSpec; 0 in one process): messages x latency +
  // bytes / link bandwidth, the messages taken one after another.
  double predict_comm(const Batch& batch) const;
  // Records one step of `batch` that took `seconds` (of which `comm` between ranks). A step that
  // streamed faster than the bandwidth first raises it (StepCostModel::read_origin).
  void record(const Batch& batch, double seconds, int64_t expert_reads = -1,
              const CommStats& comm = {});
  const RooflineStats& stats() const { return stats_; }
  const StepCostModel& cost() const { return cost_; }

 private:
  StepShape shape(const Batch& batch, int64_t expert_reads);

  StepCostModel cost_;
  RooflineStats stats_;
  std::vector<SeqWork> work_;         // reused: no allocation per step once grown
  double persisted_bytes_per_s_ = 0;  // the last raise written to roofline_path
  std::string first_origin_;          // cost_.read_origin before any raise
};

}  // namespace sluice
