// `sluice bench --roofline`: measure and cache this machine's ceilings (read bandwidth, f32 FMA,
// bf16 and int8 dot-product peaks) used for MBU/MFU and `sluice plan --hw local`.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "perf/machine.h"

namespace sluice::cli {

void register_bench(CLI::App& app, int& exit_code) {
  struct Options {
    bool roofline = false;
    int threads = 0;
    std::string out;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmarks: --roofline measures this machine");
  cmd->add_flag("--roofline", opt->roofline,
                "Measure read bandwidth and peak FLOP/s; cache them for MBU/MFU and `plan --hw local`");
  cmd->add_option("-t,--threads", opt->threads, "Threads for the multi-threaded numbers (default: all)");
  cmd->add_option("--roofline-file", opt->out, "Where to cache the result (default: " +
                                                   default_roofline_path() + ")");
  cmd->callback([opt, &exit_code] {
    if (!opt->roofline) {
      exit_code = report_error("bench", "model benchmarks are not available yet; use --roofline");
      return;
    }
    std::fprintf(stderr, "measuring (about 10 s)...\n");
    MachineRoofline r = measure_machine_roofline(opt->threads);
    const std::string path = opt->out.empty() ? default_roofline_path() : opt->out;
    std::printf("cpu:                 %s\n", r.cpu.c_str());
    std::printf("read bandwidth:      %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n",
                r.read_gbps_1t, r.read_gbps, r.threads);
    std::printf("peak f32 FMA:        %.1f GFLOP/s\n", r.peak_gflops_f32);
    std::printf("peak bf16 dot:       %.1f GFLOP/s%s\n", r.peak_gflops_bf16,
                r.peak_gflops_bf16 > 0 ? "" : " (no AVX512-BF16)");
    std::printf("peak int8 dot:       %.1f GOP/s%s\n", r.peak_gops_int8,
                r.peak_gops_int8 > 0 ? "" : " (no AVX512-VNNI)");
    std::printf("ridge (f32):         %.1f FLOP/byte\n", r.peak_gflops_f32 / r.read_gbps);
    Status st = save_roofline(r, path);
    if (!st.ok()) {
      exit_code = report_error("bench", st.message());
      return;
    }
    std::printf("saved:               %s\n", path.c_str());
  });
}

}  // namespace sluice::cli
