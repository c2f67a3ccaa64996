// `sluice info`: placeholder until its issue lands (prints an error, exits 1).
#include "cli/commands.h"

namespace sluice::cli {

void register_info(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("info", "(not yet available)");
  cmd->allow_extras();
  cmd->callback([&exit_code] { exit_code = report_error("info", "not implemented yet"); });
}

}  // namespace sluice::cli
