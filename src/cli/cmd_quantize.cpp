// `sluice quantize`: placeholder until its issue lands (prints an error, exits 1).
#include "cli/commands.h"

namespace sluice::cli {

void register_quantize(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("quantize", "(not yet available)");
  cmd->allow_extras();
  cmd->callback([&exit_code] { exit_code = report_error("quantize", "not implemented yet"); });
}

}  // namespace sluice::cli
