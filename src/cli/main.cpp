// sluice: one executable, one subcommand per front end.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/parallel_session.h"
#include "kernels/matmul_isa.h"

namespace sluice::cli {

int report_error(std::string_view command, std::string_view message) {
  std::string line = "sluice " + std::string(command) + ": error: " + std::string(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  return 1;
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  // One ISA per process: a SLUICE_ISA this CPU cannot run is refused before anything runs.
  if (const sluice::Result<sluice::MatmulIsa> isa = sluice::matmul_isa_from_env(); !isa.ok()) {
    std::fprintf(stderr, "sluice: error: %s\n", isa.status().message().c_str());
    return 2;
  }
  sluice::cli::set_command_line(argc, argv);
  CLI::App app{"sluice: run and serve large language models fast"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  int exit_code = 0;
  sluice::cli::register_run(app, exit_code);
  sluice::cli::register_info(app, exit_code);
  sluice::cli::register_tokenize(app, exit_code);
  sluice::cli::register_vocab(app, exit_code);
  sluice::cli::register_template(app, exit_code);
  sluice::cli::register_synth(app, exit_code);
  sluice::cli::register_quantize(app, exit_code);
  sluice::cli::register_perplexity(app, exit_code);
  sluice::cli::register_bench(app, exit_code);
  sluice::cli::register_bench_throughput(app, exit_code);
  sluice::cli::register_bench_serve(app, exit_code);
  sluice::cli::register_bench_grammar(app, exit_code);
  sluice::cli::register_plan(app, exit_code);
  sluice::cli::register_serve(app, exit_code);
  sluice::cli::register_router(app, exit_code);
  sluice::cli::register_sim(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
