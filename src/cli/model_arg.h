// The MODEL argument of `sluice run` / `sluice info`: a local .gguf path, or a hub spec
// (hf://OWNER/REPO/FILE.gguf[@REVISION]) downloaded into the cache with a progress bar.
#pragma once

#include <string>

#include "base/status.h"

namespace sluice::cli {

// A local path for `spec` (see resolve_model in hub/hub.h). Endpoint, cache directory and
// token come from the environment (SLUICE_HF_ENDPOINT/HF_ENDPOINT, SLUICE_CACHE/XDG_CACHE_HOME,
// HF_TOKEN); HF_HUB_OFFLINE=1 restricts it to the cache.
Result<std::string> resolve_model_arg(const std::string& spec);

}  // namespace sluice::cli
