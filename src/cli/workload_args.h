// The workload options `sluice bench serve` and `sluice sim` share, so that a simulated and a
// measured run of the same flags send the same requests at the same times and report alike:
// --dataset (synthetic | jsonl:FILE | mooncake:FILE | multiturn), lengths, trace scaling,
// multi-turn shape, --rate / --sweep / --burstiness / --seed, SLOs and the report outputs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "loadgen/report.h"

namespace sluice::cli {

struct WorkloadOptions {
  std::string dataset = "synthetic";
  int num_prompts = 100;
  int input_len = 128;
  int output_len = 128;
  int prefix_len = 0;
  double range_ratio = 0;
  // Replays.
  double scale_tokens = 1;
  double scale_time = 1;
  int trace_start = 0;
  loadgen::MultiturnParams mt;
  // Arrivals.
  std::string rate = "inf";
  std::vector<std::string> sweep;
  double burstiness = 1.0;
  uint64_t seed = 0;
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  // Reports.
  std::string out;
  std::string plot;
  std::string output_format = "md";

  bool mooncake() const { return dataset.rfind("mooncake:", 0) == 0; }
  bool multiturn() const { return dataset == "multiturn"; }
};

// Adds every option of WorkloadOptions to `cmd` (`datasets`: the --dataset help text).
void add_workload_options(CLI::App* cmd, WorkloadOptions& o, const std::string& datasets);

// The rates to run (--sweep, else --rate), checked; a trace replay has its own times (no sweep).
Result<std::vector<double>> workload_rates(const WorkloadOptions& o);
loadgen::Slo workload_slo(const WorkloadOptions& o);

loadgen::SyntheticParams synthetic_params(const WorkloadOptions& o);
loadgen::MooncakeParams mooncake_params(const WorkloadOptions& o, int32_t vocab_size);
// The conversations start at `rate` conversations/s.
loadgen::MultiturnParams multiturn_params(const WorkloadOptions& o, double rate,
                                          int32_t vocab_size);

Status write_text(const std::string& path, const std::string& text);
// The runs' report on stdout (markdown + `md_extra`, or JSON), --out (JSON with every request)
// and --plot (the sweep's SVG).
Status write_reports(const WorkloadOptions& o, const std::vector<loadgen::RunResult>& runs,
                     const std::string& md_extra = "");

}  // namespace sluice::cli
