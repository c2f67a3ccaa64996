#include "sim/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "engine/engine.h"
#include "perf/machine.h"

namespace sluice::sim {

std::string default_calibration_path() {
  return (std::filesystem::path(default_roofline_path()).parent_path() / "sim_calibration.json")
      .string();
}

Status save_calibration(const SimCalibration& c, const std::string& path) {
  nlohmann::ordered_json j;
  j["mem_efficiency"] = c.mem_efficiency;
  j["compute_efficiency"] = c.compute_efficiency;
  j["step_overhead_ms"] = c.step_overhead_s * 1e3;
  j["per_seq_us"] = c.per_seq_s * 1e6;
  j["per_row_us"] = c.per_row_s * 1e6;
  j["combine"] = c.additive ? "sum" : "max";
  j["source"] = c.source;
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream f(path, std::ios::binary);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) return make_error("cannot write the calibration to '", path, "'");
  return {};
}

Result<SimCalibration> load_calibration(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error("cannot read calibration '", path, "'");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_calibration(text.str(), path);
}

namespace {

// Solves the least-squares problem min |A x - b| over the columns in `use` (normal equations,
// Gaussian elimination with partial pivoting); unused columns get 0. False when singular.
bool least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                   const std::vector<bool>& use, std::vector<double>& x) {
  const size_t n = use.size();
  std::vector<size_t> cols;
  for (size_t j = 0; j < n; ++j)
    if (use[j]) cols.push_back(j);
  const size_t m = cols.size();
  std::vector<std::vector<double>> ata(m, std::vector<double>(m + 1, 0));
  for (size_t r = 0; r < a.size(); ++r) {
    for (size_t i = 0; i < m; ++i) {
      for (size_t k = 0; k < m; ++k) ata[i][k] += a[r][cols[i]] * a[r][cols[k]];
      ata[i][m] += a[r][cols[i]] * b[r];
    }
  }
  for (size_t i = 0; i < m; ++i) {
    size_t p = i;
    for (size_t k = i + 1; k < m; ++k)
      if (std::fabs(ata[k][i]) > std::fabs(ata[p][i])) p = k;
    if (std::fabs(ata[p][i]) < 1e-300) return false;
    std::swap(ata[i], ata[p]);
    for (size_t k = 0; k < m; ++k) {
      if (k == i) continue;
      const double f = ata[k][i] / ata[i][i];
      for (size_t c = i; c <= m; ++c) ata[k][c] -= f * ata[i][c];
    }
  }
  x.assign(n, 0);
  for (size_t i = 0; i < m; ++i) x[cols[i]] = ata[i][m] / ata[i][i];
  return true;
}

}  // namespace

double calibrated_seconds(const SimCalibration& c, const StepSample& s) {
  const double mem = s.bytes_s / c.mem_efficiency, flops = s.flops_s / c.compute_efficiency;
  return c.step_overhead_s + c.per_seq_s * s.n_seqs + c.per_row_s * s.n_rows +
         (c.additive ? mem + flops : std::max(mem, flops));
}

double rms_relative_error(const SimCalibration& c, const std::vector<StepSample>& samples) {
  double sum = 0;
  for (const StepSample& s : samples) {
    const double e = calibrated_seconds(c, s) / s.measured_s - 1;
    sum += e * e;
  }
  return samples.empty() ? 0 : std::sqrt(sum / double(samples.size()));
}

namespace {

// One form of the fit (see the header); columns 1, seqs, memory term, compute term, each row
// divided by its measured time (relative errors).
Result<SimCalibration> fit_form(const std::vector<StepSample>& samples, bool additive) {
  std::vector<std::vector<double>> a;
  std::vector<double> b;
  for (const StepSample& s : samples) {
    const bool comp = s.flops_s > s.bytes_s;
    const double w = 1 / s.measured_s;
    const double mem = additive || !comp ? s.bytes_s : 0.0;
    const double flops = additive || comp ? s.flops_s : 0.0;
    a.push_back({w, double(s.n_seqs) * w, mem * w, flops * w});
    b.push_back(1.0);
  }
  // Non-negative least squares by elimination: a negative term is dropped and the rest refitted.
  std::vector<bool> use = {true, true, true, true};
  std::vector<double> x;
  for (int it = 0; it < 4; ++it) {
    if (!least_squares(a, b, use, x)) return make_error("calibration: singular fit");
    bool changed = false;
    for (size_t j = 0; j < 4; ++j) {
      if (use[j] && x[j] < 0) {
        use[j] = false;
        changed = true;
      }
    }
    if (!changed) break;
  }
  SimCalibration c;
  c.additive = additive;
  c.step_overhead_s = std::max(x[0], 0.0);
  c.per_seq_s = std::max(x[1], 0.0);
  // An efficiency may pass 1 a little: the cached roofline is one measurement of a shared host,
  // and the engine sometimes streams faster than the probe did. Capped at 2 (and 1 when the term
  // was dropped).
  c.mem_efficiency = x[2] > 0.5 ? 1 / x[2] : (use[2] ? 2.0 : 1.0);
  c.compute_efficiency = x[3] > 0.5 ? 1 / x[3] : (use[3] ? 2.0 : 1.0);
  return c;
}

}  // namespace

Result<SimCalibration> fit_calibration(const std::vector<StepSample>& samples) {
  int n_mem = 0, n_comp = 0;
  for (const StepSample& s : samples) {
    if (!(s.measured_s > 0)) return make_error("calibration: a step measured ", s.measured_s, " s");
    (s.flops_s > s.bytes_s ? n_comp : n_mem)++;
  }
  if (n_mem < 3 || n_comp < 3) {
    return make_error("calibration needs at least 3 memory-bound and 3 compute-bound steps (got ",
                      n_mem, " and ", n_comp, ")");
  }
  SLUICE_ASSIGN_OR_RETURN(SimCalibration overlapped, fit_form(samples, false));
  SLUICE_ASSIGN_OR_RETURN(SimCalibration additive, fit_form(samples, true));
  return rms_relative_error(additive, samples) < rms_relative_error(overlapped, samples)
             ? additive
             : overlapped;
}

Result<std::vector<StepSample>> measure_engine_steps(Engine& engine, const RecordingExecutor& rec,
                                                     const StepCostModel& cost, int max_seqs,
                                                     int max_batch_tokens, int32_t n_vocab_words) {
  std::vector<StepSample> out;
  std::mt19937_64 rng(7);
  const int32_t first = 3;
  std::uniform_int_distribution<int32_t> word(first, std::max(first, n_vocab_words - 1));
  auto prompt = [&](int n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = word(rng);
    return p;
  };
  auto run_step = [&]() -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    SLUICE_ASSIGN_OR_RETURN(std::vector<EngineEvent> ev, engine.step());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    (void)ev;
    if (rec.last_work().empty()) return {};
    const StepShape shape = make_step_shape(cost.model, cost.precision, rec.last_work());
    const StepFloors f = step_floors(shape, cost.hw);
    StepSample s;
    s.bytes_s = f.bytes_s;
    s.flops_s = f.flops_s;
    s.n_seqs = int(rec.last_work().size());
    s.n_rows = rec.last_rows();
    for (const SeqWork& w : rec.last_work()) s.n_tokens += int(w.n_new_tokens);
    s.measured_s = dt;
    out.push_back(s);
    return {};
  };
  GenerationParams gp;
  gp.sampling.temperature = 0;
  gp.ignore_eos = true;
  // Decode: b sequences of a short prompt, and a few batches of a longer one (KV bytes then vary
  // apart from the batch size, so the fit can tell per-sequence costs from bandwidth). Every step
  // is a sample, the prefill of each batch included.
  auto decode_runs = [&](int prompt_len, int max_b, int step_b) -> Status {
    for (int b = 1; b <= std::min(max_b, max_seqs); b *= step_b) {
      gp.max_tokens = 16;
      for (int i = 0; i < b; ++i) {
        SLUICE_RETURN_IF_ERROR(engine.add_request(prompt(prompt_len), gp).status());
      }
      while (engine.has_work()) SLUICE_RETURN_IF_ERROR(run_step());
    }
    return {};
  };
  SLUICE_RETURN_IF_ERROR(decode_runs(32, 32, 2));
  SLUICE_RETURN_IF_ERROR(decode_runs(256, 16, 4));
  // Prefill: one prompt in chunks (compute-bound on a CPU from a few dozen tokens).
  for (int n = 32; n <= max_batch_tokens; n *= 2) {
    gp.max_tokens = 1;
    SLUICE_RETURN_IF_ERROR(engine.add_request(prompt(n), gp).status());
    while (engine.has_work()) SLUICE_RETURN_IF_ERROR(run_step());
    SLUICE_RETURN_IF_ERROR(engine.add_request(prompt(n), gp).status());
    while (engine.has_work()) SLUICE_RETURN_IF_ERROR(run_step());
  }
  return out;
}

}  // namespace sluice::sim
