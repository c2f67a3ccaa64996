// `sluice plan --model M --hw H`: the seeds' roofline serving analysis (perf/planner.h) for a
// preset or a GGUF file on preset or measured hardware. Text for people, JSON for scripts,
// and a Pareto SVG.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "cli/model_cost.h"
#include "gguf/gguf.h"
#include "perf/hardware.h"
#include "perf/planner.h"

namespace sluice::cli {
namespace {

struct Options {
  std::string model;
  std::string hw;
  int chips = 1;
  int weight_bits = -1;  // -1: 16 for presets, as stored for GGUF files
  int kv_bits = 16;
  int act_bits = 16;
  int64_t context = 8192;
  int block_size = 16;
  std::vector<int64_t> batches;
  bool sweep = false;
  double mfu = 0.4;
  int64_t prompt = 0;
  int64_t decode = 512;
  std::string format = "table";
  std::string plot;
  std::string roofline;  // --hw local cache file
  double kv_link_gbps = 0;
};

Result<PlanParams> build_params(const Options& o) {
  PlanParams p;
  SLUICE_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(o.model));
  if (shape) {
    p.model = model_cost(*shape);
    p.precision.weight_bits = o.weight_bits < 0 ? 16 : o.weight_bits;
  } else {
    const bool looks_like_file = o.model.find('/') != std::string::npos ||
                                 o.model.find(".gguf") != std::string::npos ||
                                 std::filesystem::exists(o.model);
    if (!looks_like_file) {
      return make_error("unknown model '", o.model, "': give a .gguf path or one of ",
                        model_shape_names());
    }
    SLUICE_ASSIGN_OR_RETURN(const std::string path, resolve_model_arg(o.model));
    SLUICE_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
    SLUICE_ASSIGN_OR_RETURN(p.model, model_cost_from_gguf(f));
    p.precision.weight_bits = o.weight_bits < 0 ? 0 : o.weight_bits;
  }
  if (o.hw == "local") {
    SLUICE_ASSIGN_OR_RETURN(p.chip, load_local_hardware(o.roofline));
  } else if (const HardwareSpec* hw = find_hardware(o.hw)) {
    p.chip = *hw;
  } else {
    return make_error("unknown hardware '", o.hw, "': use one of ", hardware_names());
  }
  p.n_chips = o.chips;
  p.precision.kv_bits = o.kv_bits;
  p.precision.act_bits = o.act_bits;
  p.context = o.context;
  p.block_size = o.block_size;
  if (!o.sweep) p.batches = o.batches;
  p.mfu = o.mfu;
  p.prompt_len = o.prompt;
  p.decode_len = o.decode;
  p.kv_link_bytes_per_s = o.kv_link_gbps * 1e9 / 8;
  return p;
}

Status run_plan(const Options& o) {
  SLUICE_ASSIGN_OR_RETURN(const PlanParams params, build_params(o));
  SLUICE_ASSIGN_OR_RETURN(const Plan plan, make_plan(params));
  if (!o.plot.empty()) {
    std::ofstream svg(o.plot, std::ios::binary);
    svg << pareto_svg(plan);
    if (!svg) return make_error("cannot write the plot to '", o.plot, "'");
  }
  const std::string text =
      o.format == "json" ? plan_to_json(plan).dump(2) + "\n" : plan_to_text(plan);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return {};
}

}  // namespace

void register_plan(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Roofline serving plan: memory, critical batch, step time and throughput against "
      "batch size, prefill time, prefill:generate ratio, tensor-parallel limits");
  cmd->add_option("--model", opt->model,
                  "GGUF path (or hf:// spec) or preset: " + model_shape_names())
      ->required();
  cmd->add_option("--hw", opt->hw, "Hardware: " + hardware_names())->required();
  cmd->add_option("--chips", opt->chips, "Number of chips, model fully sharded over them")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--weight-bits", opt->weight_bits,
                  "Bits per weight: 16, 8 or 4 (default: 16 for presets, as stored for GGUF)")
      ->check(CLI::IsMember({16, 8, 4}));
  cmd->add_option("--kv-bits", opt->kv_bits, "Bits per KV cache element: 16, 8 or 4")
      ->capture_default_str()
      ->check(CLI::IsMember({16, 8, 4}));
  cmd->add_option("--act-bits", opt->act_bits,
                  "Bits per activation: 16 (bf16 FLOPs) or 8 (int8 FLOPs)")
      ->capture_default_str()
      ->check(CLI::IsMember({16, 8}));
  cmd->add_option("--context", opt->context, "KV tokens per sequence")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", opt->block_size,
                  "Tokens per KV block (a sliding-window layer keeps its window's blocks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  auto* batch = cmd->add_option("--batch", opt->batches, "Generate batch size(s), e.g. 1,8,240")
                    ->delimiter(',')
                    ->check(CLI::PositiveNumber);
  auto* sweep = cmd->add_flag("--batch-sweep", opt->sweep,
                              "Sweep batch sizes (powers of two, critical and largest; default)");
  batch->excludes(sweep);
  cmd->add_option("--mfu", opt->mfu, "Prefill FLOPs utilization")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--prompt", opt->prompt, "Prefill length in tokens (default: --context)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--decode", opt->decode, "Median generated tokens per request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-link-gbps", opt->kv_link_gbps,
                  "Disaggregated serving: the prefill -> decode link in Gbit/s; reports the "
                  "prompt's K/V transfer time (e.g. 100 for 100 GbE, 400 for InfiniBand NDR)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--output-format", opt->format, "table or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--plot", opt->plot, "Write the latency-throughput Pareto plot (SVG) here");
  cmd->add_option("--roofline", opt->roofline,
                  "Roofline cache for --hw local (default: the `sluice bench --roofline` cache)");
  cmd->callback([opt, &exit_code] {
    if (Status s = run_plan(*opt); !s.ok()) exit_code = report_error("plan", s.message());
  });
}

}  // namespace sluice::cli
