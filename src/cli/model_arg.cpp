#include "cli/model_arg.h"

#include <cstdlib>
#include <string>

#include "cli/progress.h"
#include "hub/hub.h"

namespace sluice::cli {
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  const std::string s(v);
  return s == "1" || s == "true" || s == "TRUE" || s == "yes" || s == "on" || s == "ON";
}

}  // namespace

Result<std::string> resolve_model_arg(const std::string& spec) {
  HubOptions opts;
  opts.offline = env_flag("HF_HUB_OFFLINE");
  if (!is_hub_spec(spec)) return resolve_model(spec, opts);

  // Label: the file name, without owner/repo/revision (the log line names the URL).
  std::string label = spec;
  if (auto parsed = parse_hub_spec(spec); parsed.ok()) {
    const size_t slash = parsed->file.rfind('/');
    label = slash == std::string::npos ? parsed->file : parsed->file.substr(slash + 1);
  }
  ProgressBar bar(label);
  opts.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  return resolve_model(spec, opts);
}

}  // namespace sluice::cli
