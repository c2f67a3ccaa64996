// The simulator's calibration (executor/sim_executor.h SimCalibration): how this machine's real
// engine steps depart from the roofline, fitted once from measured steps and cached as JSON next
// to the roofline cache, so `sluice sim --hw this` predicts what `sluice serve` does here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "executor/sim_executor.h"

namespace sluice::sim {

// <the roofline cache's directory>/sim_calibration.json
std::string default_calibration_path();
Status save_calibration(const SimCalibration& c, const std::string& path);
Result<SimCalibration> load_calibration(const std::string& path);
// load_calibration's reading of the file's text, without I/O (`path` only names it in errors;
// fuzz/calibration_fuzz.cpp). In calibration_parse.cpp, which needs no engine.
Result<SimCalibration> parse_calibration(std::string_view json, const std::string& path);

// One measured engine step: its roofline floors (on the machine, efficiencies 1) and shape.
struct StepSample {
  double bytes_s = 0;  // bytes / bandwidth
  double flops_s = 0;  // FLOPs / peak
  int n_seqs = 0;
  int n_rows = 0;    // logits rows sampled
  int n_tokens = 0;  // new tokens computed
  double measured_s = 0;
};

// Least-squares fit of SimCalibration to `samples`, on relative errors (a 10 ms decode step weighs
// as much as a 5 s prefill chunk), both forms:
//   overlapped: measured = overhead + per_seq * seqs + bytes_s / e_mem    (memory-bound steps)
//               measured = overhead + per_seq * seqs + flops_s / e_comp   (compute-bound steps)
//               a step's bound being its larger floor;
//   additive:   measured = overhead + per_seq * seqs + bytes_s / e_mem + flops_s / e_comp;
// the one with the smaller RMS relative error wins. (Rows equal sequences without speculative
// decoding: per-row costs fold into per_seq.) Efficiencies are clamped to (0, 2] (the cached
// roofline can be below what the engine reaches), overheads to >= 0. Needs samples of both bounds
// and several batch sizes.
Result<SimCalibration> fit_calibration(const std::vector<StepSample>& samples);

// The step time `c` predicts for `s` (what the simulated executor charges).
double calibrated_seconds(const SimCalibration& c, const StepSample& s);
// RMS of (predicted / measured - 1) over `samples`.
double rms_relative_error(const SimCalibration& c, const std::vector<StepSample>& samples);

}  // namespace sluice::sim

namespace sluice {
class Engine;
}

namespace sluice::sim {

// An executor that forwards to another and remembers the last batch's shape (calibration
// measures real engine steps through it).
class RecordingExecutor final : public Executor {
 public:
  explicit RecordingExecutor(Executor& inner) : inner_(inner) {}
  ExecutorCapacity capacity() const override { return inner_.capacity(); }
  Status execute(const Batch& batch, Logits& out) override {
    work_.clear();
    for (const BatchSequence& s : batch.seqs) work_.push_back({s.n_new_tokens, s.context_len});
    n_rows_ = batch.n_logit_rows();
    return inner_.execute(batch, out);
  }
  Status copy_blocks(std::span<const BlockCopy> copies) override {
    return inner_.copy_blocks(copies);
  }
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override {
    return inner_.export_blocks(ids);
  }
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& data) override {
    return inner_.import_blocks(ids, data);
  }
  const std::vector<SeqWork>& last_work() const { return work_; }
  int32_t last_rows() const { return n_rows_; }

 private:
  Executor& inner_;
  std::vector<SeqWork> work_;
  int32_t n_rows_ = 0;
};

// Drives `engine` (built over `rec`) through decode batches of 1 .. max_seqs sequences and
// prefill chunks up to max_batch_tokens, timing every step(), and returns one sample per step
// with its floors under `cost` (efficiencies 1). A few tens of seconds on a 1B model.
Result<std::vector<StepSample>> measure_engine_steps(Engine& engine, const RecordingExecutor& rec,
                                                     const StepCostModel& cost, int max_seqs,
                                                     int max_batch_tokens, int32_t n_vocab_words);

}  // namespace sluice::sim
