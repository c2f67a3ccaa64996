#include "executor/sim_executor.h"

#include <algorithm>
#include <utility>

namespace sluice {

SimulatedExecutor::SimulatedExecutor(SimExecutorConfig config, VirtualClock& clock)
    : config_(std::move(config)),
      clock_(clock),
      stage_hw_(aggregate(config_.cost.hw, std::max(config_.cost.comm.tp, 1))),
      comm_model_(config_.cost) {}

SimStepCost SimulatedExecutor::step_cost(const Batch& batch) {
  const SimCalibration& cal = config_.calibration;
  const CommSpec& comm = config_.cost.comm;
  const int pp = std::max(comm.pp, 1);
  // One micro-batch through the whole model on one stage's chips: the roofline of its bytes
  // and FLOPs, each floor divided by its calibrated efficiency.
  auto through_model = [&](const Batch& b, bool* compute_bound) {
    work_.clear();
    for (const BatchSequence& s : b.seqs) work_.push_back({s.n_new_tokens, s.context_len});
    const StepShape shape = make_step_shape(config_.cost.model, config_.cost.precision, work_);
    const StepFloors f = step_floors(shape, stage_hw_);
    const double mem = f.bytes_s / cal.mem_efficiency;
    const double flops = f.flops_s / cal.compute_efficiency;
    if (compute_bound) *compute_bound = flops > mem;
    return cal.additive ? mem + flops : std::max(mem, flops);
  };
  SimStepCost c;
  const int n_micro = pp > 1 ? std::max(1, std::min<int>(comm.n_micro, batch.n_seqs())) : 1;
  if (n_micro == 1) {
    // pp stages one after another, each 1/pp of the layers: the whole model's time.
    c.compute_s = through_model(batch, &c.compute_bound);
  } else {
    // Micro-batch i spends t_i / pp on each stage; the first fills the pipeline and the others
    // follow one stage behind: (sum t_i + (pp - 1) max t_i) / pp.
    split_batch(batch, n_micro, micro_);
    double sum = 0, longest = 0;
    for (const Batch& m : micro_) {
      bool cb = false;
      const double t = through_model(m, &cb);
      c.compute_bound = c.compute_bound || cb;
      sum += t;
      longest = std::max(longest, t);
    }
    c.compute_s = (sum + (pp - 1) * longest) / pp;
  }
  c.comm_s = comm_model_.predict_comm(batch);
  c.overhead_s =
      cal.step_overhead_s + cal.per_seq_s * batch.n_seqs() + cal.per_row_s * batch.n_logit_rows();
  return c;
}

Status SimulatedExecutor::accept(const Batch& batch) {
  SLUICE_RETURN_IF_ERROR(validate_batch(batch, config_.capacity));
  SLUICE_RETURN_IF_ERROR(validate_block_copies(batch.block_copies, config_.capacity.n_blocks));
  if (observer_) observer_(batch);
  return {};
}

void SimulatedExecutor::fill_logits(const Batch& batch, Logits& out) const {
  set_logit_rows(batch, out);
  const int32_t v = config_.capacity.n_vocab;
  out.n_vocab = v;
  out.values.assign(size_t(out.n_rows()) * size_t(v), 0.0f);
  for (int32_t r = 0; r < out.n_rows(); ++r) {
    out.values[size_t(r) * size_t(v) + size_t(kOutputToken)] = 1.0f;
  }
}

Status SimulatedExecutor::submit(const Batch& batch) {
  const int32_t depth = pipeline_depth();
  if (depth <= 1) return Executor::submit(batch);
  if (int32_t(in_flight_.size()) >= depth) {
    return make_error("simulated executor: ", in_flight_.size(), " steps in flight already");
  }
  SLUICE_RETURN_IF_ERROR(accept(batch));
  InFlight f;
  f.cost = step_cost(batch);
  const int pp = config_.cost.comm.pp;
  stage_free_.resize(size_t(pp), 0.0);
  // Rank 0 prepares the step, then each stage runs its 1/pp of the compute in turn; the
  // messages between ranks come last.
  double t = clock_.now() + f.cost.overhead_s;
  for (int s = 0; s < pp; ++s) {
    t = std::max(t, stage_free_[size_t(s)]) + f.cost.compute_s / pp;
    stage_free_[size_t(s)] = t;
  }
  f.end = t + f.cost.comm_s;
  fill_logits(batch, f.logits);
  in_flight_.push_back(std::move(f));
  return {};
}

Status SimulatedExecutor::collect(Logits& out) {
  if (pipeline_depth() <= 1) return Executor::collect(out);
  if (in_flight_.empty()) return make_error("simulated executor: nothing in flight");
  InFlight& f = in_flight_.front();
  const double now = clock_.now();
  if (f.end > now) clock_.advance(f.end - now);
  // Busy: the wall time this step added beyond the one collected before it.
  busy_s_ += std::max(0.0, f.end - std::max(last_end_, f.end - f.cost.seconds()));
  last_end_ = std::max(last_end_, f.end);
  ++steps_;
  last_comm_ = {};
  if (f.cost.comm_s > 0) {
    last_comm_.n_ops = 1;
    last_comm_.seconds = f.cost.comm_s;
  }
  std::swap(out, f.logits);
  in_flight_.pop_front();
  return {};
}

Status SimulatedExecutor::execute(const Batch& batch, Logits& out) {
  SLUICE_RETURN_IF_ERROR(accept(batch));
  const SimStepCost c = step_cost(batch);
  clock_.advance(c.seconds());
  busy_s_ += c.seconds();
  ++steps_;
  last_comm_ = {};
  if (c.comm_s > 0) {
    last_comm_.n_ops = 1;
    last_comm_.seconds = c.comm_s;
  }
  fill_logits(batch, out);
  return {};
}

Status SimulatedExecutor::copy_blocks(std::span<const BlockCopy> copies) {
  return validate_block_copies(copies, config_.capacity.n_blocks);
}

namespace {
std::string sim_layout(int32_t block_size) {
  return "sim B" + std::to_string(block_size);
}
}  // namespace

Result<KvBlockData> SimulatedExecutor::export_blocks(std::span<const int32_t> ids) const {
  KvBlockData d;
  d.layout = sim_layout(config_.capacity.block_size);
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.capacity.n_blocks)
      return make_error("simulated executor: block ", id, " out of range");
  }
  d.n_blocks = int32_t(ids.size());
  return d;  // no contents: bytes_per_block 0
}

Status SimulatedExecutor::import_blocks(std::span<const int32_t> ids, const KvBlockData& data) {
  if (data.layout != sim_layout(config_.capacity.block_size)) {
    return make_error("simulated executor: cannot import blocks of layout '", data.layout, "'");
  }
  if (int32_t(ids.size()) != data.n_blocks) {
    return make_error("simulated executor: ", ids.size(), " ids for ", data.n_blocks, " blocks");
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.capacity.n_blocks)
      return make_error("simulated executor: block ", id, " out of range");
  }
  return {};
}

}  // namespace sluice
