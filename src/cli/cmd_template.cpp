// `sluice template`: placeholder until its issue lands (prints an error, exits 1).
#include "cli/commands.h"

namespace sluice::cli {

void register_template(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("template", "(not yet available)");
  cmd->allow_extras();
  cmd->callback([&exit_code] { exit_code = report_error("template", "not implemented yet"); });
}

}  // namespace sluice::cli
